"""A partition's compacted view (topic compaction, docs/operations.md): which generation
of ``compacted_entries`` readers with ``read_compacted`` use, its horizon (the view holds
the log below it; the log serves the rest), and reads of it.  The compactor
(compactor.py) writes a new generation aside and, once its switch has committed, tells
this part (``switched``); a read that ran across a switch reads again from the new
generation, so a reader never takes a generation being dropped for the end of the view.
"""

from __future__ import annotations

from magnetar_broker.entry import Entry
from magnetar_broker.store import BrokerStore, CompactedRow

NOT_RUN, RUNNING, SUCCESS, ERROR = "NOT_RUN", "RUNNING", "SUCCESS", "ERROR"


def _entry(row: CompactedRow) -> Entry:
    kept = 0
    for i in row.kept:
        kept |= 1 << i
    return Entry(row.entry_id, row.producer_name, row.num_messages, row.publish_time, row.payload, kept=kept)


class CompactedView:
    def __init__(self, store: BrokerStore, topic_id: int) -> None:
        self.store = store
        self.topic_id = topic_id
        self.generation = 0   # 0: never compacted
        self.horizon = 0
        self.status = NOT_RUN
        self.last_error = ""
        # A run under way here: the horizon it started from, below which nothing it
        # reads may be trimmed until it switches the view (trim_floor).
        self.running_from: int | None = None

    async def load(self) -> None:
        state = await self.store.compaction_state(self.topic_id)
        if state is not None:
            self.generation, self.horizon = state.generation, state.horizon
            self.status, self.last_error = state.status, state.last_error
            if self.status == RUNNING:
                # Recorded by a run that is not this broker's: it died with its broker
                # (or the partition moved away from it).  Nothing of it is visible.
                self.status = ERROR
                self.last_error = ("interrupted: the broker running it stopped serving the partition; "
                                   "the view is the previous one; run it again")

    @property
    def exists(self) -> bool:
        return self.generation > 0

    def trim_floor(self) -> int | None:
        """The lowest entry id trimming must keep for compaction: the horizon once the
        topic was compacted (what lies past it is not in the view yet, as Pulsar's
        compaction cursor holds its backlog), or where a run under way started."""
        floors = [f for f in (self.horizon if self.exists else None, self.running_from) if f is not None]
        return min(floors) if floors else None

    def switched(self, generation: int, horizon: int) -> None:
        """A run's switch committed: readers move to its view."""
        self.generation, self.horizon = generation, horizon

    async def read(self, start: int, max_entries: int) -> list[Entry]:
        """The view's entries from ``start`` on, below the horizon (at most
        ``max_entries``); [] when the view holds nothing more there."""
        while True:
            generation, horizon = self.generation, self.horizon
            if generation == 0 or start >= horizon:
                return []
            rows = await self.store.read_compacted(self.topic_id, generation, start, horizon, max_entries)
            if generation == self.generation:
                return [_entry(r) for r in rows]
            # Switched meanwhile (the old generation may be going): read the new one.

    async def read_one(self, entry_id: int) -> Entry | None:
        got = await self.read(entry_id, 1)
        return got[0] if got and got[0].entry_id == entry_id else None

    async def last(self) -> tuple[int, int] | None:
        """(entry id, batch index) of the view's last message; None when it is empty."""
        while True:
            generation = self.generation
            if generation == 0:
                return None
            found = await self.store.last_compacted(self.topic_id, generation)
            if generation == self.generation:
                return None if found is None else (found[0], max(found[1]))
