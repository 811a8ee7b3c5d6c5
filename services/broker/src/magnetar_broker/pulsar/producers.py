"""PRODUCER, SEND and CLOSE_PRODUCER on the service's create_producer, publish and
close_producer (what the routes /v1/producers/* call): access modes, topic epochs, fencing and
dedup are the service's.  A producer's SENDs are handed over in arrival order, as many
as have queued while the previous group was being written, so they share a group
commit and their receipts go out in order (a Pulsar client requires that)."""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field, replace

from magnetar_broker.commands import CreateProducer
from magnetar_broker.partition.sends import Batch
from magnetar_broker.producers import ProducerCreated
from magnetar_broker.pulsar.connection import Connection
from magnetar_broker.pulsar.errors import failure
from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol import schemainfo
from magnetar_protocol.errors import IncompatibleSchema, MagnetarError, MessageTooBig, NotAllowedError
from magnetar_protocol.pulsar import clients, ids, stored
from magnetar_protocol.pulsar.batches import BatchFormatError
from magnetar_protocol.pulsar.compression import decompress
from magnetar_protocol.txnid import TxnID

log = logging.getLogger("magnetar.broker.pulsar")

Type = pb.BaseCommand.Type
# Sends handed to the service in one publish call at most (its group commit takes
# up to max_batches_per_commit batches per partition anyway).
MAX_SENDS_PER_CALL = 256
BROKER_REQUEST = ids.U64   # request id of a close the broker starts (Pulsar's -1)


@dataclass
class PulsarProducer:
    pulsar_id: int
    request_id: int
    name: str = ""
    magnetar_id: int = 0
    ready: bool = False
    topic_epoch: int | None = None
    last_sequence_id: int = -1
    schema_version: int | None = None
    queue: deque = field(default_factory=deque)   # (CommandSend, Batch | error)
    pumping: bool = False


class Producers:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.service = conn.service
        self.producers: dict[int, PulsarProducer] = {}
        conn.on_close(self._forget_all)

    def handlers(self) -> dict:
        return {Type.PRODUCER: self.create, Type.SEND: self.send, Type.CLOSE_PRODUCER: self.close}

    def _forget_all(self) -> None:
        self.producers.clear()   # the session's close detaches them in the service

    # ---------------------------------------------------------------- PRODUCER

    async def create(self, frame) -> None:
        cmd = frame.body
        existing = self.producers.get(cmd.producer_id)
        if existing is not None:
            if existing.ready:   # a retried PRODUCER: answer it again
                self.conn.send(self._success(cmd.request_id, existing))
            else:
                self.conn.error(cmd.request_id, NotAllowedError(
                    f"producer id {cmd.producer_id} is already in use on this connection"))
            return
        producer = PulsarProducer(cmd.producer_id, cmd.request_id)
        self.producers[cmd.producer_id] = producer
        try:
            create = CreateProducer(
                session_id=self.conn.session_id, topic=cmd.topic,
                name=cmd.producer_name if cmd.HasField("producer_name") else "",
                access_mode=cmd.producer_access_mode, client_producer_id=cmd.producer_id,
                topic_epoch=cmd.topic_epoch if cmd.HasField("topic_epoch") else None,
                initial_subscription=cmd.initial_subscription_name,
                schema=schemainfo.from_pulsar(cmd.schema) if cmd.HasField("schema") else None)
            created = await self.service.create_producer(create)
        except Exception as exc:
            self.producers.pop(cmd.producer_id, None)
            self.conn.error(cmd.request_id, exc)
            return
        if created.waiting:
            # WaitForExclusive, queued: say so now (producer_ready false), then answer
            # again with the same request id once the slot is ours.
            producer.name = created.name
            self.conn.send(pb.CommandProducerSuccess(request_id=cmd.request_id, producer_name=created.name,
                                                     producer_ready=False))
            self.conn.spawn(self._wait_for_exclusive(producer, replace(
                create, name=created.name, wait_ms=self.conn.settings.max_fetch_wait_ms)))
            return
        self._created(producer, created)

    async def _wait_for_exclusive(self, producer: PulsarProducer, create: CreateProducer) -> None:
        while self.producers.get(producer.pulsar_id) is producer:
            try:
                created = await self.service.create_producer(create)
            except MagnetarError as exc:
                self.producers.pop(producer.pulsar_id, None)
                self.conn.error(producer.request_id, exc)
                return
            if not created.waiting:
                self._created(producer, created)
                return

    def _created(self, producer: PulsarProducer, created: ProducerCreated) -> None:
        served = created.producer
        assert served is not None  # not waiting
        if self.producers.get(producer.pulsar_id) is not producer:   # closed meanwhile
            self.conn.spawn(self.service.close_producer(served.producer_id, self.conn.session_id))
            return
        producer.name = served.name
        producer.magnetar_id = served.producer_id
        producer.last_sequence_id = created.last_sequence_id
        producer.topic_epoch = served.topic_epoch
        producer.schema_version = created.schema_version
        producer.ready = True
        served.on_detached = lambda reason, p=producer: self._detached(p, reason)
        self.conn.send(self._success(producer.request_id, producer))

    def _success(self, request_id: int, producer: PulsarProducer) -> pb.CommandProducerSuccess:
        reply = pb.CommandProducerSuccess(request_id=request_id, producer_name=producer.name,
                                          last_sequence_id=producer.last_sequence_id, producer_ready=True)
        if producer.topic_epoch is not None:
            reply.topic_epoch = producer.topic_epoch
        if producer.schema_version is not None:
            reply.schema_version = schemainfo.version_bytes(producer.schema_version)
        return reply

    def _detached(self, producer: PulsarProducer, reason: str) -> None:
        """The service let the producer go (fenced, topic moved, session expired): tell
        the client, which reconnects (and learns ProducerFenced if it was fenced)."""
        if self.producers.get(producer.pulsar_id) is not producer:
            return   # the client closed it itself
        del self.producers[producer.pulsar_id]
        log.info("pulsar connection %s: producer %r closed by the broker: %s", self.conn.peer,
                 producer.name, reason)
        for cmd, _ in producer.queue:
            self.conn.send(pb.CommandSendError(producer_id=cmd.producer_id, sequence_id=cmd.sequence_id,
                                               error=pb.ProducerFenced if "fenced" in reason else pb.NotAllowedError,
                                               message=f"producer {producer.name!r} {reason}"))
        producer.queue.clear()
        self.conn.send(pb.CommandCloseProducer(producer_id=producer.pulsar_id, request_id=BROKER_REQUEST))

    # ---------------------------------------------------------------- SEND

    async def send(self, frame) -> None:
        cmd = frame.body
        producer = self.producers.get(cmd.producer_id)
        if producer is None or not producer.ready:
            self.conn.send(pb.CommandSendError(producer_id=cmd.producer_id, sequence_id=cmd.sequence_id,
                                               error=pb.NotAllowedError,
                                               message=f"producer {cmd.producer_id} is not ready on this "
                                                       "connection; create it first"))
            return
        producer.queue.append((cmd, self._request(producer, cmd, frame)))
        if not producer.pumping:
            producer.pumping = True
            self.conn.spawn(self._pump(producer))

    def _request(self, producer: PulsarProducer, cmd: pb.CommandSend, frame) -> Batch | Exception:
        """The Magnetar send of one Pulsar entry, stored as sent (an envelope:
        magnetar_protocol.pulsar.stored; docs/pulsar-protocol.md, "Entries stored as
        sent"), or why it cannot be stored.  Checked here: the metadata (a message
        count, a chunk is no batch; the decoder checked its text), the size, and that a compressed payload
        decompresses to its announced size (the codec's check, in C); a batch's inner
        layout is its readers' to check, as on a Pulsar broker.  A chunk's size is not held
        to the message limit: its producer cut the payload at that limit and added the
        chunk fields (and any encryption) after, as Pulsar's broker allows; the frame
        limit bounds it."""
        metadata = frame.metadata   # its text fields checked by the frame decoder
        count = stored.entry_count(metadata)
        if count < 1:
            return BatchFormatError(f"a batch of {count} messages")
        chunk = stored.is_chunk(metadata)
        if chunk and metadata.HasField("num_messages_in_batch"):
            return BatchFormatError("a chunk of a batch: only a single message can be chunked")
        size = len(frame.raw_metadata) + len(frame.payload)
        max_size = self.conn.settings.max_message_size
        if not chunk and size > max_size:
            # Pulsar's rule, on the entry as sent (metadata + payload, compressed).
            return MessageTooBig(f"the message is {size} bytes; the maximum message size is "
                                 f"{max_size} bytes (MAGNETAR_MAX_MESSAGE_SIZE)")
        if metadata.compression and not chunk and not stored.is_encrypted(metadata):
            try:
                decompress(metadata.compression, frame.payload, metadata.uncompressed_size, max_size)
            except MagnetarError as exc:
                return exc
        highest = max(metadata.highest_sequence_id, metadata.sequence_id + count - 1)
        # deliver_at: the entry's delivery time (Pulsar's is the entry's, shared by a
        # batch's messages), for the horizon check and the delayed index.
        return Batch(producer_id=producer.magnetar_id,
                     payload=stored.envelope_batch(frame.raw_metadata, metadata, frame.payload),
                     num_messages=count, sequence_id=metadata.sequence_id, highest_sequence_id=highest,
                     txn=_txn_of(cmd), session_id=self.conn.session_id, deliver_at=metadata.deliver_at_time)

    async def _pump(self, producer: PulsarProducer) -> None:
        try:
            while producer.queue and self.producers.get(producer.pulsar_id) is producer:
                group = [producer.queue.popleft() for _ in range(min(len(producer.queue), MAX_SENDS_PER_CALL))]
                results = await self._write(producer, [req for _, req in group])
                for (cmd, req), result in zip(group, results):
                    if isinstance(result, BaseException):
                        error, message = failure(result)
                        if isinstance(result, IncompatibleSchema):
                            # A payload refused by schema validation: the one code this
                            # client fails a single message on (any other closes the
                            # connection, and the client resends the message forever).
                            error = clients.one_message_refusal(self.conn.client_version)
                        self.conn.send(pb.CommandSendError(
                            producer_id=cmd.producer_id, sequence_id=cmd.sequence_id, error=error, message=message))
                        continue
                    entry = ids.DUPLICATE_ID if result.duplicate else (ids.LEDGER, result.entry_id)
                    self.conn.send(pb.CommandSendReceipt(
                        producer_id=cmd.producer_id, sequence_id=cmd.sequence_id,
                        highest_sequence_id=req.highest_sequence_id,
                        message_id=pb.MessageIdData(ledger_id=entry[0], entry_id=entry[1],
                                                    partition=result.partition)))
                await self.conn.writer.drain()
        finally:
            producer.pumping = False

    async def _write(self, producer: PulsarProducer, reqs: list) -> list:
        """One result (Sent or an exception) per request, in order."""
        valid = [r for r in reqs if isinstance(r, Batch)]
        answers: list = []
        if valid:
            try:
                answers = list(await self.service.publish(self.conn.session_id, valid))
            except MagnetarError as exc:
                answers = [exc] * len(valid)
        it = iter(answers)
        return [next(it) if isinstance(r, Batch) else r for r in reqs]

    # ---------------------------------------------------------------- CLOSE_PRODUCER

    async def close(self, frame) -> None:
        cmd = frame.body
        producer = self.producers.pop(cmd.producer_id, None)
        if producer is not None and producer.magnetar_id:
            await self.service.close_producer(producer.magnetar_id, self.conn.session_id)
        self.conn.send(pb.CommandSuccess(request_id=cmd.request_id))


def _txn_of(cmd: pb.CommandSend) -> TxnID | None:
    """A SEND in a transaction (pulsar/transactions.py): the partition's transaction
    buffer holds it until the coordinator ends the transaction."""
    if cmd.HasField("txnid_most_bits") or cmd.HasField("txnid_least_bits"):
        return TxnID(cmd.txnid_most_bits, cmd.txnid_least_bits)
    return None
