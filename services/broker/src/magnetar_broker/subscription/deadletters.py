"""A subscription's dead-letter moves, a part of the Subscription (``sub.dead``): the
policy in force, the messages its dispatch doomed (redelivered more often than the
policy allows), and the task that moves them.

A move is one SQL transaction, written by the owner of the dead-letter partition (this
broker or another: ``Sink``, deadletter_ops.py): the copies appended through that
partition's writer, and this subscription's cursor with the originals acknowledged,
lease-checked against this broker's lease.  So whatever crashes, a message is in exactly
one place: unacknowledged here, or in the dead-letter topic.  The cursor written is a
copy taken under ``persist_lock``, which the move holds until the in-memory cursor has
the same acknowledgements, so no other cursor write comes in between.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Protocol

from magnetar_broker import metrics
from magnetar_broker.entry import Entry
from magnetar_broker.subscription.cursor import Cursor
from magnetar_broker.subscription.deadrules import DeadLetterPolicy, copy_messages, doomed_mask, whole_envelopes
from magnetar_broker.subscription.dispatch import Deliveries, mask_indices
from magnetar_broker.subscription.view import PartitionView
from magnetar_protocol.errors import ConnectError, MagnetarError, PersistenceError, Timeout, UnknownError

log = logging.getLogger("magnetar.broker.deadletters")

# After a move that failed with nothing written (the dead-letter topic moving, not
# creatable, refused): try again this much later; meanwhile the messages wait here.
RETRY_S = 1.0
# Entries moved in one SQL transaction (one dead-letter entry holds their copies).
ENTRIES_PER_MOVE = 64
# Errors after which the move's outcome is unknown: the subscription is reloaded from the
# database (which says whether the originals were acknowledged), as after any write whose
# outcome is unknown.
UNKNOWN_OUTCOME = (ConnectError, Timeout, UnknownError, PersistenceError)


@dataclass(frozen=True, slots=True)
class Move:
    """Copies of a subscription's messages for a dead-letter (or retry) topic, and the
    subscription's cursor with the originals acknowledged: written together or not at
    all."""

    topic: str                 # the dead-letter topic (partitioned or not)
    initial_subscription: str  # created on it first ("": none)
    batch: bytes               # the copies (a serialized MessageBatch)
    num_messages: int
    source_topic: str          # the partition the originals are on
    source_partition: int
    source_topic_id: int
    source_epoch: int
    subscription: str
    mark_delete: int           # the cursor with the originals acknowledged
    acked_state: bytes
    deliver_at: int = 0        # a retry's delivery time, ms (0: none)


class Sink(Protocol):
    """Writes a Move (deadletter_ops.DeadLetterMoves).  Raises a MagnetarError: one of
    ``UNKNOWN_OUTCOME`` when it may have been written, any other when it was not."""

    async def move(self, move: Move) -> None: ...


class Holder(Protocol):
    """What the dead-letter part reads and updates of the subscription holding it."""

    log: PartitionView
    name: str
    cursor: Cursor
    persist_lock: asyncio.Lock
    deliveries: Deliveries

    def held_in_transactions(self, entry_id: int, num_messages: int) -> int: ...
    def unacked_mask(self, entry_id: int, num_messages: int) -> int: ...
    def acknowledge(self, entry_id: int, index: int, num_messages: int) -> None: ...


class DeadLetters:
    def __init__(self, sub: Holder) -> None:
        self.sub = sub
        # A consumer's policy (its client's ConsumerDeadLetterPolicy: the last one to
        # subscribe with one) and the operator's (the admin API), which wins.
        self.client_policy: DeadLetterPolicy | None = None
        self.admin_policy: DeadLetterPolicy | None = None
        self.due: dict[int, int] = {}  # entry -> messages to move
        self.moved = 0                 # messages moved by this broker since it loaded the subscription
        self._task: asyncio.Future[None] | None = None
        self._retry_at = 0.0

    @property
    def policy(self) -> DeadLetterPolicy | None:
        return self.admin_policy or self.client_policy

    def take_doomed(self, entry_id: int, mask: int, indices: list[int], counts: list[int]) -> int:
        """Of messages about to be redelivered (``mask``: their indices and counts), the
        ones past the policy's limit are taken off the redelivery and queued to move;
        returns what is left to deliver."""
        policy = self.policy
        if policy is None:
            return mask
        doomed = doomed_mask(indices, counts, policy.max_redeliver_count) & mask
        if doomed:
            self.sub.deliveries.dead_lettered(entry_id, doomed)
            self.due[entry_id] = self.due.get(entry_id, 0) | doomed
            self._kick()
        return mask & ~doomed

    def pending(self) -> int:
        return sum(m.bit_count() for m in self.due.values())

    def forget(self) -> None:
        """A seek: every message is due again from the new position, counts afresh."""
        self.due.clear()

    def _kick(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())
            self._task.add_done_callback(self._ended)

    def _ended(self, task: asyncio.Future[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("dead-letter moves of %s subscription %r failed", self.sub.log.name.full, self.sub.name,
                      exc_info=task.exception())

    async def _run(self) -> None:
        sub = self.sub
        while self.due and not sub.log.closed:
            wait = self._retry_at - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
                continue
            policy, sink = self.policy, sub.log.dead_letter_sink
            if policy is None or sink is None:
                # The policy was removed meanwhile: the messages go out again instead.
                for entry_id, mask in self.due.items():
                    sub.deliveries.requeue(entry_id, mask, count=False)
                self.due.clear()
                sub.log.wake()
                return
            group = {e: self.due.pop(e) for e in sorted(self.due)[:ENTRIES_PER_MOVE]}
            try:
                await self._move(policy, sink, group)
            except MagnetarError as exc:
                if isinstance(exc, UNKNOWN_OUTCOME):
                    sub.log.lose(f"a dead-letter move's outcome is unknown: {exc}")
                    return
                log.warning("could not move %d dead letter(s) of %s subscription %r to %s (again in %g s): %s",
                            sum(m.bit_count() for m in group.values()), sub.log.name.full, sub.name,
                            policy.dlq_topic(sub.log.name.base.full, sub.name), RETRY_S, exc)
                for entry_id, mask in group.items():
                    self.due[entry_id] = self.due.get(entry_id, 0) | mask
                self._retry_at = time.monotonic() + RETRY_S

    async def _move(self, policy: DeadLetterPolicy, sink: Sink, group: dict[int, int]) -> None:
        sub = self.sub
        async with sub.persist_lock:
            sub.log.check_open()
            cursor = sub.cursor.copy()
            copies: list[bytes] = []
            moving: list[tuple[Entry, list[int]]] = []
            count = 0
            for entry_id, mask in group.items():
                entry = await sub.log.read_one(entry_id)
                if entry is None or entry.payload is None:
                    continue  # trimmed meanwhile (acknowledged, or expired by TTL)
                # Acknowledged meanwhile, or held by a transaction's ack: not to move.
                movable = sub.unacked_mask(entry_id, entry.num_messages)
                movable &= ~sub.held_in_transactions(entry_id, entry.num_messages)
                live = mask & movable
                if not live:
                    continue
                # An envelope the broker cannot open is copied whole: all its messages go.
                indices = mask_indices(whole_envelopes(entry.payload, mask_indices(live)) & movable)
                batch, n = copy_messages(entry.payload, indices, sub.log.name.full, entry_id,
                                         sub.log.partition_index)
                copies.append(batch)
                count += n
                moving.append((entry, indices))
                for index in indices:
                    cursor.ack(entry_id, index, entry.num_messages)
            if not moving:
                return
            await sink.move(Move(
                policy.dlq_topic(sub.log.name.base.full, sub.name), policy.initial_subscription_name,
                b"".join(copies), count, sub.log.name.full, sub.log.partition_index, sub.log.topic_id,
                sub.log.epoch, sub.name, cursor.mark_delete, cursor.encode()))
            # Written: the live cursor takes the same acknowledgements before another
            # cursor write can start.
            for entry, indices in moving:
                for index in indices:
                    sub.acknowledge(entry.entry_id, index, entry.num_messages)
        self.moved += count
        metrics.DEAD_LETTERED.inc(count)
        sub.log.wake()
        sub.log.quota_acked()
