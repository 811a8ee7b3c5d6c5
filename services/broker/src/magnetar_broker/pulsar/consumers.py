"""SUBSCRIBE, FLOW (pushed MESSAGEs), ACK, REDELIVER_UNACKNOWLEDGED_MESSAGES, SEEK,
GET_LAST_MESSAGE_ID, UNSUBSCRIBE and CLOSE_CONSUMER on the service's subscribe, fetch,
ack, redeliver, seek, last_message_id and close_consumer (the routes /v1/consumers/*):
who gets which message, cursors and redelivery counts are the subscription's.

Each consumer has one dispatch task: while it holds permits it long-polls the service's
fetch (as the Magnetar client does) and pushes one MESSAGE per delivered entry; an entry
only partly due (redelivery, Key_Shared, partly acknowledged) carries an ``ack_set``
marking the messages to deliver."""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass, field

from magnetar_broker.commands import Ack, CloseConsumer, Fetch, Position, Redeliver, Seek, Subscribe
from magnetar_broker.pulsar.connection import Connection, answer
from magnetar_broker.pulsar.errors import failure
from magnetar_broker.pulsar.producers import BROKER_REQUEST
from magnetar_broker.subscription.subscription import Consumer
from magnetar_protocol import magnetar_pb2 as mpb
from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol import schemainfo
from magnetar_protocol.errors import ConsumerNotFound, MagnetarError
from magnetar_protocol.pulsar import ids, stored
from magnetar_protocol.pulsar.clients import understands_end_of_topic
from magnetar_protocol.txnid import TxnID

log = logging.getLogger("magnetar.broker.pulsar")

Type = pb.BaseCommand.Type
Sub = pb.CommandSubscribe
SUB_TYPES = {Sub.Exclusive: mpb.SUB_EXCLUSIVE, Sub.Shared: mpb.SUB_SHARED, Sub.Failover: mpb.SUB_FAILOVER,
             Sub.Key_Shared: mpb.SUB_KEY_SHARED}
# Entry sizes remembered per consumer, to read batch-index acks (ack_set) exactly.
SIZES_KEPT = 100_000
# While a consumer has no permits, how often its dispatch task checks whether the
# broker closed it (the topic moved): the client is then told to reconnect.
IDLE_CHECK_S = 1.0


@dataclass
class PulsarConsumer:
    pulsar_id: int
    magnetar_id: int
    partition: int
    permits: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    sizes: OrderedDict = field(default_factory=OrderedDict)   # entry id -> messages
    task: asyncio.Task | None = None
    told_end: bool = False   # REACHED_END_OF_TOPIC sent (once: termination is final)
    served: Consumer | None = None  # the broker's consumer (set once subscribed)
    split: dict = field(default_factory=dict)   # entry id -> SplitEntry (sent in several frames)


@dataclass
class SplitEntry:
    """An entry delivered in several MESSAGE frames under one id (``_push``)."""

    delivered: tuple[int, ...]   # the batch indices delivered; () = all


class Consumers:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.service = conn.service
        self.consumers: dict[int, PulsarConsumer] = {}

    def handlers(self) -> dict:
        return {Type.SUBSCRIBE: self.subscribe, Type.FLOW: self.flow, Type.ACK: self.ack,
                Type.REDELIVER_UNACKNOWLEDGED_MESSAGES: self.redeliver, Type.SEEK: self.seek,
                Type.GET_LAST_MESSAGE_ID: self.last_message_id, Type.UNSUBSCRIBE: self.unsubscribe,
                Type.CLOSE_CONSUMER: self.close}

    def _get(self, consumer_id: int) -> PulsarConsumer:
        consumer = self.consumers.get(consumer_id)
        if consumer is None:
            raise ConsumerNotFound(f"consumer {consumer_id} is not subscribed on this connection")
        return consumer

    # ---------------------------------------------------------------- SUBSCRIBE

    async def subscribe(self, frame) -> None:
        cmd = frame.body
        if cmd.consumer_id in self.consumers:   # a retried SUBSCRIBE
            self.conn.send(pb.CommandSuccess(request_id=cmd.request_id))
            return

        async def call() -> Consumer:
            start = None
            if not cmd.durable and cmd.HasField("start_message_id") and not ids.is_latest(cmd.start_message_id):
                # Earliest, or the whole entry holding the start id: the client drops what
                # comes before its start id in a batch, as with a Pulsar broker.
                first = cmd.start_message_id
                start = Position(0 if ids.is_earliest(first) else first.entry_id, ids.WHOLE)
            # The subscription type's rule is the command's (an unknown value stays
            # unknown: Pulsar's types and Magnetar's share their numbers).
            return await self.service.subscribe(Subscribe(
                session_id=self.conn.session_id, topic=cmd.topic, subscription=cmd.subscription,
                sub_type=SUB_TYPES.get(cmd.sub_type, cmd.sub_type), durable=cmd.durable,
                earliest=cmd.initial_position == Sub.Earliest, consumer_name=cmd.consumer_name,
                priority=cmd.priority_level, start=start, start_inclusive=start is not None,
                read_compacted=cmd.read_compacted,
                schema=schemainfo.from_pulsar(cmd.schema) if cmd.HasField("schema") else None))

        def subscribed(served: Consumer) -> pb.CommandSuccess:
            consumer = PulsarConsumer(cmd.consumer_id, served.consumer_id, served.subscription.log.partition_index,
                                      served=served)
            self.consumers[cmd.consumer_id] = consumer
            consumer.task = self.conn.spawn(self._dispatch(consumer))
            self.conn.send(pb.CommandSuccess(request_id=cmd.request_id))
            if served.subscription.sub_type == mpb.SUB_FAILOVER:
                served.on_active_change = lambda active, c=consumer: self._active_change(c, active)
                self._active_change(consumer, served.subscription.active_consumer_id == served.consumer_id)
            return None

        await answer(self.conn, cmd.request_id, call, subscribed)

    def _active_change(self, consumer: PulsarConsumer, active: bool) -> None:
        if self.consumers.get(consumer.pulsar_id) is consumer:
            self.conn.send(pb.CommandActiveConsumerChange(consumer_id=consumer.pulsar_id, is_active=active))

    # ---------------------------------------------------------------- FLOW and dispatch

    async def flow(self, frame) -> None:
        cmd = frame.body
        consumer = self.consumers.get(cmd.consumer_id)
        if consumer is None:
            return   # FLOW has no answer; a late one for a closed consumer is harmless
        consumer.permits += cmd.message_permits
        consumer.wake.set()

    async def _dispatch(self, consumer: PulsarConsumer) -> None:
        wait_ms = self.conn.settings.max_fetch_wait_ms
        at_end = False
        while self.consumers.get(consumer.pulsar_id) is consumer:
            served = consumer.served
            if served is None or served.closed:
                self._closed_by_broker(consumer, "the topic moved or the consumer was closed")
                return
            if consumer.permits <= 0 or at_end:
                # Without permits, or at the end of a terminated topic (where a fetch
                # answers at once): wait for a FLOW, or look again in a while (a
                # redelivery may still come).
                at_end = False
                consumer.wake.clear()
                try:
                    await asyncio.wait_for(consumer.wake.wait(), IDLE_CHECK_S)
                except TimeoutError:
                    pass
                continue
            try:
                reply = await self.service.fetch(Fetch(
                    consumer_id=consumer.magnetar_id, session_id=self.conn.session_id,
                    max_messages=consumer.permits, wait_ms=wait_ms))
            except MagnetarError as exc:
                self._closed_by_broker(consumer, str(exc))
                return
            for entry in reply.entries:
                consumer.permits -= self._push(consumer, entry)
            at_end = reply.end_of_topic and not reply.entries
            if at_end and not consumer.told_end:
                # Terminated and all delivered: the client knows it reached the end
                # (Java's hasReachedEndOfTopic), as from a Pulsar broker, unless it would
                # drop the connection over it (clients.py).
                consumer.told_end = True
                if understands_end_of_topic(self.conn.client_version):
                    self.conn.send(pb.CommandReachedEndOfTopic(consumer_id=consumer.pulsar_id))
            await self.conn.writer.drain()

    def _push(self, consumer: PulsarConsumer, entry: mpb.DeliveredEntry) -> int:
        """Send the MESSAGE for ``entry`` (several when it must be split:
        ``stored.pulsar_parts``); the number of messages it delivers."""
        batch = mpb.MessageBatch.FromString(entry.batch)
        parts = stored.pulsar_parts(batch, producer_name=entry.producer_name or "magnetar",
                                    publish_time=entry.publish_time)
        consumer.sizes[entry.entry_id] = entry.num_messages
        if len(consumer.sizes) > SIZES_KEPT:
            consumer.sizes.popitem(last=False)
        due = set(entry.indices) if entry.indices else None
        redelivery = max(entry.redelivery_counts, default=0) if entry.indices else 0
        sent = 0
        for part in parts:
            indices = range(part.first, part.first + part.count)
            mine = [i - part.first for i in indices if due is None or i in due]
            if not mine:
                continue
            message = pb.CommandMessage(consumer_id=consumer.pulsar_id,
                                        message_id=ids.message_id(entry.entry_id, consumer.partition))
            if redelivery:
                message.redelivery_count = redelivery
            if len(mine) < part.count:
                message.ack_set.extend(ids.indices_to_words(mine, part.count))
            self.conn.send(message, part.metadata, part.payload)
            sent += 1
        if sent > 1:
            # One entry in several frames under one id (a transaction's sends joined
            # around an encrypted or chunked one): their batch indices and ack sets are
            # each frame's own, so an ack or a nack of the id is read as of the entry.
            consumer.split[entry.entry_id] = SplitEntry(delivered=tuple(sorted(due)) if due else ())
        return len(entry.indices) or entry.num_messages

    def _closed_by_broker(self, consumer: PulsarConsumer, reason: str) -> None:
        if self.consumers.pop(consumer.pulsar_id, None) is None:
            return
        log.info("pulsar connection %s: consumer %d closed by the broker: %s", self.conn.peer,
                 consumer.pulsar_id, reason)
        self.conn.spawn(self.service.close_consumer(CloseConsumer(
            consumer_id=consumer.magnetar_id, session_id=self.conn.session_id)))
        self.conn.send(pb.CommandCloseConsumer(consumer_id=consumer.pulsar_id, request_id=BROKER_REQUEST))

    # ---------------------------------------------------------------- acks

    async def ack(self, frame) -> None:
        cmd = frame.body
        request_id = cmd.request_id if cmd.HasField("request_id") else None

        async def call():
            consumer = self._get(cmd.consumer_id)
            cumulative = cmd.ack_type == pb.CommandAck.Cumulative
            positions: list[Position] = []
            for mid in cmd.message_id:
                if mid.entry_id in consumer.split:
                    positions += self._split_ack(consumer, mid, cumulative)
                    continue
                positions += [Position(p.entry_id, p.batch_index)
                              for p in ids.ack_positions(mid, cumulative, consumer.sizes.get(mid.entry_id))]
            if positions:
                # Pending in the transaction until it ends (pulsar/transactions.py).
                txn = (TxnID(cmd.txnid_most_bits, cmd.txnid_least_bits)
                       if cmd.HasField("txnid_most_bits") or cmd.HasField("txnid_least_bits") else None)
                await self.service.ack(Ack(consumer_id=consumer.magnetar_id, session_id=self.conn.session_id,
                                           positions=tuple(positions), cumulative=cumulative, txn=txn))

        try:
            await call()
        except MagnetarError as exc:
            if request_id is None:
                log.info("pulsar connection %s: ack refused: %s", self.conn.peer, exc)
                return
            error, message = failure(exc)
            self.conn.send(pb.CommandAckResponse(consumer_id=cmd.consumer_id, request_id=request_id,
                                                 error=error, message=message))
            return
        if request_id is not None:
            self.conn.send(pb.CommandAckResponse(consumer_id=cmd.consumer_id, request_id=request_id))

    def _split_ack(self, consumer: PulsarConsumer, mid: pb.MessageIdData, cumulative: bool) -> list[Position]:
        """An ACK naming an entry sent in several frames (``_push``): the frames share
        the entry's id, which the client cannot tell apart either (its ack grouping
        merges acks of one id), so acknowledging any acknowledges what was delivered
        of the entry (docs/pulsar-protocol.md, "Entries stored as sent")."""
        split = consumer.split.pop(mid.entry_id)
        if cumulative or not split.delivered:
            return [Position(mid.entry_id, ids.WHOLE)]
        return [Position(mid.entry_id, i) for i in split.delivered]

    async def redeliver(self, frame) -> None:
        cmd = frame.body
        consumer = self.consumers.get(cmd.consumer_id)
        if consumer is None:
            return
        # Just the listed messages (a negative ack); a batch index names one message of a
        # batch, else the whole entry goes again.
        positions = []
        for mid in cmd.message_ids:
            index = mid.batch_index if mid.HasField("batch_index") and mid.batch_index >= 0 else ids.WHOLE
            if consumer.split.pop(mid.entry_id, None) is not None:
                index = ids.WHOLE   # its index is one frame's (_push): the entry goes again whole
            positions.append(Position(mid.entry_id, index))
        try:
            await self.service.redeliver(Redeliver(consumer_id=consumer.magnetar_id, session_id=self.conn.session_id,
                                                   positions=tuple(positions)))
        except MagnetarError as exc:   # no answer exists for this command
            log.info("pulsar connection %s: redelivery refused: %s", self.conn.peer, exc)

    # ---------------------------------------------------------------- SEEK, last id

    async def seek(self, frame) -> None:
        cmd = frame.body

        async def call() -> PulsarConsumer:
            consumer = self._get(cmd.consumer_id)
            position = None
            if cmd.HasField("message_id"):
                mid = cmd.message_id
                if ids.is_earliest(mid):
                    position = Position(0, ids.WHOLE)
                elif ids.is_latest(mid):
                    position = Position(ids.LATEST_ENTRY, ids.WHOLE)
                else:
                    index = mid.batch_index if mid.HasField("batch_index") and mid.batch_index >= 0 else ids.WHOLE
                    position = Position(mid.entry_id, index)
            # Which forms a seek may take is the command's rule.
            await self.service.seek(Seek(
                consumer_id=consumer.magnetar_id, session_id=self.conn.session_id, position=position,
                publish_time=cmd.message_publish_time if cmd.HasField("message_publish_time") else None))
            return consumer

        async def seek_then_close() -> None:
            # As a Pulsar broker does, in its order: the consumer is disconnected first
            # (CLOSE_CONSUMER), then the seek answered.  The C++ client (the wheel) takes
            # its new start position from the seek only when the answer finds it
            # reconnecting; answered first, its reconnect started from what it had read
            # (a time seek after an id seek was undone, a reader went back).  A reader's
            # subscription outlives the close for it to come back to, at the position
            # sought (Pulsar's resetCursor keeps a non-durable cursor too).
            await self._close_for_seek(await call())

        await answer(self.conn, cmd.request_id, seek_then_close,
                     lambda _: pb.CommandSuccess(request_id=cmd.request_id))

    async def _close_for_seek(self, consumer: PulsarConsumer) -> None:
        if self.consumers.pop(consumer.pulsar_id, None) is None:
            return
        await self.service.close_consumer(CloseConsumer(
            consumer_id=consumer.magnetar_id, session_id=self.conn.session_id, keep_reader=True))
        self.conn.send(pb.CommandCloseConsumer(consumer_id=consumer.pulsar_id, request_id=BROKER_REQUEST))

    async def last_message_id(self, frame) -> None:
        cmd = frame.body

        async def call():
            consumer = self._get(cmd.consumer_id)
            last = await self.service.last_message_id(consumer.magnetar_id, self.conn.session_id)
            if last.last_entry_id is not None:
                index = last.index if last.last_batch_size > 1 else ids.WHOLE
                last_id = ids.message_id(last.last_entry_id, consumer.partition, index)
            else:   # nothing yet: (-1, -1), which equals the client's "earliest"
                last_id = pb.MessageIdData(ledger_id=ids.U64, entry_id=ids.U64, partition=consumer.partition)
            return pb.CommandGetLastMessageIdResponse(
                request_id=cmd.request_id, last_message_id=last_id,
                consumer_mark_delete_position=ids.message_id(last.mark_delete, consumer.partition))

        await answer(self.conn, cmd.request_id, call, lambda reply: reply)

    # ---------------------------------------------------------------- closing

    async def unsubscribe(self, frame) -> None:
        await self._close(frame.body, unsubscribe=True)

    async def close(self, frame) -> None:
        await self._close(frame.body, unsubscribe=False)

    async def _close(self, cmd, unsubscribe: bool) -> None:
        async def call():
            consumer = self.consumers.get(cmd.consumer_id)
            if consumer is None:
                if unsubscribe:
                    raise ConsumerNotFound(f"consumer {cmd.consumer_id} is not subscribed on this connection")
                return
            await self.service.close_consumer(CloseConsumer(
                consumer_id=consumer.magnetar_id, session_id=self.conn.session_id, unsubscribe=unsubscribe))
            self.consumers.pop(cmd.consumer_id, None)
            if consumer.task is not None:
                consumer.task.cancel()

        await answer(self.conn, cmd.request_id, call, lambda _: pb.CommandSuccess(request_id=cmd.request_id))
