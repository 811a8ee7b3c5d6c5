"""A subscription's delayed messages, a part of the Subscription (``sub.delays``).

A Shared or Key_Shared subscription (durable) that reads a message whose delivery time
has not come keeps it apart instead of dispatching it: a ``Delayed`` row keyed by
(delivery time, entry).  The cursor acknowledges it in the same statement that stores
the row (``take``/``saved``: the save writes both), so its mark-delete position moves
on and a million delayed messages neither hold it back nor grow its individual acks.
When rows come due (a timer wakes the partition's long polls on the tick after the
earliest one), they are loaded by key, in time order, a page at a time, and queued for
dispatch like redeliveries (uncounted); an acknowledgement deletes its row with the
next cursor write.  Nothing is rescanned: the log is read once, rows are found by key.

Entries say whether they hold delayed messages (``Entry.deliver_at``, their producer's
latest delivery time); only those, and commit markers (a transaction's messages,
whatever they asked), are decoded to find each message's own time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from google.protobuf.message import DecodeError

from magnetar_broker.entry import Entry
from magnetar_broker.partition.batchcheck import WHOLE
from magnetar_broker.subscription.cursor import Cursor, full_mask
from magnetar_broker.subscription.delays import Delayed, Key, split_by_time, stored_mask, wake_at
from magnetar_broker.subscription.dispatch import Deliveries, mask_indices
from magnetar_broker.subscription.view import PartitionView
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.pulsar.batches import BatchFormatError
from magnetar_protocol.pulsar.stored import entry_count, metadata_of

LOAD_ROWS = 1000          # due rows loaded per fetch (the next fetch loads more)
TIMES_CACHED = 4096       # decoded entries whose per-message times are remembered
EVERYTHING = (1 << 63) - 1


@dataclass(slots=True)
class Changes:
    """What the next cursor write stores of the delayed rows, taken at once."""

    upserts: list[Delayed]
    deletes: list[Key]
    clear_through: int | None  # every row of an entry up to here goes (expiry, seek)
    records: list[Delayed]     # rows new this time: the same write acknowledges their messages
    generation: int
    messages: int = field(default=0)


class Holder(Protocol):
    """What the delayed part reads and uses of the subscription holding it."""

    log: PartitionView
    name: str
    durable: bool
    sub_type: int | None
    cursor: Cursor
    deliveries: Deliveries

    async def save_now(self) -> None: ...


def honours(sub_type: int | None) -> bool:
    """Pulsar delays Shared and Key_Shared dispatch only; Exclusive and Failover deliver at once."""
    return sub_type in (pb.SUB_SHARED, pb.SUB_KEY_SHARED)


def message_times(messages: Iterable[pb.SingleMessage]) -> list[int]:
    """Each batch index's delivery time (0: none) of a stored batch's messages.  A Pulsar
    entry stored as sent (an envelope) stands for all its messages, which share its
    metadata's ``deliver_at_time`` (copied onto the envelope): its payload is not opened."""
    times: list[int] = []
    for m in messages:
        times += [m.deliver_at_time] * (entry_count(metadata_of(m)) if m.pulsar_metadata else 1)
    return times


class Delays:
    def __init__(self, sub: Holder) -> None:
        self.sub = sub
        self.pending = 0   # messages waiting for their time (msgDelayed)
        self.held: dict[int, dict[int, Delayed]] = {}   # entry -> time -> due row, loaded, not acknowledged
        self.next_due: int | None = None  # the earliest time of a row not loaded yet (None: none)
        self._writes: dict[Key, Delayed | None] = {}  # for the next cursor write: upsert, or delete (None)
        self._records: list[Delayed] = []
        self._clear_through: int | None = None
        self._mark: Key = (-1, -1)  # rows up to this key were loaded
        self._generation = 0        # a seek starts another: earlier writes' acks are not applied
        self._unstored = 0          # cursor writes under way that carry rows
        self._times: dict[int, list[int]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0

    async def load(self) -> None:
        """A durable subscription just loaded: what waits, and when the first is due."""
        store, log = self.sub.log.store, self.sub.log
        self.pending = await store.delayed_count(log.topic_id, self.sub.name, -1)
        if self.pending:
            self.next_due = await store.next_delay(log.topic_id, self.sub.name, self._mark)
            self._arm()

    def honoured(self) -> bool:
        return self.sub.durable and honours(self.sub.sub_type) and self.sub.log.delayed_delivery.active

    def has_due(self, now_ms: int) -> bool:
        """Rows to load now: some are due, or delays are not honoured any more (the type
        changed, the policy was turned off: they all go out at once)."""
        return self.next_due is not None and (self.next_due <= now_ms or not self.honoured())

    # ---------------------------------------------------------------- reading the log

    def defer(self, entry: Entry, due: int, now_ms: int) -> int:
        """Of the messages ``due`` of ``entry``, read for the first time, keep apart those
        whose time has not come; the ones to deliver now."""
        if entry.txn is None and entry.deliver_at <= now_ms:
            return due
        times = self._delivery_times(entry)
        if times is None:
            return due
        now_due, later = split_by_time(times, due, now_ms)
        for at, mask in later.items():
            row = Delayed(at, entry.entry_id, mask, entry.num_messages)
            self._writes[row.key] = row
            self._records.append(row)
            self.pending += mask.bit_count()
            if self.next_due is None or at < self.next_due:
                self.next_due = at
        if later:
            self._arm()
        return now_due

    def unsaved(self) -> bool:
        """Rows (or their changes) the next cursor write must store."""
        return bool(self._writes) or self._clear_through is not None

    def _delivery_times(self, entry: Entry) -> list[int] | None:
        times = self._times.get(entry.entry_id)
        if times is None:
            try:
                times = message_times(pb.MessageBatch.FromString(entry.payload or b"").messages)
            except (DecodeError, RuntimeWarning, BatchFormatError):
                return None  # undecodable: delivered at once, the client skips it
            if len(self._times) >= TIMES_CACHED:
                self._times.clear()
            self._times[entry.entry_id] = times
        return times

    # ---------------------------------------------------------------- coming due

    async def load_due(self, now_ms: int) -> None:
        """Queue for dispatch the rows due by now (all of them when delays are not
        honoured any more), a page at a time, in time order."""
        if self.unsaved() or self._unstored:
            await self.sub.save_now()  # rows the next query must see are stored first
        until = now_ms if self.honoured() else EVERYTHING
        log = self.sub.log
        rows = await log.store.due_delays(log.topic_id, self.sub.name, until, self._mark, LOAD_ROWS)
        for at, entry_id, indices, messages in rows:
            row = Delayed(at, entry_id, stored_mask(indices, messages), messages)
            self.held.setdefault(entry_id, {})[at] = row
            self.pending -= row.mask.bit_count()
            self.sub.deliveries.requeue(entry_id, row.mask, count=False)
        if rows:
            self._mark = (rows[-1][0], rows[-1][1])
        if len(rows) == LOAD_ROWS:
            self.next_due = rows[-1][0]  # more are due: the next fetch loads them
        else:
            self.next_due = await log.store.next_delay(log.topic_id, self.sub.name, self._mark)
        self.pending = max(self.pending, 0)
        self._arm()

    def held_mask(self, entry_id: int) -> int:
        """The entry's due delayed messages not acknowledged yet (the cursor has passed them)."""
        mask = 0
        for row in self.held.get(entry_id, {}).values():
            mask |= row.mask
        return mask

    def _arm(self) -> None:
        """Wake the partition's long polls on the tick the earliest row comes due."""
        if self.next_due is None:
            return
        at = wake_at(self.next_due, self.sub.log.delayed_delivery.tick_ms)
        if self._timer is not None and not self._timer.cancelled() and self._timer_at <= at \
                and self._timer_at > time.time() * 1000:
            return  # an earlier wake-up is set: it loads this one too, or arms again
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = asyncio.get_running_loop().call_later(max(at / 1000 - time.time(), 0), self._wake)

    def _wake(self) -> None:
        self._timer = None
        if not self.sub.log.closed:
            self.sub.log.wake()

    # ---------------------------------------------------------------- acknowledgements

    def acked(self, entry_id: int, index: int) -> None:
        """A due delayed message (or the whole entry) was acknowledged: its row shrinks,
        or goes, with the next cursor write."""
        rows = self.held.get(entry_id)
        if not rows:
            return
        for at, row in list(rows.items()):
            bits = row.mask if index == WHOLE else row.mask & (1 << index)
            if not bits:
                continue
            row.mask &= ~bits
            if row.mask:
                self._writes[row.key] = row
            else:
                del rows[at]
                self._writes[row.key] = None
        if not rows:
            del self.held[entry_id]

    def acked_through(self, entry_id: int) -> None:
        """Everything up to ``entry_id`` was acknowledged (expiry, a cumulative ack): its
        rows go, stored ones included."""
        self._clear_through = max(self._clear_through or -1, entry_id)
        for e in [e for e in self.held if e <= entry_id]:
            del self.held[e]
        self._writes = {k: v for k, v in self._writes.items() if k[1] > entry_id}
        self._records = [r for r in self._records if r.entry_id > entry_id]

    def reset(self) -> None:
        """A seek: every message from the new position is due again and read afresh."""
        self._generation += 1
        self.held.clear()
        self._writes.clear()
        self._records.clear()
        self._times.clear()
        self._clear_through = EVERYTHING
        self._mark = (-1, -1)
        self.next_due = None
        self.pending = 0

    # ---------------------------------------------------------------- the cursor write

    def take(self) -> Changes | None:
        """What the cursor write about to start stores of the rows (None: nothing)."""
        if not self._writes and self._clear_through is None:
            return None
        changes = Changes([r for r in self._writes.values() if r is not None],
                          [k for k, r in self._writes.items() if r is None], self._clear_through,
                          self._records, self._generation)
        self._writes, self._records, self._clear_through = {}, [], None
        self._unstored += 1
        return changes

    @staticmethod
    def acknowledge(cursor: Cursor, records: list[Delayed]) -> None:
        """The cursor's side of new rows: their messages are acknowledged there."""
        for row in records:
            if row.mask == full_mask(row.num_messages):
                cursor.ack(row.entry_id, WHOLE, row.num_messages)
            else:
                for index in mask_indices(row.mask):
                    cursor.ack(row.entry_id, index, row.num_messages)

    async def saved(self, changes: Changes) -> None:
        """The write is stored: the live cursor acknowledges the new rows' messages too
        (unless a seek came meanwhile); after a clearance, recount what waits."""
        self._unstored -= 1
        if changes.generation != self._generation:
            return
        self.acknowledge(self.sub.cursor, changes.records)
        if changes.clear_through is not None:
            log = self.sub.log
            self.pending = await log.store.delayed_count(log.topic_id, self.sub.name, -1) + sum(
                r.mask.bit_count() for r in self._records)  # and those not stored yet
            self.next_due = await log.store.next_delay(log.topic_id, self.sub.name, self._mark)
            self._arm()
