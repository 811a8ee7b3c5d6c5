"""A partition's writer: the one group-commit pipeline of its log.  It plans a queued group
(partition/planner.py, pure), stores it in one lease-checked statement, and applies
what was written; ``apply`` is the only place a written group changes the partition in
memory (log head, dedup state, transaction buffer, cache, counters), whether the group
went through the queue or was written in another SQL transaction (a one-phase end:
``write_in`` then ``applied``; a one-request commit: ``plan_committed`` then
``committed``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from magnetar_broker import metrics
from magnetar_broker.partition.access import AccessState
from magnetar_broker.partition.cache import EntryCache
from magnetar_broker.partition.dedupstate import DedupState
from magnetar_broker.partition.lease import Lease
from magnetar_broker.partition.planner import (
    Append,
    GroupPlan,
    PlainPlan,
    Settled,
    TxnAppend,
    TxnEnd,
    plan_plain,
)
from magnetar_broker.partition.quotagate import QuotaGate
from magnetar_broker.partition.txnbuffer import TxnBuffer
from magnetar_broker.rates import Rate
from magnetar_broker.store import BrokerStore, Registration
from magnetar_protocol.errors import MagnetarError, NotOwner, ProducerFenced, TopicTerminated
from magnetar_runtime.error_answers import write_failure
from magnetar_runtime.groupcommit import GroupCommit

Item = Append | TxnAppend | TxnEnd


class WriterLease(Lease, Protocol):
    """What the writer needs of its partition: its lease, and whether it was terminated
    (sends are refused then, ends still written)."""

    @property
    def terminated_entry(self) -> int | None: ...


@dataclass(slots=True)
class Written:
    """A transactional group written in someone else's SQL transaction, not applied yet."""
    plan: GroupPlan
    registered: list[Registration]


@dataclass(frozen=True, slots=True)
class NotWritten:
    """``write_in`` wrote nothing; ``lease_lost``: because another broker holds the lease
    now (the partition stops being served here once the caller rolled back)."""
    lease_lost: bool = False


class Writer:
    def __init__(self, lease: WriterLease, store: BrokerStore, access: AccessState, dedup: DedupState,
                 txnbuf: TxnBuffer, cache: EntryCache, quota: QuotaGate, max_batches_per_commit: int) -> None:
        self.lease = lease
        self.store = store
        self.access = access
        self.dedup = dedup
        self.txnbuf = txnbuf
        self.cache = cache
        self.quota = quota
        self.next_entry_id = 0  # the log's head: the id the next entry gets
        self.msg_in = 0
        self.bytes_in = 0
        self.rate_in = Rate(time.monotonic())  # msgRateIn / msgThroughputIn
        self._queue: GroupCommit[Item, Any] = GroupCommit(self._commit, max_batches_per_commit)

    # ---------------------------------------------------------------- the queue

    def submit(self, item: Item) -> asyncio.Future[Any]:
        queued: asyncio.Future[Any] = self._queue.submit(item)
        return queued

    async def idle(self) -> None:
        await self._queue.idle()

    def hold(self) -> asyncio.Lock:
        """``async with``: no group is written until the block ends (a one-phase end
        writes this partition's part in its own SQL transaction meanwhile)."""
        held: asyncio.Lock = self._queue.hold()
        return held

    def fail_pending(self, exc: Exception) -> None:
        self._queue.fail_pending(exc)

    async def _commit(self, queued: list[Item]) -> list[Any]:
        if self.lease.terminated_entry is not None and any(isinstance(i, Append) for i in queued):
            # Sends admitted just before `terminate` are refused; transaction endings pass.
            err = TopicTerminated(f"{self.lease.name.full} was terminated; it takes no more messages")
            rest = [i for i in queued if not isinstance(i, Append)]
            by_item = dict(zip(map(id, rest), await self._commit_group(rest) if rest else []))
            return [by_item.get(id(i), err) for i in queued]
        return await self._commit_group(queued)

    async def _commit_group(self, queued: Sequence[Item]) -> list[Any]:
        self.lease.check_open()
        # Batches of a producer fenced while they waited here are never stored.
        items = [i for i in queued if not getattr(i.producer, "fenced", False)]
        if not items:
            return [_fenced(i.producer) for i in queued]
        if any(type(i) is not Append for i in items):
            settled = await self._write_mixed(items)
        else:
            settled = await self._write_plain([i for i in items if type(i) is Append])
        self.apply(settled, len(items))
        by_item = dict(zip(map(id, items), settled.results))
        return [by_item[id(i)] if id(i) in by_item else _fenced(i.producer) for i in queued]

    async def _write_plain(self, items: list[Append]) -> Settled:
        plan = plan_plain(items, self.next_entry_id, self.dedup.enabled, int(time.time() * 1000))
        try:
            owned, allowed = await self.store.append_entries(
                self.lease.topic_id, self.lease.epoch, plan.columns, plan.sequences,
                self.access.exclusive_epoch(), plan.delays,
            )
        except MagnetarError:
            raise
        except Exception as exc:
            # The commit's outcome is unknown: drop every in-memory assumption and let
            # the next request reload the partition from the database.
            self.lease.lose(f"write failed: {exc}")
            raise write_failure(exc, f"could not store batch on {self.lease.name.full}") from exc
        if not owned:
            self.lease.lose("fenced: another broker took the topic over")
            raise NotOwner(f"{self.lease.name.full} moved to another broker; look it up again")
        if not allowed:
            self.lease.lose("topic epoch changed under this broker")
            raise ProducerFenced(f"the topic epoch of {self.lease.name.full} moved on; batch refused")
        return Settled(list(plan.columns[0]), plan.entries(), {}, 0, [], plan.sequences, plan.next_entry_id)

    async def _write_mixed(self, items: Sequence[Item]) -> Settled:
        try:
            settled = await self.txnbuf.commit_group(list(items), self.next_entry_id, self.dedup.enabled,
                                                     self.lease.epoch, self.access.exclusive_epoch())
        except ProducerFenced:
            self.lease.lose("topic epoch changed under this broker")
            raise
        except Exception as exc:
            self.lease.lose(f"write failed: {exc}")
            raise write_failure(exc, f"could not write to {self.lease.name.full}") from exc
        if settled is None:
            self.lease.lose("fenced: another broker took the topic over")
            raise NotOwner(f"{self.lease.name.full} moved to another broker; look it up again")
        return settled

    # ---------------------------------------------------------------- in another SQL transaction

    async def write_in(self, conn: Any, items: list[Item]) -> Written | NotWritten:
        """Write a group (a one-phase end's markers and outcomes)
        in ``conn``'s SQL transaction, with the writer held by the caller (``hold``),
        changing nothing in memory; ``applied`` once it committed.  NotWritten, with
        nothing written, when it is not this path's to write: the partition is no longer
        served here, a transaction of an end already ended here, the lease or the topic
        epoch moved."""
        if self.lease.closed:
            return NotWritten()
        for item in items:
            if isinstance(item, TxnEnd) and (await self.txnbuf.state(item.txn)).committed is not None:
                return NotWritten()  # ended here already: the two-phase path answers that
        plan, written = await self.txnbuf.write_group(
            items, self.next_entry_id, self.dedup.enabled, self.lease.epoch, self.access.exclusive_epoch(),
            conn=conn)
        if not written.owned:
            return NotWritten(lease_lost=True)
        if not written.allowed:
            return NotWritten()
        return Written(plan, written.registered)

    def applied(self, written: Written) -> None:
        """``write_in``'s SQL transaction committed: apply it."""
        self.apply(self.txnbuf.settle(written.plan, written.registered), len(written.plan.results))

    # ---------------------------------------------------------------- committed at once

    def plan_committed(self, items: list[Append]) -> PlainPlan:
        """A one-request commit's batches for this partition (the writer held by the
        caller, ``hold``): entries at the log's head, in order, as committed entries (no
        buffer, no marker); nothing changes here until ``committed``.  TopicTerminated
        or NotOwner when the partition takes no more sends (nothing planned)."""
        self.lease.check_open()
        if self.lease.terminated_entry is not None:
            raise TopicTerminated(f"{self.lease.name.full} was terminated; it takes no more messages")
        for item in items:
            if getattr(item.producer, "fenced", False):
                raise _fenced(item.producer)
        return plan_plain(items, self.next_entry_id, self.dedup.enabled, int(time.time() * 1000))

    def committed(self, plan: PlainPlan) -> None:
        """``plan_committed``'s entries were written and committed: apply them."""
        count = len(plan.columns[0])
        self.apply(Settled(list(plan.columns[0]), plan.entries(), {}, 0, [], plan.sequences,
                           plan.next_entry_id), count)

    # ---------------------------------------------------------------- the one apply

    def apply(self, settled: Settled, group_size: int) -> None:
        """The in-memory effects of a written group."""
        self.next_entry_id = settled.next_entry_id
        self.dedup.stored(settled.sequences)
        total = nbytes = 0
        for entry in settled.cached:
            self.cache.append(entry)
            total += entry.num_messages
            nbytes += entry.size()
        self.bytes_in += nbytes
        self.quota.appended(nbytes)
        self.msg_in += total
        self.rate_in.add(time.monotonic(), total, nbytes)
        metrics.MESSAGES_IN.inc(total)
        metrics.COMMIT_BATCHES.observe(group_size)
        if settled.cached or settled.ended:  # an abort too: a terminate may wait for it
            self.lease.wake()


def _fenced(producer: object) -> ProducerFenced:
    name = getattr(producer, "name", "?")
    return ProducerFenced(f"producer {name!r} was fenced before its batch was stored")
