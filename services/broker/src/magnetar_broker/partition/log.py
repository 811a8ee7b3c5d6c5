"""An owned partition: its log head, dedup state, entry cache, producers and
subscriptions.  Writes go through one group-commit pipeline per partition; every
statement compares the ownership epoch, so a fenced broker stores nothing."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Awaitable, Callable, TypeVar

from magnetar_broker import metrics
from magnetar_broker.entry import Entry
from magnetar_broker.partition.access import AccessState
from magnetar_broker.partition.batchcheck import WHOLE, batch_index_problem, batch_problem
from magnetar_broker.partition.dedup import Verdict, drop_persisted, judge
from magnetar_broker.partition.planner import Append, TxnAppend, TxnEnd, plan_plain
from magnetar_broker.partition.quota import BacklogEstimate, check_before_send
from magnetar_broker.partition.txnbuffer import TxnBuffer
from magnetar_broker.partition.txnrules import ended_error
from magnetar_broker.rates import Rate
from magnetar_broker.store import BrokerStore
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import (
    BadRequest,
    Conflict,
    MagnetarError,
    MessageTooBig,
    NotOwner,
    ProducerBlockedQuotaExceeded,
    ProducerFenced,
    TopicTerminated,
)
from magnetar_protocol.policies import EXCEPTION, HOLD
from magnetar_protocol.topics import TopicName
from magnetar_protocol.txnid import TxnID
from magnetar_runtime.error_answers import write_failure
from magnetar_runtime.groupcommit import GroupCommit
from magnetar_runtime.roles import Roles

if TYPE_CHECKING:  # an annotation only: subscription/ builds on this package, not back
    from magnetar_broker.subscription.subscription import Subscription

log = logging.getLogger("magnetar.broker.topic")
T = TypeVar("T")

# terminated_entry while a terminate waits for the writes before it: sends are refused.
TERMINATING = -2

# Room for batch framing and per-message metadata on top of the payload limit.
BATCH_OVERHEAD = 64 * 1024


@dataclass(eq=False)
class Producer:
    producer_id: int
    name: str
    session_id: str
    access_mode: int
    log: "PartitionLog"
    role: str = ""  # the role that created it: only that role may use its id
    client_producer_id: int = 0  # the client's id for it: tells a retried create from another
    topic_epoch: int | None = None
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
    def __init__(self, name: TopicName, topic_id: int, epoch: int, store: BrokerStore, *,
                 dedup: bool, max_message_size: int, max_batch_messages: int,
                 cache_bytes: int, max_batches_per_commit: int, on_lost, roles: Roles):
        self.name = name
        self.topic_id = topic_id
        self.epoch = epoch
        self.store = store
        self.dedup = dedup
        self.max_message_size = max_message_size
        self.max_batch_messages = max_batch_messages
        self.partition_index = name.partition_index
        self.next_entry_id = 0
        # The oldest entry still stored (trimming moves it on); readers and subscriptions
        # from Earliest start here.
        self.first_entry_id = 0
        # The backlog quota's verdict (the lifecycle loop sets it): None, or the policy
        # (HOLD / EXCEPTION) that refuses sends while the backlog is over the limit.
        self.quota_blocked: str | None = None
        self.quota_reason = ""
        self.quota_hold_s = 30.0
        # The send path's view of the backlog quota (partition/quota.py): an estimate kept
        # on append, and the exact check (the lifecycle loop installs it) run when the
        # estimate passes the limit or an ack may have brought a blocked backlog back.
        self.backlog = BacklogEstimate()
        self.quota_check: Callable[[], Awaitable[None]] | None = None
        self.quota_recheck_ms = 100
        self.appended_bytes = 0  # every byte appended, so a check can add what came in meanwhile
        self._quota_checking: asyncio.Task | None = None
        self._quota_ack_pending = False
        self._quota_tasks: set[asyncio.Task] = set()
        self.persisted_seq: dict[str, int] = {}  # producer name -> last persisted sequence id
        self.pushed_seq: dict[str, int] = {}     # ... including batches not yet committed
        self.producers: dict[int, Producer] = {}
        self.access = AccessState()
        self.fenced_waiters: set[str] = set()
        self.producer_lock = asyncio.Lock()
        self.subscriptions: dict[str, Subscription] = {}  # by name; opened by subscription/
        self.cache: deque[Entry] = deque()
        self.cache_bytes = 0
        self.max_cache_bytes = cache_bytes
        self.closed = False
        self.msg_in = 0
        self.bytes_in = 0
        self.rate_in = Rate(time.monotonic())  # msgRateIn / msgThroughputIn
        # Delivered to any consumer of any subscription (subscription/subscription.py
        # counts them), closed consumers and readers' gone subscriptions included.
        self.msg_out = 0
        self.bytes_out = 0
        self.rate_out = Rate(time.monotonic())  # msgRateOut / msgThroughputOut
        self.terminated_entry: int | None = None  # `topics terminate`: the last entry it keeps
        self._terminating: asyncio.Future | None = None  # a terminate under way
        self._on_lost = on_lost
        self.txnbuf = TxnBuffer(store, topic_id, name.full, roles)
        self._writer: GroupCommit = GroupCommit(self._commit, max_batches_per_commit)
        self._wake: asyncio.Future = asyncio.get_running_loop().create_future()
        self.subscriptions_lock = asyncio.Lock()  # opening one: once per name

    async def load(self) -> "PartitionLog":
        self.next_entry_id = await self.store.next_entry_id(self.topic_id)
        first = await self.store.first_entry_id(self.topic_id)
        self.first_entry_id = self.next_entry_id if first is None else first
        self.access.topic_epoch = await self.store.topic_epoch(self.topic_id)
        self.terminated_entry = await self.store.termination(self.topic_id)
        return self

    def check_not_terminated(self) -> None:
        if self.terminated_entry is not None:
            raise TopicTerminated(f"{self.name.full} was terminated at entry {self.terminated_entry}; "
                                  "it takes no more messages")

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
            await self._writer.idle()
            await self._wait_for_open_txns(txn_wait_s)
            last = self.next_entry_id - 1
            stored = await self.lease_checked(
                "terminating", self.store.terminate(self.topic_id, self.epoch, last),
                lambda r: r is not None)
        except BaseException:
            if self.terminated_entry == TERMINATING:
                self.terminated_entry = None  # not terminated: sends are taken again
            raise
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

    def changed(self) -> asyncio.Future:
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
        if producer_name not in self.persisted_seq:
            last = await self.store.last_sequence_id(self.topic_id, producer_name)
            # Another load may have raced us; the larger value is the truth.
            self.persisted_seq[producer_name] = max(last, self.persisted_seq.get(producer_name, -1))
            self.pushed_seq.setdefault(producer_name, self.persisted_seq[producer_name])
        return self.persisted_seq[producer_name]

    async def publish(self, producer: Producer, req: pb.SendRequest) -> pb.SendResponse:
        result = (await self.publish_many(producer, [req]))[0]
        if isinstance(result, Exception):
            raise result
        return result

    async def publish_many(self, producer: Producer, reqs) -> list:
        """Admit batches in order, then hand them to the writer together, so they share a
        group commit and a later one is never stored before an earlier one.  Returns a
        SendResponse or an exception per batch; after a retryable failure every later
        batch fails too (the client resends them in order)."""
        admitted: list = []
        for req in reqs:
            try:
                admitted.append(await self._admit(producer, req))
            except MagnetarError as exc:
                admitted.append(exc)
                if exc.retryable:
                    admitted += [exc] * (len(reqs) - len(admitted))
                    break
        started = time.perf_counter()
        futures = [self._writer.submit(a) if isinstance(a, (Append, TxnAppend)) else None for a in admitted]
        results = []
        for a, fut in zip(admitted, futures):
            if fut is None:
                results.append(a)
                continue
            try:
                position = await fut
            except MagnetarError as exc:
                results.append(exc)
                continue
            producer.msg_in += a.num_messages
            producer.bytes_in += len(a.batch)
            # A transactional send's position is its place in the transaction; consumers
            # see the messages at the commit marker's entry id.
            results.append(pb.SendResponse(entry_id=position, last_sequence_id=a.highest,
                                           partition=self.partition_index))
        metrics.PUBLISH_LATENCY.observe(time.perf_counter() - started)
        return results

    async def _admit(self, producer: Producer, req: pb.SendRequest):
        """Validate and deduplicate one batch: a queue item, or the duplicate's answer."""
        self.check_open()
        producer.check_not_fenced()
        if self.quota_check is not None:
            now = int(time.time() * 1000)
            if check_before_send(self.backlog, self.quota_blocked, now, self.quota_recheck_ms):
                self.backlog.checked_ms = now
                await self._run_quota_check()
        if self.quota_blocked is not None:
            await self._quota_gate()
        self.check_not_terminated()
        batch, n = req.batch, req.num_messages
        lowest, highest = req.sequence_id, req.highest_sequence_id
        if not batch or n == 0:
            raise BadRequest("send: empty batch (num_messages must be at least 1)")
        if n > self.max_batch_messages:
            raise BadRequest(f"send: batch of {n} messages exceeds the limit of {self.max_batch_messages}")
        if len(batch) > self.max_message_size + BATCH_OVERHEAD:
            raise MessageTooBig(
                f"send: batch of {len(batch)} bytes exceeds the maximum message size of "
                f"{self.max_message_size} bytes on {self.name.full}"
            )
        if highest < lowest:
            raise BadRequest("send: highest_sequence_id is below sequence_id")
        if problem := batch_problem(batch, n, lowest, highest):
            raise BadRequest(f"send to {self.name.full}: {problem}; nothing was stored")
        txn = TxnID.from_wire(req.txn) if req.HasField("txn") else None
        actor = await self.txnbuf.check_send(txn) if txn is not None else None
        name = producer.name
        if self.dedup:
            waited = False
            while True:
                self.check_open()
                last = await self.last_sequence_id(name)
                verdict = judge(last, lowest, highest)
                if verdict is Verdict.DUPLICATE:
                    metrics.DUPLICATES.inc(n)
                    return pb.SendResponse(duplicate=True, last_sequence_id=last,
                                           partition=self.partition_index)
                pushed = self.pushed_seq.get(name, -1)
                if not waited and pushed > last and lowest <= pushed:
                    # Overlaps a batch still being committed: judge again once it is.
                    # Once (a batch that failed stays above ``last``), and never when
                    # nothing is in flight: ``idle()`` returns at once then, and looping
                    # on it would hold the event loop forever.
                    waited = True
                    await self._writer.idle()
                    continue
                if verdict is Verdict.PARTIAL:
                    batch, n, lowest, highest = drop_persisted(batch, last)
                break
            self.pushed_seq[name] = highest
        if txn is None:
            return Append(producer, name, lowest, highest, n, batch)
        return TxnAppend(producer, name, lowest, highest, n, batch, txn, actor)

    async def _quota_gate(self) -> None:
        """Backlog quota: producer_exception refuses at once; producer_request_hold waits
        (up to ``quota_hold_s``) for the lifecycle loop to see the backlog shrink."""
        if self.quota_blocked == HOLD:
            await self.long_poll(self.quota_hold_s, self._quota_clear)
        if self.quota_blocked in (HOLD, EXCEPTION):
            raise ProducerBlockedQuotaExceeded(
                f"{self.name.full}: backlog quota exceeded ({self.quota_reason}); policy {self.quota_blocked}. "
                "Consume or expire the backlog (magnetar-admin topics expire-messages / clear-backlog) "
                "or raise the quota (magnetar-admin namespaces set-backlog-quota)")

    async def _run_quota_check(self) -> None:
        """The exact quota check, one at a time: sends arriving meanwhile share it."""
        task = self._quota_checking
        if task is None or task.done():
            task = self._quota_checking = asyncio.get_running_loop().create_task(self.quota_check())
        try:
            await asyncio.shield(task)
        except Exception as exc:  # the pass retries; a send is not failed for a check that failed
            log.warning("%s: backlog quota check failed: %s", self.name.full, exc)

    def quota_acked(self) -> None:
        """A subscription acknowledged: a blocked partition checks again shortly (one check
        for a burst of acks), so held sends go as soon as the backlog is under the limit."""
        if self.quota_blocked is None or self.quota_check is None or self._quota_ack_pending:
            return
        self._quota_ack_pending = True
        task = asyncio.get_running_loop().create_task(self._quota_after_ack())
        self._quota_tasks.add(task)
        task.add_done_callback(self._quota_tasks.discard)

    async def _quota_after_ack(self) -> None:
        await asyncio.sleep(self.quota_recheck_ms / 1000)
        self._quota_ack_pending = False  # acks during the check ask for one more
        if not self.closed:
            await self._run_quota_check()

    def _appended(self, nbytes: int) -> None:
        self.appended_bytes += nbytes
        self.backlog.appended(nbytes, int(time.time() * 1000))

    async def _quota_clear(self) -> bool | None:
        return True if self.quota_blocked != HOLD else None

    def set_quota(self, blocked: str | None, reason: str = "") -> None:
        was, self.quota_blocked, self.quota_reason = self.quota_blocked, blocked, reason
        if was != blocked:
            log.info("%s: backlog quota %s", self.name.full,
                     f"exceeded ({reason}), policy {blocked}" if blocked else "back within limits")
            self.wake()  # held sends look again

    def trimmed(self, first_entry_id: int) -> None:
        """Entries below ``first_entry_id`` are gone from the database: forget them here."""
        self.first_entry_id = max(self.first_entry_id, first_entry_id)
        while self.cache and self.cache[0].entry_id < self.first_entry_id and len(self.cache) > 1:
            self.cache_bytes -= self.cache.popleft().size()

    async def end_txn(self, txn: TxnID, commit: bool) -> None:
        """EndTxnOnPartition: idempotent; the opposite of a recorded outcome is refused."""
        self.check_open()
        buf = await self.txnbuf.state(txn)
        if buf.committed is not None:
            if buf.committed != commit:
                raise ended_error(txn, buf.committed)
            return
        await self._writer.submit(TxnEnd(txn, commit))

    def hold_writer(self):
        """``async with``: no group of this partition is written until the block ends (a
        one-phase commit writes this partition's marker in its own SQL transaction)."""
        return self._writer.hold()

    async def _commit(self, queued: list) -> list:
        if self.terminated_entry is not None and any(isinstance(i, (Append, TxnAppend)) for i in queued):
            # Sends admitted just before `terminate` are refused; transaction endings pass.
            err = TopicTerminated(f"{self.name.full} was terminated; it takes no more messages")
            rest = [i for i in queued if not isinstance(i, (Append, TxnAppend))]
            by_item = dict(zip(map(id, rest), await self._commit_group(rest) if rest else []))
            return [by_item.get(id(i), err) for i in queued]
        return await self._commit_group(queued)

    async def _commit_group(self, queued: list) -> list:
        self.check_open()
        # Batches of a producer fenced while they waited here are never stored.
        items = [i for i in queued if not getattr(i.producer, "fenced", False)]
        if not items:
            return [_fenced(i.producer) for i in queued]
        if any(type(i) is not Append for i in items):
            results = await self._commit_mixed(items)
            by_item = dict(zip(map(id, items), results))
            return [by_item[id(i)] if id(i) in by_item else _fenced(i.producer) for i in queued]
        plan = plan_plain(items, self.next_entry_id, self.dedup, int(time.time() * 1000))
        try:
            exclusive_epoch = self.access.topic_epoch if self.access.exclusive is not None else None
            owned, allowed = await self.store.append_entries(
                self.topic_id, self.epoch, plan.columns,
                (list(plan.sequences), list(plan.sequences.values())), exclusive_epoch,
            )
        except MagnetarError:
            raise
        except Exception as exc:
            # The commit's outcome is unknown: drop every in-memory assumption and let
            # the next request reload the partition from the database.
            self.lose(f"write failed: {exc}")
            raise write_failure(exc, f"could not store batch on {self.name.full}") from exc
        if not owned:
            self.lose("fenced: another broker took the topic over")
            raise NotOwner(f"{self.name.full} moved to another broker; look it up again")
        if not allowed:
            self.lose("topic epoch changed under this broker")
            raise ProducerFenced(f"the topic epoch of {self.name.full} moved on; batch refused")
        self.next_entry_id = plan.next_entry_id
        for name, seq in plan.sequences.items():
            self.persisted_seq[name] = max(seq, self.persisted_seq.get(name, -1))
        total = nbytes = 0
        for entry in plan.entries():
            self._cache(entry)
            total += entry.num_messages
            nbytes += len(entry.payload)
        self.bytes_in += nbytes
        self._appended(nbytes)
        self.msg_in += total
        self.rate_in.add(time.monotonic(), total, nbytes)
        metrics.MESSAGES_IN.inc(total)
        metrics.COMMIT_BATCHES.observe(len(items))
        self.wake()
        by_item = dict(zip(map(id, items), plan.columns[0]))
        return [by_item[id(i)] if id(i) in by_item else _fenced(i.producer) for i in queued]

    async def _commit_mixed(self, items: list) -> list:
        exclusive_epoch = self.access.topic_epoch if self.access.exclusive is not None else None
        try:
            settled = await self.txnbuf.commit_group(items, self.next_entry_id, self.dedup, self.epoch,
                                                     exclusive_epoch)
        except ProducerFenced:
            self.lose("topic epoch changed under this broker")
            raise
        except Exception as exc:
            self.lose(f"write failed: {exc}")
            raise write_failure(exc, f"could not write to {self.name.full}") from exc
        if settled is None:
            self.lose("fenced: another broker took the topic over")
            raise NotOwner(f"{self.name.full} moved to another broker; look it up again")
        self.apply_settled(settled, len(items))
        return settled.results

    def apply_settled(self, settled, group_size: int = 1) -> None:
        """The in-memory effects of a written transactional group (or of a one-phase
        commit's marker, written in the coordinator's SQL transaction)."""
        self.next_entry_id = settled.next_entry_id
        for name, seq in settled.sequences.items():
            self.persisted_seq[name] = max(seq, self.persisted_seq.get(name, -1))
        cached = settled.cached
        total = nbytes = 0
        for entry in cached:
            self._cache(entry)
            total += entry.num_messages
            nbytes += entry.size()
        self._appended(nbytes)
        self.msg_in += total
        self.rate_in.add(time.monotonic(), total, nbytes)
        metrics.MESSAGES_IN.inc(total)
        metrics.COMMIT_BATCHES.observe(group_size)
        if cached or settled.ended:  # an abort too: a terminate may wait for it
            self.wake()

    # ---------------------------------------------------------------- reading

    def _cache(self, entry: Entry) -> None:
        self.cache.append(entry)
        self.cache_bytes += entry.size()
        # Keep at least the newest entry so tailing reads stay in memory.
        while self.cache_bytes > self.max_cache_bytes and len(self.cache) > 1:
            self.cache_bytes -= self.cache.popleft().size()

    async def read(self, start: int, max_entries: int) -> list[Entry]:
        """Entries from ``start`` on (at most ``max_entries``), from cache or database."""
        end = self.next_entry_id
        if start >= end or max_entries <= 0:
            return []
        if self.cache and start >= self.cache[0].entry_id:
            offset = start - self.cache[0].entry_id
            got = list(itertools.islice(self.cache, offset, offset + max_entries))
            for i, entry in enumerate(got):
                if entry.parts is not None:  # a marker this broker committed: join once
                    got[i] = replace(entry, payload=b"".join(entry.parts), parts=None)
                    self._replace_cached(entry, got[i])
                elif entry.payload is None:  # a marker of a transaction too big to keep in memory
                    got[i] = replace(entry, payload=await self.store.txn_payload(self.topic_id, entry.txn))
            return got
        return await self.store.read_entries(self.topic_id, start, end, max_entries)

    def _replace_cached(self, old: Entry, new: Entry) -> None:
        if self.cache:
            at = old.entry_id - self.cache[0].entry_id
            if 0 <= at < len(self.cache) and self.cache[at] is old:  # not evicted meanwhile
                self.cache[at] = new

    async def read_one(self, entry_id: int) -> Entry | None:
        got = await self.read(entry_id, 1)
        return got[0] if got and got[0].entry_id == entry_id else None

    async def message_counts(self, entry_ids) -> dict[int, int]:
        """{entry id: its number of messages} of those of ``entry_ids`` that exist
        (from the cache when there, else one query)."""
        out: dict[int, int] = {}
        missing = []
        first = self.cache[0].entry_id if self.cache else 0
        for entry_id in set(entry_ids):
            if self.cache and first <= entry_id < first + len(self.cache):
                out[entry_id] = self.cache[entry_id - first].num_messages
            elif 0 <= entry_id < self.next_entry_id:
                missing.append(entry_id)
        if missing:
            out.update(await self.store.message_counts(self.topic_id, missing))
        return out

    async def check_batch_indexes(self, what: str, positions,
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
        self._writer.fail_pending(NotOwner(f"{self.name.full} is no longer served here"))
        self.wake()
        self._on_lost(self)


def _fenced(producer: Producer) -> ProducerFenced:
    return ProducerFenced(f"producer {producer.name!r} was fenced before its batch was stored")
