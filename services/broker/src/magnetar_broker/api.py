"""The broker's routes: protobuf for clients (docs/protocol.md), JSON for the admin."""

from __future__ import annotations

from collections.abc import Iterable

from fastapi import FastAPI

from magnetar_broker.commands import (
    Ack,
    CloseConsumer,
    CreateProducer,
    Fetch,
    Position,
    Redeliver,
    Seek,
    Subscribe,
)
from magnetar_broker.deadletter_ops import APPEND_PATH
from magnetar_broker.partition.sends import Batch, Sent
from magnetar_broker.service import BrokerService
from magnetar_broker.subscription.deadrules import DeadLetterPolicy
from magnetar_broker.transactions import TxnHandlers
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol import schemainfo
from magnetar_protocol.errors import BadRequest, MagnetarError, NotOwner, to_wire
from magnetar_protocol.schemaregistry import Stored
from magnetar_protocol.topics import TopicName
from magnetar_protocol.txnid import TxnID
from magnetar_runtime.app import ProtoRoute, proto_routes


def txn_handlers(service: BrokerService) -> TxnHandlers:
    return TxnHandlers(service.auth, service.ownership, service.store, service.settings,
                       service.advertised)


# ---------------------------------------------------------------- the protobuf wire -> commands


def create_producer_command(req: pb.CreateProducerRequest) -> CreateProducer:
    return CreateProducer(
        session_id=req.session_id, topic=req.topic, name=req.producer_name, access_mode=req.access_mode,
        topic_epoch=req.topic_epoch if req.HasField("topic_epoch") else None, wait_ms=req.wait_ms,
        client_producer_id=req.client_producer_id, schema=schemainfo.from_proto(req.schema))


def subscribe_command(req: pb.SubscribeRequest) -> Subscribe:
    return Subscribe(
        session_id=req.session_id, topic=req.topic, subscription=req.subscription, sub_type=req.sub_type,
        durable=req.durable, earliest=req.initial_position == pb.INITIAL_EARLIEST,
        consumer_name=req.consumer_name, priority=req.priority_level,
        start=(Position(req.start_position.entry_id, req.start_position.batch_index)
               if req.HasField("start_position") else None),
        start_inclusive=req.start_inclusive, read_compacted=req.read_compacted,
        dead_letter=(DeadLetterPolicy.from_wire(req.dead_letter_policy)
                     if req.HasField("dead_letter_policy") else None),
        schema=schemainfo.from_proto(req.schema))


def seek_command(req: pb.SeekRequest) -> Seek:
    return Seek(consumer_id=req.consumer_id, session_id=req.session_id, seeks=req.seeks,
                position=(Position(req.position.entry_id, req.position.batch_index)
                          if req.HasField("position") else None),
                publish_time=req.publish_time if req.HasField("publish_time") else None)


def batch_command(req: pb.SendRequest) -> Batch:
    return Batch(producer_id=req.producer_id, payload=req.batch, num_messages=req.num_messages,
                 sequence_id=req.sequence_id, highest_sequence_id=req.highest_sequence_id,
                 txn=TxnID.from_wire(req.txn) if req.HasField("txn") else None, session_id=req.session_id,
                 deliver_at=req.deliver_at_time)


def sent_reply(sent: Sent) -> pb.SendResponse:
    return pb.SendResponse(entry_id=sent.entry_id, last_sequence_id=sent.last_sequence_id,
                           duplicate=sent.duplicate, partition=sent.partition)


def positions(wire: Iterable[pb.Position]) -> tuple[Position, ...]:
    return tuple(Position(p.entry_id, p.batch_index) for p in wire)


def schema_version_reply(stored: Stored) -> pb.SchemaVersion:
    reply = pb.SchemaVersion(version=stored.version, timestamp=stored.timestamp, deleted=stored.schema is None)
    if stored.schema is not None:
        reply.schema.CopyFrom(stored.schema.to_proto())
    return reply


def required_schema(wire: pb.Schema) -> schemainfo.Schema:
    schema = schemainfo.from_proto(wire)
    if schema is None:
        raise BadRequest("a schema is required (BYTES is no schema)")
    return schema


def add_routes(app: FastAPI, service: BrokerService) -> None:
    async def metadata(req: pb.PartitionMetadataRequest) -> pb.PartitionMetadataResponse:
        name, partitions = await service.metadata(req.topic)
        return pb.PartitionMetadataResponse(topic=name.full, partitions=partitions)

    async def lookup(req: pb.LookupRequest) -> pb.LookupResponse:
        found = await service.lookup(req.topic, req.listener_name)
        return pb.LookupResponse(topic=found.topic, broker_url=found.url, broker_id=found.broker_id)

    async def open_session(req: pb.OpenSessionRequest) -> pb.OpenSessionResponse:
        session = await service.open_session(req.client_name)
        return pb.OpenSessionResponse(session_id=session.session_id,
                                      keepalive_interval_ms=service.settings.keepalive_interval_ms,
                                      session_timeout_ms=service.settings.session_timeout_ms)

    async def keepalive(req: pb.KeepAliveRequest) -> pb.KeepAliveResponse:
        await service.keepalive(req.session_id)
        return pb.KeepAliveResponse()

    async def close_session(req: pb.CloseSessionRequest) -> pb.CloseSessionResponse:
        await service.close_session(req.session_id)
        return pb.CloseSessionResponse()

    async def close_producer(req: pb.CloseProducerRequest) -> pb.CloseProducerResponse:
        await service.close_producer(req.producer_id, req.session_id)
        return pb.CloseProducerResponse()

    async def fetch(req: pb.FetchRequest) -> pb.FetchResponse:
        fetched = await service.fetch(Fetch(consumer_id=req.consumer_id, session_id=req.session_id,
                                            max_messages=req.max_messages, wait_ms=req.wait_ms, seeks=req.seeks))
        return pb.FetchResponse(entries=fetched.entries, partition=fetched.partition,
                                end_of_topic=fetched.end_of_topic)

    async def ack(req: pb.AckRequest) -> pb.AckResponse:
        await service.ack(Ack(consumer_id=req.consumer_id, session_id=req.session_id,
                              positions=positions(req.positions), cumulative=req.ack_type == pb.ACK_CUMULATIVE,
                              txn=TxnID.from_wire(req.txn) if req.HasField("txn") else None,
                              hold_ms=req.hold_ms))
        return pb.AckResponse()

    async def redeliver(req: pb.RedeliverRequest) -> pb.RedeliverResponse:
        await service.redeliver(Redeliver(consumer_id=req.consumer_id, session_id=req.session_id,
                                          positions=positions(req.positions), seeks=req.seeks))
        return pb.RedeliverResponse()

    async def last_id(req: pb.LastMessageIdRequest) -> pb.LastMessageIdResponse:
        last = await service.last_message_id(req.consumer_id, req.session_id)
        reply = pb.LastMessageIdResponse(mark_delete=pb.Position(entry_id=last.mark_delete, batch_index=-1))
        if last.last_entry_id is not None:
            reply.has_message = True
            reply.last.CopyFrom(pb.MessageIdData(
                partition=last.partition, entry_id=last.last_entry_id,
                batch_index=last.index, batch_size=last.last_batch_size))
        return reply

    async def close_consumer(req: pb.CloseConsumerRequest) -> pb.CloseConsumerResponse:
        await service.close_consumer(CloseConsumer(consumer_id=req.consumer_id, session_id=req.session_id,
                                                   unsubscribe=req.unsubscribe))
        return pb.CloseConsumerResponse()

    async def create_producer(req: pb.CreateProducerRequest) -> pb.CreateProducerResponse:
        created = await service.create_producer(create_producer_command(req))
        producer = created.producer
        if producer is None:
            return pb.CreateProducerResponse(producer_name=created.name, waiting=True)
        reply = pb.CreateProducerResponse(
            producer_id=producer.producer_id, producer_name=producer.name,
            last_sequence_id=created.last_sequence_id, max_message_size=service.settings.max_message_size)
        if producer.topic_epoch is not None:
            reply.topic_epoch = producer.topic_epoch
        if created.schema_version is not None:
            reply.schema_version = created.schema_version
        return reply

    async def subscribe(req: pb.SubscribeRequest) -> pb.SubscribeResponse:
        consumer = await service.subscribe(subscribe_command(req))
        return pb.SubscribeResponse(consumer_id=consumer.consumer_id)

    async def seek(req: pb.SeekRequest) -> pb.SeekResponse:
        await service.seek(seek_command(req))
        return pb.SeekResponse()

    async def send(req: pb.SendRequest) -> pb.SendResponse:
        [result] = await service.publish(req.session_id, [batch_command(req)])
        if isinstance(result, MagnetarError):
            raise result
        return sent_reply(result)

    async def send_batches(req: pb.SendBatchesRequest) -> pb.SendBatchesResponse:
        reply = pb.SendBatchesResponse()
        for result in await service.publish(req.session_id, [batch_command(b) for b in req.batches]):
            if isinstance(result, MagnetarError):
                reply.results.add(error=to_wire(result))  # the one mapping of this wire
            else:
                reply.results.add(response=sent_reply(result))
        return reply

    schemas = service.schemas

    async def get_schema(req: pb.GetSchemaRequest) -> pb.GetSchemaResponse:
        found = await schemas.get(req.topic, req.version if req.HasField("version") else None)
        return pb.GetSchemaResponse(schema=schema_version_reply(found))

    async def list_schemas(req: pb.ListSchemasRequest) -> pb.ListSchemasResponse:
        return pb.ListSchemasResponse(versions=[schema_version_reply(s) for s in await schemas.versions(req.topic)])

    async def create_schema(req: pb.CreateSchemaRequest) -> pb.CreateSchemaResponse:
        return pb.CreateSchemaResponse(version=await schemas.create(req.topic, required_schema(req.schema), req.admin))

    async def delete_schema(req: pb.DeleteSchemaRequest) -> pb.DeleteSchemaResponse:
        return pb.DeleteSchemaResponse(version=await schemas.delete(req.topic, req.force))

    async def check_schema(req: pb.CheckSchemaRequest) -> pb.CheckSchemaResponse:
        strategy, problem, version = await schemas.check(req.topic, required_schema(req.schema))
        reply = pb.CheckSchemaResponse(compatible=problem is None, strategy=strategy, reason=problem or "")
        if version is not None:
            reply.version = version
        return reply

    routes: list[ProtoRoute] = [
        ("/v1/topics/metadata", pb.PartitionMetadataRequest, metadata),
        ("/v1/topics/lookup", pb.LookupRequest, lookup),
        ("/v1/sessions/open", pb.OpenSessionRequest, open_session),
        ("/v1/sessions/keepalive", pb.KeepAliveRequest, keepalive),
        ("/v1/sessions/close", pb.CloseSessionRequest, close_session),
        ("/v1/producers/create", pb.CreateProducerRequest, create_producer),
        ("/v1/producers/send", pb.SendRequest, send),
        ("/v1/producers/send-batches", pb.SendBatchesRequest, send_batches),
        ("/v1/producers/close", pb.CloseProducerRequest, close_producer),
        ("/v1/consumers/subscribe", pb.SubscribeRequest, subscribe),
        ("/v1/consumers/fetch", pb.FetchRequest, fetch),
        ("/v1/consumers/ack", pb.AckRequest, ack),
        ("/v1/consumers/redeliver", pb.RedeliverRequest, redeliver),
        ("/v1/consumers/seek", pb.SeekRequest, seek),
        ("/v1/consumers/last-message-id", pb.LastMessageIdRequest, last_id),
        ("/v1/consumers/close", pb.CloseConsumerRequest, close_consumer),
        ("/v1/schemas/get", pb.GetSchemaRequest, get_schema),
        ("/v1/schemas/list", pb.ListSchemasRequest, list_schemas),
        ("/v1/schemas/create", pb.CreateSchemaRequest, create_schema),
        ("/v1/schemas/delete", pb.DeleteSchemaRequest, delete_schema),
        ("/v1/schemas/check", pb.CheckSchemaRequest, check_schema),
    ]
    async def append_dead_letters(req: pb.DeadLetterAppendRequest) -> pb.DeadLetterAppendResponse:
        # A source broker's half of a dead-letter move (it names other roles' cursors).
        service.auth.require_superuser("appending dead letters (a broker's call)")
        return await service.dead_letters.append(req)

    routes.append((APPEND_PATH, pb.DeadLetterAppendRequest, append_dead_letters))
    txn = txn_handlers(service)
    routes += [
        ("/v1/txn/coordinators", pb.LookupCoordinatorsRequest, txn.coordinators),
        ("/v1/registry/lookup", pb.LookupRegistryRequest, txn.registries),
        ("/v1/txn/end-on-partition", pb.EndTxnOnPartitionRequest, txn.end_on_partition),
        ("/v1/txn/end-on-subscription", pb.EndTxnOnSubscriptionRequest, txn.end_on_subscription),
        ("/v1/txn/end-on-participants", pb.EndTxnOnParticipantsRequest, txn.end_on_participants),
    ]
    proto_routes(app, routes)

    def internal_only() -> None:
        # Service-to-service (the admin's calls): they name other roles' producers and
        # consumers and move topics, so only superusers (the service token's role).
        service.auth.require_superuser("the brokers' /internal/v1 endpoints")

    @app.get("/internal/v1/topic-stats", summary="Live stats of a topic this broker serves")
    async def topic_stats(topic: str) -> dict:
        internal_only()
        name = TopicName.parse(topic)
        plog = service.ownership.logs.get(name.full)
        if plog is None or plog.closed:
            raise NotOwner(f"{name.full} is not served by broker {service.broker_id}")
        return service.topic_stats(plog)

    @app.get("/internal/v1/transaction-buffer-stats", summary="Transaction buffer of a topic")
    async def transaction_buffer_stats(topic: str) -> dict:
        internal_only()
        name = TopicName.parse(topic)
        plog = service.ownership.logs.get(name.full)
        if plog is None or plog.closed:
            raise NotOwner(f"{name.full} is not served by broker {service.broker_id}")
        return plog.txnbuf.stats()

    @app.post("/internal/v1/expire-messages",
              summary="Acknowledge messages older than `seconds` on one subscription (or all)")
    async def expire_messages(topic: str, seconds: int, subscription: str | None = None) -> dict:
        internal_only()
        moved = await service.expire_messages(TopicName.parse(topic), subscription, seconds)
        return {"expiredEntries": moved}

    @app.post("/internal/v1/unload", summary="Give up ownership of a topic now")
    async def unload(topic: str) -> dict:
        internal_only()
        return {"unloaded": await service.ownership.unload(TopicName.parse(topic))}

    ops = service.backlog_ops

    @app.post("/internal/v1/subscription/create", summary="Create a durable subscription at a position")
    async def create_subscription(topic: str, subscription: str, entryId: int | None = None,  # noqa: N803
                                  batchIndex: int = -1) -> dict:  # noqa: N803 - Pulsar's names
        internal_only()
        return await ops.create_subscription(topic, subscription, entryId, batchIndex)

    @app.post("/internal/v1/subscription/skip", summary="Skip messages (count omitted: all, clear-backlog)")
    async def skip(topic: str, subscription: str, count: int | None = None) -> dict:
        internal_only()
        return await ops.skip(topic, subscription, count)

    @app.post("/internal/v1/subscription/reset", summary="Reset a cursor to a message id or a publish time")
    async def reset(topic: str, subscription: str, entryId: int = -1, batchIndex: int = -1,  # noqa: N803
                    timestamp: int | None = None) -> dict:
        internal_only()
        return await ops.reset(topic, subscription, entryId, batchIndex, timestamp)

    @app.get("/internal/v1/subscription/peek", summary="The first unacknowledged messages (cursor unchanged)")
    async def peek(topic: str, subscription: str, count: int = 1) -> dict:
        internal_only()
        return await ops.peek(topic, subscription, count)

    @app.get("/internal/v1/message", summary="The messages of one entry (or one of them)")
    async def message(topic: str, entryId: int, batchIndex: int = -1) -> dict:  # noqa: N803
        internal_only()
        return await ops.message(topic, entryId, batchIndex)

    @app.get("/internal/v1/examine", summary="The messages of the Nth entry from the earliest or the latest")
    async def examine(topic: str, initialPosition: str, messagePosition: int) -> dict:  # noqa: N803
        internal_only()
        return await ops.examine(topic, initialPosition == "earliest", messagePosition)

    @app.get("/internal/v1/last-message-id", summary="The id of the last message of a partition")
    async def last_message_id(topic: str) -> dict:
        internal_only()
        return await ops.last_message_id(topic)

    @app.post("/internal/v1/terminate", summary="Take no more messages on a partition")
    async def terminate(topic: str) -> dict:
        internal_only()
        return await ops.terminate(topic)

    @app.post("/internal/v1/compaction", summary="Start compacting a partition (409 while a run is under way)")
    async def compact(topic: str) -> dict:
        internal_only()
        await service.compact(TopicName.parse(topic))
        return {}

    @app.get("/internal/v1/compaction", summary="The status of a partition's compaction")
    async def compaction_status(topic: str) -> dict:
        internal_only()
        return await service.compaction_status(TopicName.parse(topic))

    @app.post("/internal/v1/hand-over", summary="Unload a partition to another live broker")
    async def hand_over(topic: str) -> dict:
        internal_only()
        return await ops.unload(topic, service.ownership.ttl_s)

    @app.get("/internal/v1/owned-topics", summary="Topics this broker serves")
    async def owned_topics() -> dict:
        internal_only()
        return {"brokerId": service.broker_id,
                "topics": sorted(service.ownership.logs)}
