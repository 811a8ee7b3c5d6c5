"""A subscription on one partition: consumers, dispatch, acks and the durable cursor.

Dispatch is entry by entry: a consumer gets whole stored batches, or the listed batch
indices of one when only some of its messages are due (redeliveries, KeyShared routing,
partly acknowledged entries).  Bookkeeping is in dispatch.Deliveries and cursor.Cursor
(pure); this module adds the reads, the locking and persistence.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError

from magnetar_broker import metrics
from magnetar_broker.entry import Entry
from magnetar_broker.partition.batchcheck import PositionLike
from magnetar_broker.rates import Rate
from magnetar_broker.store import DeadLetterRow
from magnetar_broker.subscription.backlog import lowest_bits
from magnetar_broker.subscription.cursor import WHOLE, Cursor, full_mask
from magnetar_broker.subscription.deadletters import DeadLetters
from magnetar_broker.subscription.deadrules import DeadLetterPolicy
from magnetar_broker.subscription.delayed import Delays
from magnetar_broker.subscription.dispatch import (
    SUB_NAMES,
    Deliveries,
    HashRing,
    dispatch_key,
    failover_active,
    key_hash,
    mask_indices,
)
from magnetar_broker.subscription.txnacks import TxnAcks
from magnetar_broker.subscription.view import PartitionView
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import (
    BadRequest,
    Conflict,
    ConsumerBusy,
    NotAllowedError,
    NotOwner,
    SubscriptionNotFound,
)
from magnetar_protocol.pulsar.stored import stored_messages
from magnetar_protocol.txnid import TxnID
from magnetar_runtime.groupcommit import GroupCommit

MAX_UNACKED_PER_CONSUMER = 50_000
# KeyShared: messages read for other consumers wait in the redelivery queue; past this
# many, stop reading new entries until the slow consumer catches up (as Pulsar does).
MAX_PARKED_MESSAGES = 20_000
READ_AHEAD_ENTRIES = 64
# Delayed messages one fetch keeps apart at most (the rows the next cursor write stores).
DEFER_PER_FETCH = 10_000


@dataclass(eq=False)
class Consumer:
    consumer_id: int
    name: str
    session_id: str
    priority: int
    subscription: "Subscription"
    role: str = ""  # the role that created it: only that role may use its id
    msg_out: int = 0
    connected_since: float = field(default_factory=time.time)
    closed: bool = False
    # Failover: told whether it is the active consumer whenever that may have changed
    # (a front end that pushes it to its client, the Pulsar listener, sets it).
    on_active_change: Callable[[bool], None] | None = field(default=None, repr=False)
    seeks: int = 0  # the highest seek count its client has sent (FetchRequest.seeks)
    # msgRateRedeliver: what it handed back (negative acks, ack timeout, redeliver-unacked).
    rate_redeliver: Rate = field(default_factory=lambda: Rate(time.monotonic()), repr=False)
    # Reads the compacted view below the compaction horizon, then the log (Exclusive,
    # Failover and readers: commands.Subscribe's rule).
    read_compacted: bool = False


class AckedWithDelays:
    """The cursor's acknowledgements, less the due delayed messages it passed."""

    __slots__ = ("cursor", "delays")

    def __init__(self, cursor: Cursor, delays: Delays) -> None:
        self.cursor = cursor
        self.delays = delays

    @property
    def mark_delete(self) -> int:
        return self.cursor.mark_delete

    def is_acked(self, entry_id: int, index: int) -> bool:
        held = self.delays.held_mask(entry_id)
        if held and (index == WHOLE or held >> index & 1):
            return False
        return self.cursor.is_acked(entry_id, index)


class Subscription:
    def __init__(self, log: PartitionView, name: str, cursor: Cursor, durable: bool):
        self.log = log
        self.name = name
        self.cursor = cursor
        self.durable = durable
        self.sub_type: int | None = None
        self.consumers: dict[int, Consumer] = {}
        self.deliveries = Deliveries()
        self.read_position = cursor.mark_delete + 1
        self._active: int | None = None
        self._ring = HashRing()
        self._keys: dict[int, list[int]] = {}   # entry -> key hash per index (KeyShared)
        self.lock = asyncio.Lock()
        self._saver: GroupCommit[None, None] = GroupCommit(self._save, 1024)
        # Cursor writes (plain acks, transaction commits) take a snapshot under this lock,
        # so a later state is never overwritten by an earlier one.
        self.persist_lock = asyncio.Lock()
        self.txn = TxnAcks(self)  # acknowledgements inside transactions
        self.dead = DeadLetters(self)  # moves to its dead-letter topic
        self.delays = Delays(self)     # its delayed messages, kept apart until their time
        self.rate_out = Rate(time.monotonic())  # msgRateOut / msgThroughputOut
        self.bytes_out = 0
        self.rate_redeliver = Rate(time.monotonic())  # msgRateRedeliver
        self.msg_out = 0  # every consumer's, those since closed included (as Pulsar counts)

    @classmethod
    async def _load_durable(cls, log: PartitionView, name: str, initial: int) -> Subscription:
        """Load (or create at ``initial``) a durable subscription and its pending acks;
        only ``durable`` calls it, under the registry's lock."""
        row = await log.store.open_subscription(log.topic_id, log.epoch, name, initial)
        log.check_open()
        if row is None:
            log.lose("fenced while opening a subscription")
            log.check_open()
        assert row is not None  # check_open raised otherwise
        cursor = Cursor.decode(row.mark_delete, row.acked_state)
        if cursor.mark_delete < log.first_entry_id - 1 and log.compaction_horizon <= cursor.mark_delete + 1:
            # Entries below the first stored one are gone (trimmed); an acknowledgement
            # never fills that hole, so the cursor starts past it (unless the compacted
            # view holds them: a consumer of the view starts there).
            cursor.ack_cumulative(log.first_entry_id - 1, WHOLE)
        sub = cls(log, name, cursor, durable=True)
        sub.txn.pending.load(await log.store.load_pending_acks(log.topic_id, name))
        rows = await log.store.dead_letter_policies(sorted({log.name.full, log.name.base.full}))
        sub.dead.admin_policy = admin_dead_letter_policies(log, rows).get(name)
        await sub.delays.load()
        return sub

    # ---------------------------------------------------------------- consumers

    def add_consumer(self, consumer: Consumer, sub_type: int) -> None:
        if self.consumers and sub_type != self.sub_type:
            raise ConsumerBusy(
                f"subscription {self.name!r} is {SUB_NAMES[self.sub_type]}, not {SUB_NAMES[sub_type]}"
            )
        if sub_type == pb.SUB_EXCLUSIVE and self.consumers:
            raise ConsumerBusy(f"exclusive subscription {self.name!r} already has a consumer")
        self.sub_type = sub_type
        self.consumers[consumer.consumer_id] = consumer
        self._membership_changed()

    def remove_consumer(self, consumer: Consumer) -> None:
        if self.consumers.pop(consumer.consumer_id, None) is None:
            return
        self.redelivered(self.deliveries.forget_consumer(consumer.consumer_id))
        self._membership_changed()

    def _membership_changed(self) -> None:
        if self.sub_type == pb.SUB_FAILOVER:
            active = failover_active(
                [(c.priority, c.name, c.consumer_id) for c in self.consumers.values()],
                self.log.partition_index,
            )
            if self._active is not None and active != self._active and self._active in self.consumers:
                # The new active consumer must see what the old one had not acknowledged.
                self.redelivered(self.deliveries.release(self._active, None, count=True))
            self._active = active
            for c in self.consumers.values():
                if c.on_active_change is not None:
                    c.on_active_change(c.consumer_id == active)
        elif self.sub_type == pb.SUB_KEY_SHARED:
            self._ring = HashRing((c.consumer_id, c.name) for c in self.consumers.values())
        self.log.wake()

    @property
    def active_consumer_id(self) -> int | None:
        """Failover: the consumer that receives; None for other types."""
        return self._active if self.sub_type == pb.SUB_FAILOVER else None

    def _may_receive(self, consumer: Consumer) -> bool:
        if self.sub_type == pb.SUB_FAILOVER and consumer.consumer_id != self._active:
            return False
        return self.deliveries.unacked.get(consumer.consumer_id, 0) < MAX_UNACKED_PER_CONSUMER

    # ---------------------------------------------------------------- dispatch

    async def fetch(self, consumer: Consumer, max_messages: int, seeks: int = 0) -> list[pb.DeliveredEntry]:
        """Deliver up to ``max_messages`` to ``consumer``; ``seeks``: the consumer's seek
        count its fetch carried (nothing for a fetch a seek or a rewind overtook while it
        waited for the lock: its client drops what it brings)."""
        async with self.lock:
            if consumer.closed or seeks < consumer.seeks or not self._may_receive(consumer):
                return []
            out: list[pb.DeliveredEntry] = []
            budget = max(max_messages, 1)
            if self.delays.has_due(int(time.time() * 1000)):
                await self.delays.load_due(int(time.time() * 1000))
            budget = await self._take_redeliveries(consumer, budget, out)
            if budget > 0 and len(self.deliveries.redeliver) < MAX_PARKED_MESSAGES:
                await self._take_new(consumer, budget, out)
            delivered = nbytes = 0
            for e in out:
                count = len(e.indices) or e.num_messages
                delivered += count
                # A part of a batch counts its share of the batch's bytes.
                nbytes += len(e.batch) * count // max(e.num_messages, 1)
            consumer.msg_out += delivered
            self.msg_out += delivered
            self.bytes_out += nbytes
            # The topic's counters outlive the subscription (a reader's goes with it).
            self.log.delivered(delivered, nbytes)
            if delivered:
                self.rate_out.add(time.monotonic(), delivered, nbytes)
            metrics.MESSAGES_OUT.inc(delivered)
            return out

    async def _take_redeliveries(self, consumer: Consumer, budget: int, out: list[Any]) -> int:
        for entry_id in self.deliveries.redelivery_entries():
            if budget <= 0:
                break
            entry = await self._read_one(consumer, entry_id)
            if entry is None:
                self.deliveries.acked(entry_id, WHOLE)
                continue
            mask = self.deliveries.redeliver.get(entry_id, 0) & self.unacked_mask(entry_id, entry.num_messages)
            if entry.kept is not None:
                mask &= entry.kept
            mask &= ~self.txn.pending.mask(entry_id, entry.num_messages)
            mask &= self._routed_to(consumer, entry)
            if mask and self.dead.policy is not None:
                # Redelivered more often than the dead-letter policy allows: moved instead.
                indices = mask_indices(mask)
                mask = self.dead.take_doomed(entry_id, mask, indices,
                                             self.deliveries.counts_for(entry_id, indices))
            if self.sub_type == pb.SUB_SHARED and mask.bit_count() > budget:
                mask = lowest_bits(mask, budget)
            if mask:
                budget -= self._deliver(consumer, entry, mask, out, redelivered=True)
            elif not (left := self.deliveries.redeliver.get(entry_id, 0)) & self.unacked_mask(
                    entry_id, entry.num_messages):
                # What was queued of it was acknowledged meanwhile: off the queue.  Only
                # that: the entry's other messages may be out with consumers (a batch
                # redelivered in parts, the rest just dead-lettered), and dropping their
                # bookkeeping left their nacks nothing to take back (bench/deadletter.py's
                # stall).
                self.deliveries.not_due(entry_id, left)
        return budget

    async def _read_one(self, consumer: Consumer, entry_id: int) -> Entry | None:
        """An entry to deliver again: from the compacted view below its horizon for a
        consumer that reads it (the log's may be trimmed, and what compaction removed is
        not redelivered)."""
        if consumer.read_compacted and entry_id < self.log.compaction_horizon:
            return await self.log.read_one_compacted(entry_id)
        return await self.log.read_one(entry_id)

    async def _read_new(self, consumer: Consumer, max_entries: int) -> list[Entry]:
        """The next entries from the read position: for a consumer with read_compacted,
        the compacted view's below its horizon (what compaction removed is passed over),
        then the log's."""
        if consumer.read_compacted and self.read_position < self.log.compaction_horizon:
            entries = await self.log.read_compacted(self.read_position, max_entries)
            if entries:
                return entries
            # Nothing more in the view: on with the log from its horizon.
            self.read_position = max(self.read_position, self.log.compaction_horizon)
        return await self.log.read(self.read_position, max_entries)

    async def _take_new(self, consumer: Consumer, budget: int, out: list[Any]) -> None:
        delaying = self.delays.honoured()
        try:
            await self._pass_new(consumer, budget, out, delaying, int(time.time() * 1000))
        finally:
            if delaying and self.delays.unsaved():
                self._save_soon()  # the new delayed rows, and the cursor passing them

    async def _pass_new(self, consumer: Consumer, budget: int, out: list[Any], delaying: bool, now_ms: int) -> None:
        deferred = 0
        while budget > 0:
            if deferred >= DEFER_PER_FETCH:
                # Passing a long run of delayed messages: one fetch takes at most this
                # many (the cursor write after it stores their rows), and wakes the
                # long polls so the next one goes on.
                self.log.wake()
                return
            entries = await self._read_new(consumer, min(READ_AHEAD_ENTRIES, budget))
            if not entries:
                return
            for entry in entries:
                self.read_position = entry.entry_id + 1
                self.cursor.note_size(entry.entry_id, entry.num_messages)
                due = self.cursor.unacked_mask(entry.entry_id, entry.num_messages)
                if entry.kept is not None:
                    due &= entry.kept
                due &= ~self.deliveries.pending_mask(entry.entry_id)
                due &= ~self.txn.pending.mask(entry.entry_id, entry.num_messages)
                if due and delaying:
                    kept = due
                    due = self.delays.defer(entry, due, now_ms)
                    deferred += (kept & ~due).bit_count()
                if not due:
                    continue
                mine = due & self._routed_to(consumer, entry)
                if self.sub_type == pb.SUB_SHARED and mine.bit_count() > budget:
                    # A Shared consumer takes at most its permits from a big batch, so
                    # one consumer cannot hoard a whole entry while the others starve.
                    mine = lowest_bits(mine, budget)
                if due & ~mine:
                    # Park what this consumer does not take (KeyShared: other consumers'
                    # keys; Shared: the rest of a big batch).  Not a redelivery.
                    self.deliveries.redeliver[entry.entry_id] = (
                        self.deliveries.redeliver.get(entry.entry_id, 0) | (due & ~mine))
                if mine:
                    budget -= self._deliver(consumer, entry, mine, out, redelivered=False)
                if budget <= 0:
                    return

    def _routed_to(self, consumer: Consumer, entry: Entry) -> int:
        """Mask of the entry's messages this consumer may take (all but for KeyShared)."""
        if self.sub_type != pb.SUB_KEY_SHARED:
            return full_mask(entry.num_messages)
        hashes = self._keys.get(entry.entry_id)
        if hashes is None:
            try:
                # One message per batch index (a Pulsar entry stored as sent, opened;
                # one that cannot be, by its entry's key: stored.stored_messages).
                hashes = [key_hash(dispatch_key(m.ordering_key if m.HasField("ordering_key") else None,
                                                m.partition_key if m.HasField("partition_key") else None))
                          for m in stored_messages(entry.payload or b"")]
                if len(hashes) != entry.num_messages:
                    raise DecodeError(f"{len(hashes)} messages in an entry of {entry.num_messages}")
            except (DecodeError, RuntimeWarning, BadRequest):
                # An undecodable entry (stored before batches were checked, or corrupted)
                # goes whole to one consumer, whose client skips it (docs/security.md),
                # instead of failing every fetch of the subscription.
                hashes = [key_hash(None)] * entry.num_messages
            if len(self._keys) > 4096:
                self._keys.clear()
            self._keys[entry.entry_id] = hashes
        mask = 0
        for i, h in enumerate(hashes):
            if self._ring.owner(h) == consumer.consumer_id:
                mask |= 1 << i
        return mask

    def _deliver(self, consumer: Consumer, entry: Entry, mask: int, out: list[Any], redelivered: bool) -> int:
        whole = mask == full_mask(entry.num_messages)
        indices = [] if whole and not redelivered else mask_indices(mask)
        counts = self.deliveries.counts_for(entry.entry_id, indices) if indices else []
        if indices and not any(counts) and whole:
            indices, counts = [], []
        self.deliveries.delivered(consumer.consumer_id, entry.entry_id, mask)
        out.append(pb.DeliveredEntry(
            entry_id=entry.entry_id, batch=entry.payload, num_messages=entry.num_messages,
            publish_time=entry.publish_time, producer_name=entry.producer_name,
            indices=indices, redelivery_counts=counts,
        ))
        return mask.bit_count()

    # ---------------------------------------------------------------- acks

    async def check_positions(self, what: str, positions: Sequence[PositionLike]) -> None:
        """Refuse (400) a batch index that names no message of its entry."""
        await self.log.check_batch_indexes(what, positions, self.cursor.size_of)

    async def ack(self, consumer: Consumer, positions: Sequence[PositionLike], cumulative: bool) -> None:
        if cumulative and self.sub_type in (pb.SUB_SHARED, pb.SUB_KEY_SHARED):
            raise NotAllowedError(
                f"cumulative ack is not allowed on {SUB_NAMES[self.sub_type]} subscription {self.name!r}"
            )
        end = self.log.next_entry_id
        for p in positions:
            if p.entry_id >= end:
                raise BadRequest(
                    f"ack of entry {p.entry_id} on {self.log.name.full}: the topic ends at entry {end - 1}"
                )
        await self.check_positions("ack", positions)
        if self.txn.pending.by_entry or self.txn.pending.cumulative:
            # A plain ack of a message pending in a transaction is ignored, as in Pulsar.
            positions = [p for p in positions if self.txn.pending.holder(p.entry_id, p.batch_index) is None]
        for p in positions:
            # Entry sizes are noted when entries are read for dispatch, which lets a
            # fully acknowledged batch collapse into its entry.
            if cumulative:
                self.cursor.ack_cumulative(p.entry_id, p.batch_index)
                self.deliveries.acked_cumulative(p.entry_id, p.batch_index)
                if self.delays.held:
                    self.delays.acked_through(p.entry_id - 1)
                    self.delays.acked(p.entry_id, p.batch_index)
            else:
                self.cursor.ack(p.entry_id, p.batch_index)
                self.deliveries.acked(p.entry_id, p.batch_index)
                if self.delays.held:
                    self.delays.acked(p.entry_id, p.batch_index)
        self.log.wake()
        if self.durable:
            await self._saver.submit(None)
            self.log.quota_acked()  # once the cursor is stored: the check reads it

    def unacked_mask(self, entry_id: int, num_messages: int) -> int:
        """The entry's messages not acknowledged: the cursor's, and due delayed messages
        (the cursor passed those when it kept them apart)."""
        mask = self.cursor.unacked_mask(entry_id, num_messages)
        if self.delays.held:
            mask |= self.delays.held_mask(entry_id)
        return mask

    def acknowledge(self, entry_id: int, index: int, num_messages: int) -> None:
        """Acknowledge one message in memory (a dead-letter move wrote it): the cursor,
        dispatch, and a due delayed message's row (stored with the next cursor write)."""
        self.cursor.ack(entry_id, index, num_messages)
        self.deliveries.acked(entry_id, index)
        if self.delays.held:
            self.delays.acked(entry_id, index)
            self._save_soon()

    @property
    def acked(self) -> AckedWithDelays | Cursor:
        """What transactional acks are checked against: the cursor, and the due delayed
        messages it passed (acknowledgeable although the cursor says acknowledged)."""
        return AckedWithDelays(self.cursor, self.delays) if self.delays.held else self.cursor

    def acked_in_transaction(self, individual: list[tuple[int, int]]) -> None:
        """A transaction that acknowledged these committed: due delayed messages among
        them have their rows deleted with the next cursor write."""
        if self.delays.held:
            for entry_id, index in individual:
                self.delays.acked(entry_id, index)
            self._save_soon()

    def held_in_transactions(self, entry_id: int, num_messages: int) -> int:
        """The entry's messages a transaction's acknowledgement holds."""
        return self.txn.pending.mask(entry_id, num_messages)

    def redeliver(self, consumer: Consumer, positions: Sequence[PositionLike]) -> int:
        chosen = None if not positions else [(p.entry_id, p.batch_index) for p in positions]
        moved = self.deliveries.release(consumer.consumer_id, chosen, count=True)
        self.redelivered(moved)
        if moved:
            consumer.rate_redeliver.add(time.monotonic(), moved, 0)
        self.log.wake()
        return moved

    def rewind(self) -> int:
        """Take back for redelivery, count + 1, everything every consumer holds
        unacknowledged (the abort of a cumulative transactional ack); how many."""
        return sum(self.deliveries.release(consumer_id, None, count=True) for consumer_id in list(self.consumers))

    def redelivered(self, messages: int) -> None:
        """Count messages taken back for redelivery (nack, ack timeout, redeliver-unacked,
        a consumer gone with unacknowledged messages, a failover switch, a transaction's
        abort of its acks): Pulsar's msgRateRedeliver."""
        if messages:
            metrics.REDELIVERIES.inc(messages)
            self.rate_redeliver.add(time.monotonic(), messages, 0)

    async def seek(self, entry_id: int, batch_index: int = WHOLE) -> None:
        """Reset the cursor so the next message delivered is (entry_id, batch_index)
        (or the first stored entry, when that one was trimmed)."""
        if entry_id < self.log.first_entry_id:
            entry_id, batch_index = self.log.first_entry_id, WHOLE
        await self.check_positions("seek", [pb.Position(entry_id=entry_id, batch_index=batch_index)])
        async with self.lock:
            self.cursor.reset(entry_id - 1)
            self.cursor.ack_first(entry_id, batch_index)
            self.deliveries.clear()
            self.dead.forget()
            self.delays.reset()
            self.read_position = self.cursor.mark_delete + 1
        self.log.wake()
        if self.durable:
            await self._saver.submit(None)

    async def acknowledge_through(self, entry_id: int) -> int:
        """Acknowledge every message up to and including entry ``entry_id`` (messageTTL
        expiry, expire-messages, backlog-quota eviction); the entries it moved the cursor
        over.  Messages pending in a transaction's ack are acknowledged too, as Pulsar's
        expiry does; trimming still keeps them while their transaction is open."""
        async with self.lock:
            before = self.cursor.mark_delete
            if entry_id <= before:
                return 0
            self.cursor.ack_cumulative(entry_id, WHOLE)
            self.deliveries.acked_cumulative(entry_id, WHOLE)
            if self.delays.pending or self.delays.held:
                self.delays.acked_through(entry_id)
            self.read_position = max(self.read_position, entry_id + 1)
        self.log.wake()
        if self.durable:
            await self._saver.submit(None)
            self.log.quota_acked()
        return self.cursor.mark_delete - before

    async def save_now(self) -> None:
        """Store the cursor (lease-checked); NotOwner when this broker lost the partition."""
        if self.durable:
            await self._saver.submit(None)

    def _save_soon(self) -> None:
        """Store the cursor without waiting (its failure loses the partition: logged there)."""
        if self.durable:
            self._saver.submit(None).add_done_callback(lambda f: f.cancelled() or f.exception())

    async def _save(self, items: list[None]) -> list[None]:
        async with self.persist_lock:
            changes = self.delays.take()
            if changes is None:
                ok = await self.log.store.save_cursor(
                    self.log.topic_id, self.log.epoch, self.name, self.cursor.mark_delete,
                    self.cursor.encode())
            else:
                # Delayed rows with the cursor, in one statement: the cursor passes new
                # ones (acknowledges their messages) only where they are stored.
                cursor = self.cursor
                if changes.records:
                    cursor = cursor.copy()
                    self.delays.acknowledge(cursor, changes.records)
                ok = await self.log.store.save_cursor_with_delays(
                    self.log.topic_id, self.log.epoch, self.name, cursor.mark_delete, cursor.encode(),
                    [(r.deliver_at, r.entry_id, r.indices(), r.mask.bit_count()) for r in changes.upserts],
                    changes.deletes, changes.clear_through)
                if ok:
                    await self.delays.saved(changes)
        if not ok:
            self.log.lose("fenced while saving a cursor")
            raise NotOwner(f"{self.log.name.full} moved to another broker; look it up again")
        return [None] * len(items)

    def at_end_of_topic(self) -> bool:
        """The topic is terminated and every message up to its last entry was read and
        none waits for redelivery (Pulsar's ReachedEndOfTopic)."""
        return self.log.at_end(self.read_position) and not self.deliveries.redeliver

    def backlog(self) -> int:
        return max(self.log.next_entry_id - 1 - self.cursor.mark_delete, 0)

    def stats(self) -> dict[Any, Any]:
        now = time.monotonic()
        rate, throughput = self.rate_out.rates(now)
        return {
            "type": SUB_NAMES.get(self.sub_type, "None"),
            "msgRateOut": rate,
            "msgThroughputOut": throughput,
            "msgRateRedeliver": self.rate_redeliver.rates(now)[0],
            "msgOutCounter": self.msg_out,
            "bytesOutCounter": self.bytes_out,
            "durable": self.durable,
            "markDeletePosition": self.cursor.mark_delete,
            "backlogEntries": self.backlog(),
            "unackedMessages": sum(self.deliveries.unacked.values()),
            "msgRedeliverPending": sum(m.bit_count() for m in self.deliveries.redeliver.values()),
            "pendingAckedMessages": self.txn.pending.count(),
            "msgDelayed": self.delays.pending,
            "delayedDeliveryActive": self.delays.honoured(),
            "deadLetterPolicy": None if self.dead.policy is None else self.dead.policy.as_json(),
            "msgDeadLettered": self.dead.moved,
            "msgDeadLetterPending": self.dead.pending(),
            "ongoingTxns": sorted(str(TxnID(*t)) for t in self.txn.pending.transactions()),
            "consumers": [
                {"consumerName": c.name, "consumerId": c.consumer_id, "priorityLevel": c.priority,
                 "unackedMessages": self.deliveries.unacked.get(c.consumer_id, 0),
                 "msgOutCounter": c.msg_out, "connectedSince": c.connected_since,
                 "msgRateRedeliver": c.rate_redeliver.rates(now)[0],
                 "isActive": self.sub_type != pb.SUB_FAILOVER or c.consumer_id == self._active}
                for c in self.consumers.values()
            ],
        }


def admin_dead_letter_policies(log: PartitionView, rows: Sequence[DeadLetterRow]) -> dict[str, DeadLetterPolicy]:
    """{subscription: policy} of the operators' policies ``rows`` that cover ``log`` (set
    on its topic, or on the partitioned topic it is a partition of)."""
    names = {log.name.full, log.name.base.full}
    return {row.subscription: DeadLetterPolicy(row.max_redeliver_count, row.dead_letter_topic,
                                               row.initial_subscription_name, row.retry_letter_topic)
            for row in rows if row.topic in names}


def refresh_dead_letter_policies(log: PartitionView, rows: Sequence[DeadLetterRow]) -> None:
    """Give each durable subscription served on ``log`` its operator's policy (or none)."""
    policies = admin_dead_letter_policies(log, rows)
    for sub in list(log.subscriptions.values()):
        if isinstance(sub, Subscription) and sub.durable:
            sub.dead.admin_policy = policies.get(sub.name)


FROM_LATEST = "latest"      # a new subscription starts after the last entry
FROM_EARLIEST = "earliest"  # ... at the first entry still stored


async def durable(log: PartitionView, name: str, start: int | str = FROM_LATEST,
                  existing: bool | None = None) -> Subscription:
    """The durable subscription ``name`` of ``log``, loaded and served here if it was not:
    the one get-or-open (under the partition's registry lock, so a name is opened once).
    A new one starts at ``start`` (FROM_LATEST, FROM_EARLIEST, or the entry id its mark-delete
    position is, taken under that lock).  ``existing``: True, only one that exists
    (SubscriptionNotFound otherwise); False, only a new one (Conflict otherwise)."""
    created = False

    async def open_() -> Subscription:
        nonlocal created
        if existing is not None:
            stored = await log.store.subscription_state(log.topic_id, name) is not None
            if existing and not stored:
                raise SubscriptionNotFound(f"subscription {name!r} does not exist on {log.name.full}")
            if not existing and stored:
                raise Conflict(f"subscription {name!r} already exists on {log.name.full}")
        created = True
        initial = (log.next_entry_id - 1 if start == FROM_LATEST else log.first_entry_id - 1 if start == FROM_EARLIEST
                   else int(start))
        return await Subscription._load_durable(log, name, initial)

    sub: Subscription = await log.subscriptions.get_or_open(name, open_)
    if existing and not sub.durable:
        raise SubscriptionNotFound(f"subscription {name!r} does not exist on {log.name.full}")
    if existing is False and not created:
        raise Conflict(f"subscription {name!r} already exists on {log.name.full}")
    return sub
