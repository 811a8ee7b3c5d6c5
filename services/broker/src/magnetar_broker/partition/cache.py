"""A partition's entry cache and its reads: the newest entries in memory (bounded in
bytes), older ones from the database.  The writer appends what it stored; trimming
drops what the database no longer has."""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable
from dataclasses import replace

from magnetar_broker.entry import Entry
from magnetar_broker.store import BrokerStore


class EntryCache:
    def __init__(self, store: BrokerStore, topic_id: int, max_bytes: int) -> None:
        self.store = store
        self.topic_id = topic_id
        self.max_bytes = max_bytes
        self.entries: deque[Entry] = deque()
        self.bytes = 0

    def append(self, entry: Entry) -> None:
        self.entries.append(entry)
        self.bytes += entry.size()
        # Keep at least the newest entry so tailing reads stay in memory.
        while self.bytes > self.max_bytes and len(self.entries) > 1:
            self.bytes -= self.entries.popleft().size()

    def trimmed(self, first_entry_id: int) -> None:
        """Entries below ``first_entry_id`` are gone from the database: forget them here."""
        while self.entries and self.entries[0].entry_id < first_entry_id and len(self.entries) > 1:
            self.bytes -= self.entries.popleft().size()

    async def read(self, start: int, end: int, max_entries: int) -> list[Entry]:
        """Entries from ``start`` on, below ``end`` (the log's head), at most ``max_entries``."""
        if start >= end or max_entries <= 0:
            return []
        cache = self.entries
        if cache and start >= cache[0].entry_id:
            offset = start - cache[0].entry_id
            got = list(itertools.islice(cache, offset, offset + max_entries))
            for i, entry in enumerate(got):
                if entry.parts is not None:  # a marker this broker committed: join once
                    got[i] = replace(entry, payload=b"".join(entry.parts), parts=None)
                    self._replace(entry, got[i])
                elif entry.payload is None:  # a marker of a transaction too big to keep in memory
                    assert entry.txn is not None
                    got[i] = replace(entry, payload=await self.store.txn_payload(self.topic_id, entry.txn))
            return got
        return await self.store.read_entries(self.topic_id, start, end, max_entries)

    def _replace(self, old: Entry, new: Entry) -> None:
        if self.entries:
            at = old.entry_id - self.entries[0].entry_id
            if 0 <= at < len(self.entries) and self.entries[at] is old:  # not evicted meanwhile
                self.entries[at] = new

    async def message_counts(self, entry_ids: Iterable[int], end: int) -> dict[int, int]:
        """{entry id: its number of messages} of those of ``entry_ids`` that exist below
        ``end`` (from the cache when there, else one query)."""
        out: dict[int, int] = {}
        missing = []
        cache = self.entries
        first = cache[0].entry_id if cache else 0
        for entry_id in set(entry_ids):
            if cache and first <= entry_id < first + len(cache):
                out[entry_id] = cache[entry_id - first].num_messages
            elif 0 <= entry_id < end:
                missing.append(entry_id)
        if missing:
            out.update(await self.store.message_counts(self.topic_id, missing))
        return out
