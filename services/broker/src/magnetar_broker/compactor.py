"""Topic compaction of the partitions this broker owns (docs/operations.md): Pulsar's
two-phase compactor over the previous compacted view and the log up to a new horizon,
written aside as the view's next generation and switched in one statement.

A run, under the partition's lease (every statement checks it):
1. marks the run begun (``RUNNING``), protects from trimming what it will read, and
   drops what a run that died left half written (any generation but the view's);
2. phase one reads every message below the new horizon (the log's head when the run
   started: later messages stay in the tail) in order, the previous view's first, and
   notes the latest of each key (partition/survivors.py, the rule);
3. phase two reads them again and writes the entries that keep a message, a page per
   statement, as generation + 1;
4. switches the view to it with its horizon in one statement (only from the generation
   it started from), then drops the previous generation in bounded batches.
A broker killed anywhere before 4 leaves the previous view whole and readers on it; the
next run (this broker's or the next owner's) starts over.  After 4 the view is the new
one whatever happens next.  Only committed messages are in the log, so only they are
compacted; compacted data lives apart from the log and outlives its retention.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from google.protobuf.message import DecodeError

from magnetar_broker import metrics
from magnetar_broker.entry import Entry
from magnetar_broker.partition.compacted import ERROR, RUNNING, SUCCESS
from magnetar_broker.partition.log import PartitionLog
from magnetar_broker.partition.survivors import Candidate, Survivors, candidates, compact_batch
from magnetar_broker.settings import BrokerSettings
from magnetar_broker.store import CompactedRow
from magnetar_protocol.errors import BadRequest, Conflict, MagnetarError
from magnetar_runtime.failpoints import failpoint

log = logging.getLogger("magnetar.broker.compaction")


class Compactor:
    def __init__(self, settings: BrokerSettings) -> None:
        self.retain_null_key = settings.compaction_retain_null_key
        self.page = settings.compaction_page_entries
        self.runs: dict[int, asyncio.Task[None]] = {}   # topic id -> its run under way

    def running(self, plog: PartitionLog) -> bool:
        task = self.runs.get(plog.topic_id)
        return task is not None and not task.done()

    def status(self, plog: PartitionLog) -> dict:
        """Pulsar's LongRunningProcessStatus of the partition's compaction."""
        view = plog.compacted
        status = RUNNING if self.running(plog) else view.status
        return {"status": status, "lastError": view.last_error if status == ERROR else ""}

    def trigger(self, plog: PartitionLog) -> asyncio.Task[None]:
        """Start a run in the background; Conflict when one is under way (Pulsar's 409)."""
        if self.running(plog):
            raise Conflict(f"compaction of {plog.name.full} is already in progress")
        task = asyncio.get_running_loop().create_task(self._run_logged(plog),
                                                      name=f"compaction {plog.name.full}")
        self.runs[plog.topic_id] = task
        task.add_done_callback(self._forget)
        return task

    def _forget(self, task: asyncio.Task[None]) -> None:
        for topic_id, run in list(self.runs.items()):
            if run is task:
                del self.runs[topic_id]

    async def _run_logged(self, plog: PartitionLog) -> None:
        try:
            await self.run(plog)
        except Exception:
            if not plog.closed:
                log.exception("compaction of %s failed", plog.name.full)

    async def run(self, plog: PartitionLog) -> None:
        """One run (see the module's docstring); raises what made it fail."""
        view = plog.compacted
        store = plog.store
        started = await plog.lease_checked("starting a compaction", store.start_compaction(plog.topic_id, plog.epoch),
                                           lambda r: r is not None)
        assert started is not None
        old_generation, old_horizon = started
        view.running_from = old_horizon if old_generation else plog.first_entry_id
        view.status, view.last_error = RUNNING, ""
        horizon = plog.next_entry_id
        generation = old_generation + 1
        try:
            await self._drop(plog, keep=old_generation)
            survivors = Survivors(retain_null_key=self.retain_null_key)
            async for entry, entry_candidates, allowed in self._messages(plog, old_generation, old_horizon, horizon):
                for i, c in enumerate(entry_candidates):
                    if allowed >> i & 1:
                        survivors.note((entry.entry_id, i), c)
            log.info("compaction of %s: %d messages below entry %d, %d keys", plog.name.full, survivors.noted,
                     horizon, len(survivors.latest))
            page: list[CompactedRow] = []
            written = 0
            async for entry, entry_candidates, allowed in self._messages(plog, old_generation, old_horizon, horizon):
                kept = [i for i in survivors.kept(entry.entry_id, entry_candidates) if allowed >> i & 1]
                if not kept:
                    continue
                page.append(CompactedRow(entry.entry_id, entry.producer_name, entry.num_messages, entry.publish_time,
                                         tuple(kept), compact_batch(entry.payload or b"", kept)))
                if len(page) >= self.page:
                    written += await self._write(plog, generation, page)
                    page = []
            written += await self._write(plog, generation, page)
            failpoint("broker.compaction.before_switch")
            await plog.lease_checked(
                "switching the compacted view",
                store.finish_compaction(plog.topic_id, plog.epoch, generation, horizon, old_generation))
            view.switched(generation, horizon)
            view.status = SUCCESS
            metrics.COMPACTIONS.inc()
            log.info("compacted %s below entry %d: %d entries keep a message (generation %d)", plog.name.full,
                     horizon, written, generation)
        except Exception as exc:
            if plog.closed:
                raise
            view.status, view.last_error = ERROR, f"{type(exc).__name__}: {exc}"
            await plog.lease_checked("recording a failed compaction",
                                     store.fail_compaction(plog.topic_id, plog.epoch, view.last_error))
            raise
        finally:
            view.running_from = None
        await self._drop(plog, keep=generation)

    async def _write(self, plog: PartitionLog, generation: int, page: list[CompactedRow]) -> int:
        if page:
            await plog.lease_checked("writing a compacted view",
                                     plog.store.write_compacted(plog.topic_id, plog.epoch, generation, page))
            failpoint("broker.compaction.after_page")
        return len(page)

    async def _drop(self, plog: PartitionLog, keep: int) -> None:
        """Delete every generation but ``keep``, one bounded batch a statement."""
        while True:
            _, deleted = await plog.lease_checked(
                "dropping a compacted view",
                plog.store.drop_compacted(plog.topic_id, plog.epoch, keep, self.page), lambda r: r[0])
            if deleted < self.page:
                return

    async def _messages(self, plog: PartitionLog, old_generation: int, old_horizon: int,
                        horizon: int) -> AsyncIterator[tuple[Entry, list[Candidate], int]]:
        """Every entry below ``horizon`` in order, the previous view's then the log's,
        with what compaction reads of each message and the mask of those that count
        (a view's entry: its kept messages)."""
        position = 0
        if old_generation:
            while True:
                got = await plog.compacted.read(position, self.page) if plog.compacted.generation == old_generation \
                    else []
                if not got:
                    break
                for entry in got:
                    yield entry, _candidates(entry), entry.kept if entry.kept is not None else -1
                position = got[-1].entry_id + 1
        position = max(old_horizon, plog.first_entry_id)
        while position < horizon:
            plog.check_open()
            got = [e for e in await plog.read(position, self.page) if e.entry_id < horizon]
            if not got:
                break
            for entry in got:
                yield entry, _candidates(entry), -1
            position = got[-1].entry_id + 1


def _candidates(entry: Entry) -> list[Candidate]:
    """What compaction reads of an entry; one that does not decode is kept whole (as
    Pulsar's compactor includes a batch it cannot read)."""
    try:
        found = candidates(entry.payload or b"")
    except (DecodeError, RuntimeWarning, BadRequest, MagnetarError):
        found = []
    if len(found) != entry.num_messages:
        return [Candidate(None, encrypted=True)] * entry.num_messages
    return found
