"""A partition's PIP-6 dedup state in memory: the last sequence id persisted per producer
name, and the last one admitted (including batches not yet committed).  This class is
its only mutator: admission notes what it admits, the writer what it stored, the
dedup-expiry loop what it forgot, the policy refresh a change of the setting.  The rules
themselves are pure (partition/dedup.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping


class DedupState:
    def __init__(self, enabled: bool, load: Callable[[str], Awaitable[int]]) -> None:
        self.enabled = enabled
        self._load = load  # the persisted last sequence id of a producer name (-1: none)
        self._persisted: dict[str, int] = {}
        self._pushed: dict[str, int] = {}

    async def last_persisted(self, name: str) -> int:
        """The last sequence id of ``name`` stored, loaded from the database once."""
        if name not in self._persisted:
            last = await self._load(name)
            # Another load may have raced us; the larger value is the truth.
            self._persisted[name] = max(last, self._persisted.get(name, -1))
            self._pushed.setdefault(name, self._persisted[name])
        return self._persisted[name]

    def last_pushed(self, name: str) -> int:
        """The last sequence id of ``name`` admitted, stored or not yet (-1: none)."""
        return self._pushed.get(name, -1)

    def admitted(self, name: str, highest: int) -> None:
        self._pushed[name] = highest

    def stored(self, sequences: Mapping[str, int]) -> None:
        """A written group's highest sequence id per producer name."""
        for name, seq in sequences.items():
            self._persisted[name] = max(seq, self._persisted.get(name, -1))

    def forget(self, names: Iterable[str]) -> None:
        """Producer names whose state the database forgot (idle expiry)."""
        for name in names:
            self._persisted.pop(name, None)
            self._pushed.pop(name, None)

    def set_enabled(self, enabled: bool) -> None:
        """The namespace's setting changed.  State is not kept while off, so it is
        reloaded from the database when it comes back."""
        if enabled != self.enabled:
            self.enabled = enabled
            self._persisted.clear()
            self._pushed.clear()
