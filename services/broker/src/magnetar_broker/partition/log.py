"""An owned partition (docs/architecture.md, "The broker by role"): the partition
itself (lease, notifications, termination) and the parts it is composed of, each the
owner of its state.  Writes go through one group-commit pipeline per partition (the
writer); every statement compares the ownership epoch, so a fenced broker stores
nothing."""
from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from magnetar_broker import metrics
from magnetar_broker.entry import Entry
from magnetar_broker.partition.access import AccessState
from magnetar_broker.partition.admission import Admission
from magnetar_broker.partition.batchcheck import WHOLE, PositionLike, batch_index_problem
from magnetar_broker.partition.cache import EntryCache
from magnetar_broker.partition.compacted import CompactedView
from magnetar_broker.partition.dedupstate import DedupState
from magnetar_broker.partition.planner import Append
from magnetar_broker.partition.quotagate import QuotaGate
from magnetar_broker.partition.registry import Registry
from magnetar_broker.partition.sends import Batch, Sent
from magnetar_broker.partition.txnbuffer import TxnBuffer
from magnetar_broker.partition.writer import Writer
from magnetar_broker.rates import Rate
from magnetar_broker.store import BrokerStore
from magnetar_protocol.errors import (
    BadRequest,
    Conflict,
    MagnetarError,
    NotOwner,
    ProducerFenced,
    TopicTerminated,
)
from magnetar_protocol.policies import DelayedDelivery
from magnetar_protocol.topics import TopicName
from magnetar_runtime.roles import Roles

log = logging.getLogger("magnetar.broker.topic")
T = TypeVar("T")

PULSAR_DELAYED_DELIVERY = DelayedDelivery()  # on, 1 s ticks, no limit: Pulsar's broker defaults

# terminated_entry while a terminate waits for the writes before it: sends are refused.
TERMINATING = -2

@dataclass(eq=False)
class Producer:
    producer_id: int
    name: str
    session_id: str
    access_mode: int
    log: PartitionLog
    role: str = ""  # the role that created it: only that role may use its id
    client_producer_id: int = 0  # the client's id for it: tells a retried create from another
    topic_epoch: int | None = None
    schema_version: int | None = None  # its schema's version (None: it has no schema)
    # schemaValidationEnforced: each payload's check against the topic's schema
    # (partition/payloadcheck.py); None: not checked.
    payload_check: Callable[[bytes], str | None] | None = field(default=None, repr=False, compare=False)
    msg_in: int = 0
    bytes_in: int = 0
    created_at: float = field(default_factory=time.time)
    closed: bool = False
    fenced: bool = False  # lost exclusivity: every later send fails with ProducerFenced
    # Called with the reason when the broker detaches it (fenced, topic lost, session
    # gone): a front end that pushes closes to its client (the Pulsar listener) sets it.
    on_detached: Callable[[str], None] | None = field(default=None, repr=False, compare=False)

    def detached(self, reason: str) -> None:
        if self.on_detached is not None:
            self.on_detached(reason)

    def check_not_fenced(self) -> None:
        if self.fenced:
            raise ProducerFenced(
                f"producer {self.name!r} was fenced on {self.log.name.full}: another exclusive "
                "producer took over"
            )


class PartitionLog:
    """An owned partition, composed of parts that each own their state: admission (the
    checks and the dedup verdict), the dedup state, the writer (the one place a written
    group is applied), the entry cache and reads, the backlog-quota gate, the
    transaction buffer, and the registries of producers and subscriptions.  What stays
    here is the partition itself: its lease, notifications, termination."""

    def __init__(self, name: TopicName, topic_id: int, epoch: int, store: BrokerStore, *,
                 dedup: bool, max_message_size: int, max_batch_messages: int,
                 cache_bytes: int, max_batches_per_commit: int,
                 on_lost: Callable[[PartitionLog], None], roles: Roles,
                 delayed_delivery: DelayedDelivery = PULSAR_DELAYED_DELIVERY):
        self.name = name
        self.topic_id = topic_id
        self.epoch = epoch
        self.store = store
        self.roles = roles
        self.max_batch_messages = max_batch_messages
        self.partition_index = name.partition_index
        # The oldest entry still stored (trimming moves it on); readers and subscriptions
        # from Earliest start here.
        self.first_entry_id = 0
        self.closed = False
        # Delivered to any consumer of any subscription (``delivered``), closed consumers
        # and readers' gone subscriptions included.
        self.msg_out = 0
        self.bytes_out = 0
        self.rate_out = Rate(time.monotonic())  # msgRateOut / msgThroughputOut
        self.terminated_entry: int | None = None  # `topics terminate`: the last entry it keeps
        self._terminating: asyncio.Future[int] | None = None  # a terminate under way
        self._on_lost = on_lost
        self._wake: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Producers: by id, with their PIP-68 access state; created under producer_lock.
        self.producers: dict[int, Producer] = {}
        self.access = AccessState()
        self.fenced_waiters: set[str] = set()
        self.producer_lock = asyncio.Lock()
        # Subscriptions by name, opened by subscription/ through the registry's one
        # get-or-open (what they are is not this package's business).
        self.subscriptions: Registry[Any] = Registry()
        # Where its subscriptions' dead letters go (subscription/deadletters.Sink, given by
        # the broker that loads it): not this package's business either.
        self.dead_letter_sink: Any = None
        # Pulsar's delayed_delivery policy in force (the broker's settings, else its
        # namespace's or topic's; refreshed by the owner's heartbeat).
        self.delayed_delivery = delayed_delivery
        # The parts.
        self.dedup_state = DedupState(dedup, self._load_sequence)
        self.txnbuf = TxnBuffer(store, topic_id, name.full, roles)
        self.cache = EntryCache(store, topic_id, cache_bytes)
        self.compacted = CompactedView(store, topic_id)
        self.quota = QuotaGate(name.full, self.wake, self.long_poll, lambda: self.closed)
        self.writer = Writer(self, store, self.access, self.dedup_state, self.txnbuf, self.cache,
                             self.quota, max_batches_per_commit)
        self.admission = Admission(self, self.dedup_state, self.txnbuf, self.quota, self.writer.idle,
                                   max_message_size, max_batch_messages)

    async def load(self) -> PartitionLog:
        self.writer.next_entry_id = await self.store.next_entry_id(self.topic_id)
        first = await self.store.first_entry_id(self.topic_id)
        self.first_entry_id = self.next_entry_id if first is None else first
        self.access.topic_epoch = await self.store.topic_epoch(self.topic_id)
        self.terminated_entry = await self.store.termination(self.topic_id)
        await self.compacted.load()
        return self

    async def _load_sequence(self, producer_name: str) -> int:
        return await self.store.last_sequence_id(self.topic_id, producer_name)

    @property
    def next_entry_id(self) -> int:
        """The log's head (the writer's): the id the next entry gets."""
        return self.writer.next_entry_id

    @property
    def dedup(self) -> bool:
        return self.dedup_state.enabled

    @property
    def msg_in(self) -> int:
        return self.writer.msg_in

    @property
    def bytes_in(self) -> int:
        return self.writer.bytes_in

    @property
    def rate_in(self) -> Rate:
        return self.writer.rate_in

    def check_not_terminated(self) -> None:
        if self.terminated_entry is not None:
            raise TopicTerminated(f"{self.name.full} was terminated at entry {self.terminated_entry}; "
                                  "it takes no more messages")

    def at_end(self, read_position: int) -> bool:
        """Whether a reader at ``read_position`` has read the last entry of a terminated
        topic (a terminate still waiting for its writes has no end yet)."""
        last = self.terminated_entry
        return last is not None and last != TERMINATING and read_position > last

    async def terminate(self, txn_wait_s: float) -> int:
        """Take no more messages: refuse new sends, let the writes in flight finish and
        the transactions that wrote here end, then record the last entry (lease-checked).
        Its id (-1: an empty log).  A second call while one runs waits for the same end."""
        self.check_open()
        if self._terminating is None:
            if self.terminated_entry is not None:
                return self.terminated_entry
            self._terminating = asyncio.ensure_future(self._terminate(txn_wait_s))
            self._terminating.add_done_callback(lambda _: setattr(self, "_terminating", None))
        return await asyncio.shield(self._terminating)

    async def _terminate(self, txn_wait_s: float) -> int:
        self.terminated_entry = TERMINATING  # refuses sends from now on; the real id follows
        try:
            await self.writer.idle()
            await self._wait_for_open_txns(txn_wait_s)
            last = self.next_entry_id - 1
            stored = await self.lease_checked(
                "terminating", self.store.terminate(self.topic_id, self.epoch, last),
                lambda r: r is not None)
        except BaseException:
            if self.terminated_entry == TERMINATING:
                self.terminated_entry = None  # not terminated: sends are taken again
            raise
        assert stored is not None
        self.terminated_entry = stored
        self.wake()  # consumers waiting at the end learn it is the end
        return stored

    async def _wait_for_open_txns(self, wait_s: float) -> None:
        """Wait until every transaction with messages buffered here has ended.  Its
        messages join the log only with its commit marker, and Pulsar takes no entry after
        the terminated position: ending first keeps a commit from adding messages beyond
        the end of the topic (or being refused, half-committed).  Their further sends are
        refused meanwhile (TopicTerminated), so they can only end."""
        txns = await self.store.open_txns_with_messages(self.topic_id)

        async def all_ended() -> bool | None:
            states = [await self.txnbuf.state(t) for t in txns]
            return True if all(b.committed is not None for b in states) else None

        if txns and await self.long_poll(wait_s, all_ended) is None:
            left = [str(t) for t in txns if self.txnbuf.txns[t].committed is None]
            raise Conflict(f"{self.name.full} was not terminated: {len(left)} open transaction(s) sent "
                           f"messages to it and did not end within {wait_s:g} s ({', '.join(left[:5])}); "
                           "commit or abort them (or let them time out) and terminate again")

    async def persist_topic_epoch(self, topic_epoch: int) -> None:
        """Record a new exclusive producer's epoch (lease-checked) before it is used."""
        if not await self.store.set_topic_epoch(self.topic_id, self.epoch, topic_epoch):
            self.lose("fenced while changing the topic epoch")
            self.check_open()
        self.access.topic_epoch = topic_epoch

    # ---------------------------------------------------------------- notifications

    def wake(self) -> None:
        """Tell long-polling fetches that something changed (data, acks, consumers)."""
        fut, self._wake = self._wake, asyncio.get_running_loop().create_future()
        if not fut.done():
            fut.set_result(None)

    def changed(self) -> asyncio.Future[None]:
        return self._wake

    async def long_poll(self, wait_s: float, attempt: Callable[[], Awaitable[T | None]]) -> T | None:
        """Try ``attempt`` until it answers (not None) or ``wait_s`` is over, waiting for
        a change of this partition between tries; the last try's answer."""
        deadline = time.monotonic() + wait_s
        while True:
            self.check_open()
            changed = self.changed()  # taken before the try: a change during it counts
            result = await attempt()
            left = deadline - time.monotonic()
            if result is not None or left <= 0:
                return result
            try:
                await asyncio.wait_for(asyncio.shield(changed), left)
            except TimeoutError:
                pass

    def check_open(self) -> None:
        if self.closed:
            raise NotOwner(f"{self.name.full} is no longer served by this broker; look it up again")

    async def lease_checked(self, what: str, write: Awaitable[T],
                            owned: Callable[[T], bool] = bool) -> T:
        """Await a write that checks this broker's lease in SQL; ``owned(result)`` says
        whether it still held it.  Failed (outcome unknown) or fenced, the partition stops
        being served here, so the next request reloads it from the database."""
        try:
            result = await write
        except Exception as exc:
            self.lose(f"{what} failed: {exc}")
            raise
        if not owned(result):
            self.lose(f"fenced while {what}")
            self.check_open()
        return result

    # ---------------------------------------------------------------- producing

    async def last_sequence_id(self, producer_name: str) -> int:
        return await self.dedup_state.last_persisted(producer_name)

    async def publish(self, producer: Producer, req: Batch) -> Sent:
        result = (await self.publish_many(producer, [req]))[0]
        if isinstance(result, Exception):
            raise result
        return result

    async def publish_many(self, producer: Producer,
                           reqs: Sequence[Batch]) -> list[Sent | MagnetarError]:
        """Admit batches in order, then hand them to the writer together, so they share a
        group commit and a later one is never stored before an earlier one.  Returns a
        Sent or an exception per batch; after a retryable failure every later
        batch fails too (the client resends them in order)."""
        admitted: list[Append | Sent | MagnetarError] = []
        for req in reqs:
            try:
                admitted.append(await self.admission.admit(producer, req))
            except MagnetarError as exc:
                admitted.append(exc)
                if exc.retryable:
                    admitted += [exc] * (len(reqs) - len(admitted))
                    break
        started = time.perf_counter()
        futures = [self.writer.submit(a) if isinstance(a, Append) else None for a in admitted]
        results: list[Sent | MagnetarError] = []
        for a, fut in zip(admitted, futures):
            if fut is None:
                assert not isinstance(a, Append)
                results.append(a)
                continue
            assert isinstance(a, Append)
            try:
                position = await fut
            except MagnetarError as exc:
                results.append(exc)
                continue
            producer.msg_in += a.num_messages
            producer.bytes_in += len(a.batch)
            # A transactional send's position is its place in the transaction; consumers
            # see the messages at the commit marker's entry id.
            results.append(Sent(entry_id=position, last_sequence_id=a.highest, partition=self.partition_index))
        metrics.PUBLISH_LATENCY.observe(time.perf_counter() - started)
        return results

    def trimmed(self, first_entry_id: int) -> None:
        """Entries below ``first_entry_id`` are gone from the database: forget them here."""
        self.first_entry_id = max(self.first_entry_id, first_entry_id)
        self.cache.trimmed(self.first_entry_id)

    # ---------------------------------------------------------------- reading

    def delivered(self, messages: int, nbytes: int) -> None:
        """Count messages a subscription delivered (the topic's counters outlive it)."""
        self.msg_out += messages
        self.bytes_out += nbytes
        if messages:
            self.rate_out.add(time.monotonic(), messages, nbytes)

    def quota_acked(self) -> None:
        """A subscription acknowledged: the backlog quota may let held sends go."""
        self.quota.acked()

    async def read(self, start: int, max_entries: int) -> list[Entry]:
        """Entries from ``start`` on (at most ``max_entries``), from cache or database."""
        return await self.cache.read(start, self.next_entry_id, max_entries)

    async def read_one(self, entry_id: int) -> Entry | None:
        got = await self.read(entry_id, 1)
        return got[0] if got and got[0].entry_id == entry_id else None

    @property
    def compaction_horizon(self) -> int:
        """Readers with ``read_compacted`` read the compacted view below this entry id,
        the log from it on (0: never compacted)."""
        return self.compacted.horizon if self.compacted.exists else 0

    async def read_compacted(self, start: int, max_entries: int) -> list[Entry]:
        """The compacted view's entries from ``start`` on, below the horizon."""
        return await self.compacted.read(start, max_entries)

    async def read_one_compacted(self, entry_id: int) -> Entry | None:
        return await self.compacted.read_one(entry_id)

    async def last_compacted(self) -> tuple[int, int] | None:
        return await self.compacted.last()

    async def message_counts(self, entry_ids: Iterable[int]) -> dict[int, int]:
        """{entry id: its number of messages} of those of ``entry_ids`` that exist
        (from the cache when there, else one query)."""
        return await self.cache.message_counts(entry_ids, self.next_entry_id)

    async def check_batch_indexes(self, what: str, positions: Iterable[PositionLike],
                                  size_of: Callable[[int], int | None] = lambda _: None) -> None:
        """Refuse (400) a position whose batch index names no message of its entry: an
        index becomes a bit of a mask (acks, seeks, deliveries) whose every later
        operation costs its size, so 2^27 once stored a 16 MB cursor (issue #20).
        ``size_of``: entry sizes the caller already knows (no lookup for those)."""
        indexed = [p for p in positions if p.batch_index != WHOLE]
        if not indexed:
            return
        unknown = [p.entry_id for p in indexed if size_of(p.entry_id) is None]
        counts = await self.message_counts(unknown) if unknown else {}
        for p in indexed:
            size = size_of(p.entry_id)
            problem = batch_index_problem(p.entry_id, p.batch_index,
                                          counts.get(p.entry_id) if size is None else size,
                                          self.max_batch_messages)
            if problem:
                raise BadRequest(f"{what} on {self.name.full}: {problem}")

    async def last_entry(self) -> Entry | None:
        return await self.read_one(self.next_entry_id - 1) if self.next_entry_id else None

    # ---------------------------------------------------------------- lifecycle

    def lose(self, reason: str) -> None:
        """Stop serving at once: fail queued writes, drop producers and consumers."""
        if self.closed:
            return
        self.closed = True
        metrics.TB_ACTIVE.dec(sum(1 for b in self.txnbuf.txns.values() if b.committed is None))
        log.warning("stopped serving %s: %s", self.name.full, reason)
        self.writer.fail_pending(NotOwner(f"{self.name.full} is no longer served here"))
        self.wake()
        self._on_lost(self)


