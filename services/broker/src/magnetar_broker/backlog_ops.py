"""Operators' backlog operations on a partition this broker owns (the admin's calls to
/internal/v1/...): create a subscription at a position, skip, clear, reset, peek, read
one message, the last message id, terminate, unload.

They run here, in the owner, because the owner holds the cursor in memory and serves its
consumers: a cursor written behind its back would be overwritten by the next ack.  Every
change is saved with the lease-checked cursor write (``save_cursor``), so a broker that
lost the partition changes nothing.  Where a skip lands is a pure rule
(subscription/backlog.py).  As in Pulsar, a reset disconnects the subscription's
consumers (they subscribe again and drop what they had buffered; the broker delivers from
the new position); a skip or clear does not, and the messages it skipped are no longer
redelivered.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Callable
from typing import Any

from google.protobuf.message import DecodeError

from magnetar_broker.entry import Entry
from magnetar_broker.ownership import Ownership, rendezvous
from magnetar_broker.partition.log import PartitionLog
from magnetar_broker.store import BrokerStore
from magnetar_broker.subscription.backlog import (
    MAX_PEEK,
    READ_CHUNK,
    WHOLE,
    SkipPlan,
    due_positions,
    message_id_problem,
    plan_skip,
    reset_time_problem,
)
from magnetar_broker.subscription.subscription import FROM_LATEST, Consumer, Subscription, durable
from magnetar_broker.subscription.view import PartitionView
from magnetar_protocol.cursorstate import acked_beyond
from magnetar_protocol.errors import BadRequest, NotFound
from magnetar_protocol.pulsar.stored import stored_messages
from magnetar_protocol.topics import TopicName

log = logging.getLogger("magnetar.broker.backlog")


def message_json(plog: PartitionLog, entry: Entry, index: int) -> dict:
    """One message of an entry with its metadata (Pulsar's REST headers as fields)."""
    out = {"messageId": {"ledgerId": 0, "entryId": entry.entry_id, "partitionIndex": plog.partition_index,
                         "batchIndex": index},
           "publishTime": entry.publish_time, "producerName": entry.producer_name,
           "batchSize": entry.num_messages}
    try:
        m = stored_messages(entry.payload or b"")[index]   # a Pulsar entry stored as sent, opened
    except (DecodeError, IndexError, RuntimeWarning, BadRequest) as exc:
        return out | {"undecodable": f"the stored batch does not decode: {exc}"}
    return out | {"payload": base64.b64encode(m.payload).decode(), "properties": dict(m.properties),
                  "sequenceId": m.sequence_id, "eventTime": m.event_time,
                  "partitionKey": m.partition_key if m.HasField("partition_key") else None}


async def stored_acked_beyond(plog: PartitionView, mark_delete: int, acked: dict[int, int]) -> int:
    """Messages of ``plog`` acknowledged individually after ``mark_delete``."""
    beyond = [e for e in acked if e > mark_delete]
    return acked_beyond(mark_delete, acked, await plog.message_counts(beyond)) if beyond else 0


class BacklogOps:
    def __init__(self, ownership: Ownership, store: BrokerStore, broker_id: str,
                 drop_consumer: Callable[[Consumer], None], terminate_txn_wait_s: float = 3.0):
        self.ownership = ownership
        self.terminate_txn_wait_s = terminate_txn_wait_s
        self.store = store
        self.broker_id = broker_id
        self._drop_consumer = drop_consumer

    async def _log(self, topic: str) -> PartitionLog:
        return await self.ownership.get_log(TopicName.parse(topic))

    async def _subscription(self, plog: PartitionLog, name: str) -> Subscription:
        """The durable subscription, loaded here if no consumer has it open; 404 if it
        does not exist."""
        return await durable(plog, name, -1, existing=True)

    async def _check_message_id(self, plog: PartitionLog, entry_id: int, batch_index: int) -> Entry:
        first = await self.store.first_entry_id(plog.topic_id)
        if problem := message_id_problem(entry_id, batch_index, plog.next_entry_id, first):
            raise NotFound(f"message id ({plog.partition_index},{entry_id},{batch_index}) on "
                           f"{plog.name.full}: {problem}")
        entry = await plog.read_one(entry_id)
        if entry is None:
            raise NotFound(f"entry {entry_id} of {plog.name.full} is no longer stored")
        if batch_index >= entry.num_messages:
            raise NotFound(f"entry {entry_id} of {plog.name.full} holds {entry.num_messages} message(s): "
                           f"batch index {batch_index} names none of them")
        return entry

    # ---------------------------------------------------------------- subscriptions

    async def create_subscription(self, topic: str, name: str, entry_id: int | None, batch_index: int) -> dict:
        """Create a durable subscription whose first message is (entry_id, batch_index);
        ``entry_id`` -1: earliest, None: latest (after the last message).  409 if it exists."""
        plog = await self._log(topic)
        if entry_id is not None and entry_id >= 0:
            await self._check_message_id(plog, entry_id, batch_index)
        sub = await durable(plog, name, FROM_LATEST if entry_id is None else max(entry_id, 0) - 1, existing=False)
        if entry_id is not None and entry_id >= 0 and batch_index > 0:
            await sub.seek(entry_id, batch_index)
        log.info("created subscription %r on %s at mark-delete %d", name, plog.name.full, sub.cursor.mark_delete)
        return {"markDeletePosition": sub.cursor.mark_delete}

    async def skip(self, topic: str, name: str, count: int | None) -> dict:
        """Acknowledge the next ``count`` due messages (None: all of them, clear-backlog)."""
        plog = await self._log(topic)
        sub = await self._subscription(plog, name)
        async with sub.lock:
            end = plog.next_entry_id
            if count is None:
                skipped = await self._skip_all(sub, end)
            else:
                skipped = await self._skip(sub, end, count)
            sub.read_position = max(sub.read_position, sub.cursor.mark_delete + 1)
        plog.wake()
        await sub.save_now()
        log.info("skipped %d message(s) of subscription %r on %s", skipped, name, plog.name.full)
        return {"skipped": skipped, "markDeletePosition": sub.cursor.mark_delete}

    async def _skip(self, sub: Subscription, end: int, count: int) -> int:
        plan, start = SkipPlan(), sub.cursor.mark_delete + 1
        sizes: dict[int, int] = {}
        while plan.skipped < count and start < end:
            chunk = await self.store.entry_sizes_from(sub.log.topic_id, start, end, READ_CHUNK)
            if not chunk:
                break
            sizes.update(chunk)
            plan_skip(sub.cursor, chunk, count, plan, sub.txn.pending.mask)
            start = chunk[-1][0] + 1
        plan.apply(sub.cursor, sizes)
        for entry_id in plan.whole:
            sub.deliveries.acked(entry_id, WHOLE)
        for entry_id, mask in plan.partial.items():
            for index in range(mask.bit_length()):
                if mask >> index & 1:
                    sub.deliveries.acked(entry_id, index)
        return plan.skipped

    async def _skip_all(self, sub: Subscription, end: int) -> int:
        messages, _ = await self.store.backlog_since(sub.log.topic_id, sub.cursor.mark_delete)
        if sub.txn.pending.by_entry or sub.txn.pending.cumulative:
            # Messages a transaction holds stay for its commit or abort: skip around them.
            return await self._skip(sub, end, messages)
        acked = await stored_acked_beyond(sub.log, sub.cursor.mark_delete, sub.cursor.acked)
        if end > 0:
            sub.cursor.ack_cumulative(end - 1, WHOLE)
            sub.deliveries.acked_cumulative(end - 1, WHOLE)
        return max(messages - acked, 0)

    async def reset(self, topic: str, name: str, entry_id: int | None, batch_index: int,
                    timestamp_ms: int | None) -> dict:
        """Move the cursor so the next message delivered is (entry_id, batch_index), or the
        first published at or after ``timestamp_ms``; the consumers are disconnected."""
        plog = await self._log(topic)
        if timestamp_ms is not None:
            if problem := reset_time_problem(timestamp_ms, int(time.time() * 1000)):
                raise BadRequest(f"reset-cursor on {plog.name.full}: {problem}")
            sub = await self._subscription(plog, name)
            first = await self.store.first_entry_since(plog.topic_id, timestamp_ms)
            entry_id, batch_index = (plog.next_entry_id if first is None else first), WHOLE
        else:
            assert entry_id is not None  # the route passes a message id or a timestamp
            await self._check_message_id(plog, entry_id, batch_index)
            sub = await self._subscription(plog, name)
        # Consumers go first, before any wait: none of them may fetch from the new
        # position and hand it to a client that has not noticed the reset yet.
        for consumer in list(sub.consumers.values()):
            self._drop_consumer(consumer)
        await sub.seek(entry_id, batch_index)
        log.info("reset subscription %r on %s to %d:%d", name, plog.name.full, entry_id, batch_index)
        return {"markDeletePosition": sub.cursor.mark_delete, "entryId": entry_id, "batchIndex": batch_index}

    async def peek(self, topic: str, name: str, count: int) -> dict:
        """The first ``count`` messages the subscription has not acknowledged, with their
        metadata; the cursor does not move."""
        if not 1 <= count <= MAX_PEEK:
            raise BadRequest(f"peek: the count must be between 1 and {MAX_PEEK} (got {count})")
        plog = await self._log(topic)
        sub = await self._subscription(plog, name)
        positions: list[tuple[int, int]] = []
        start, end = sub.cursor.mark_delete + 1, plog.next_entry_id
        while len(positions) < count and start < end:
            chunk = await self.store.entry_sizes_from(plog.topic_id, start, end, READ_CHUNK)
            if not chunk:
                break
            positions += due_positions(sub.cursor, chunk, count - len(positions), sub.txn.pending.mask)
            start = chunk[-1][0] + 1
        messages: list[dict[str, Any]] = []
        entries: dict[int, Entry | None] = {}
        for entry_id, index in positions:
            if entry_id not in entries:
                entries[entry_id] = await plog.read_one(entry_id)
            if (entry := entries[entry_id]) is not None:
                messages.append(message_json(plog, entry, index))
        return {"messages": messages}

    # ---------------------------------------------------------------- the log

    async def message(self, topic: str, entry_id: int, batch_index: int) -> dict:
        plog = await self._log(topic)
        entry = await self._check_message_id(plog, entry_id, batch_index)
        indexes = range(entry.num_messages) if batch_index == WHOLE else [batch_index]
        return {"messages": [message_json(plog, entry, i) for i in indexes]}

    async def examine(self, topic: str, earliest: bool, position: int) -> dict:
        """Pulsar's examine-message: the messages of the ``position``-th stored entry (1:
        the first) counted from the oldest one, or back from the newest."""
        plog = await self._log(topic)
        first = await self.store.first_entry_id(plog.topic_id)
        last = plog.next_entry_id - 1
        entry_id = (first if first is not None else last + 1) + position - 1 if earliest else last - position + 1
        if first is None or not first <= entry_id <= last:
            raise NotFound(f"{plog.name.full} has no message at position {position} from the "
                           f"{'earliest' if earliest else 'latest'}")
        return await self.message(topic, entry_id, WHOLE)

    async def last_message_id(self, topic: str) -> dict:
        plog = await self._log(topic)
        last = await plog.last_entry()
        if last is None:
            return {"ledgerId": 0, "entryId": -1, "partitionIndex": plog.partition_index, "batchIndex": -1}
        return {"ledgerId": 0, "entryId": last.entry_id, "partitionIndex": plog.partition_index,
                "batchIndex": last.num_messages - 1, "batchSize": last.num_messages}

    async def terminate(self, topic: str) -> dict:
        plog = await self._log(topic)
        last = await plog.terminate(self.terminate_txn_wait_s)
        log.info("terminated %s at entry %d", plog.name.full, last)
        return {"ledgerId": 0, "entryId": last, "partitionIndex": plog.partition_index, "batchIndex": -1}

    async def unload(self, topic: str, ttl_s: float) -> dict:
        """Hand the partition to another live broker (chosen as lookups choose, among the
        others), or release it when this broker is the only one.  Queued sends fail with
        NotOwner, which clients retry on the new owner (deduplicated)."""
        name = TopicName.parse(topic)
        found = await self.store.get_topic(name.full)
        epoch = None if found is None else await self.store.my_epoch(found.topic_id)
        if found is None or epoch is None:
            return {"unloaded": False, "brokerId": None}
        # The lease moves first (its compare-and-set waits for writes in flight), then
        # serving stops; a lookup in between already answers the new owner.
        others = [b for b in await self.store.live_brokers(ttl_s) if b[0] != self.broker_id]
        target = rendezvous(name.full, others)[0] if others else None
        if target is None:
            await self.store.release_topic(found.topic_id, epoch)
            moved = False
        else:
            moved = await self.store.hand_over_topic(found.topic_id, epoch, target)
        if (plog := self.ownership.logs.get(name.full)) is not None:
            plog.lose("unloaded by an operator")
        log.info("unloaded %s to %s", name.full, f"broker {target}" if moved else "the next lookup")
        return {"unloaded": True, "brokerId": target if moved else None}
