"""What a partition serves by name (its subscriptions): the one place one is opened, under
the one lock, so a name is opened once however many callers ask at the same time.  The
partition knows its subscriptions only as values of this registry: what they are is
subscription/'s business (it opens them through ``get_or_open``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, ItemsView, Iterator, ValuesView
from typing import Generic, TypeVar

S = TypeVar("S")


class Registry(Generic[S]):
    def __init__(self) -> None:
        self._by_name: dict[str, S] = {}
        # Taken to open one, and by whoever must not race an opening (trimming: a new
        # subscription from Earliest must not start below what a trim batch deletes).
        self.lock = asyncio.Lock()

    async def get_or_open(self, name: str, open_: Callable[[], Awaitable[S]]) -> S:
        """The one served as ``name``, or, when there is none, ``open_()``'s (served as
        ``name`` from then on; ``open_`` may raise instead, and nothing is served)."""
        async with self.lock:
            found = self._by_name.get(name)
            if found is not None:
                return found
            opened = await open_()
            self._by_name[name] = opened
            return opened

    def get(self, name: str) -> S | None:
        return self._by_name.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __len__(self) -> int:
        return len(self._by_name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_name)

    def values(self) -> ValuesView[S]:
        return self._by_name.values()

    def items(self) -> ItemsView[str, S]:
        return self._by_name.items()

    def remove(self, name: str, which: S | None = None) -> None:
        """Stop serving ``name`` (only if it is still ``which``, when given)."""
        if which is None or self._by_name.get(name) is which:
            self._by_name.pop(name, None)

    def clear(self) -> list[S]:
        """Stop serving all of them (the partition was lost); those that were served."""
        gone = list(self._by_name.values())
        self._by_name.clear()
        return gone
