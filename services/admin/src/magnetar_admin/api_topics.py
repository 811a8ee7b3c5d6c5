"""Topic routes: /admin/v2/persistent/{tenant}/{namespace}/... (persistent topics only),
and the backlog operations on Pulsar's paths (create-subscription, skip, clear-backlog,
reset-cursor, peek, get-message-by-id, last-message-id, terminate, unload,
update-partitioned-topic): each runs in the broker that owns the partition
(docs/admin.md "Backlog operations")."""

from __future__ import annotations

import base64
import json
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from magnetar_admin import bodies
from magnetar_admin.deps import NO_CONTENT, Body, Service, body_doc, tenant_admin_only
from magnetar_admin.stats import merged_compaction_status
from magnetar_protocol.errors import Conflict, NotFound, TopicNotFound
from magnetar_protocol.topics import TopicName
from magnetar_protocol.validate import INT32_MAX, INT64_MAX

BASE = "/{tenant}/{namespace}"
TOPIC = BASE + "/{topic}"
SUB = TOPIC + "/subscription/{subscription}"
MAX_PEEK = 1000  # the broker's bound too (subscription/backlog.py)
MESSAGE_ID = {"type": "object", "properties": {
    "ledgerId": {"type": "integer"}, "entryId": {"type": "integer"},
    "partitionIndex": {"type": "integer"}, "batchIndex": {"type": "integer"}}}
Count = Annotated[int, Path(ge=0, le=INT64_MAX, description="a number of messages")]
PeekPosition = Annotated[int, Path(ge=1, le=MAX_PEEK, description="1: the first unacknowledged message")]
Timestamp = Annotated[int, Path(ge=0, le=INT64_MAX, description="a publish time in ms since the epoch")]
EntryId = Annotated[int, Path(ge=0, le=INT64_MAX)]
LedgerId = Annotated[int, Path(ge=0, le=INT64_MAX, description="always 0: one ledger per partition")]


def _wants_json(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return "application/json" in accept and "octet-stream" not in accept


def message_response(message: dict, request: Request) -> Response:
    """One message as Pulsar's REST answers it: the payload as the body, the metadata in
    X-Pulsar-* headers (JSON instead when the client accepts only JSON)."""
    if _wants_json(request):
        return Response(json.dumps(message), media_type="application/json")
    mid = message["messageId"]
    headers = {
        "X-Pulsar-Message-ID": f"{mid['ledgerId']}:{mid['entryId']}:{mid['partitionIndex']}:{mid['batchIndex']}",
        "X-Pulsar-publish-time": str(message["publishTime"]),
        "X-Pulsar-producer-name": quote(message["producerName"], safe=""),
        "X-Pulsar-num-batch-message": str(message["batchSize"]),
        "X-Pulsar-batch-size": str(message["batchSize"]),
    }
    if "sequenceId" in message:
        headers["X-Pulsar-sequence-id"] = str(message["sequenceId"])
    if message.get("eventTime"):
        headers["X-Pulsar-event-time"] = str(message["eventTime"])
    if message.get("partitionKey") is not None:
        headers["X-Pulsar-partition-key"] = quote(message["partitionKey"], safe="")
    for key, value in (message.get("properties") or {}).items():
        headers[f"X-Pulsar-PROPERTY-{quote(key, safe='')}"] = quote(value, safe="")
    payload = base64.b64decode(message.get("payload") or "")
    return Response(payload, media_type="application/octet-stream", headers=headers)


async def _peek(service, name: TopicName, subscription: str, count: int) -> list[dict]:
    """The first ``count`` unacknowledged messages of each partition, partition by partition."""
    answers = await service.on_partitions(name, "GET", "/internal/v1/subscription/peek", check_subscription=True,
                                          subscription=subscription, count=count)
    return [m for a in answers.values() for m in a["messages"]]


def _position_params(mid: bodies.MessageIdBody) -> dict:
    return {} if mid.entry_id is None else {"entryId": mid.entry_id, "batchIndex": mid.batch_index}


async def _units_for(service, name: TopicName, mid: bodies.MessageIdBody) -> TopicName:
    """The topic, or the one partition a message id names on a partitioned topic."""
    count = await service.store.partitions(name) or 0
    if count and mid.partition >= 0:
        if mid.partition >= count:
            raise NotFound(f"{name.full} has {count} partitions: partitionIndex {mid.partition} names none")
        return name.partition(mid.partition)
    return name


def backlog_routes(r: APIRouter) -> None:
    @r.put(SUB, **NO_CONTENT, summary="Create a durable subscription (body: the message id to start at; "
           "none: latest; -1:-1 earliest); 409 if it exists",
           openapi_extra=body_doc(MESSAGE_ID, required=False, example={"ledgerId": -1, "entryId": -1}))
    async def create_subscription(tenant: str, namespace: str, topic: str, subscription: str,
                                  service: Service, body: Body) -> Response:
        name, sub = bodies.topic(tenant, namespace, topic), bodies.subscription(subscription)
        mid = bodies.message_id(body, default=bodies.LATEST)
        _, units = await service.existing_ids(name)
        if await service.store.subscription_topics(list(units), sub):
            raise Conflict(f"subscription {sub!r} already exists on {name.full}")
        await service.on_partitions(await _units_for(service, name, mid), "POST", "/internal/v1/subscription/create",
                                    subscription=sub, **_position_params(mid))
        return Response(status_code=204)

    @r.post(SUB + "/skip/{numMessages}", **NO_CONTENT,
            summary="Skip the next N unacknowledged messages (on every partition)")
    async def skip(tenant: str, namespace: str, topic: str, subscription: str, numMessages: Count,  # noqa: N803
                   service: Service) -> Response:
        name, sub = bodies.topic(tenant, namespace, topic), bodies.subscription(subscription)
        await service.on_partitions(name, "POST", "/internal/v1/subscription/skip", check_subscription=True,
                                    subscription=sub, count=numMessages)
        return Response(status_code=204)

    @r.post(SUB + "/skip_all", **NO_CONTENT, summary="Skip every message: clear the subscription's backlog")
    async def skip_all(tenant: str, namespace: str, topic: str, subscription: str, service: Service) -> Response:
        name, sub = bodies.topic(tenant, namespace, topic), bodies.subscription(subscription)
        await service.on_partitions(name, "POST", "/internal/v1/subscription/skip", check_subscription=True,
                                    subscription=sub)
        return Response(status_code=204)

    @r.post(SUB + "/resetcursor/{timestamp}", **NO_CONTENT,
            summary="Reset the cursor to the first message published at or after a time (ms); "
                    "consumers reconnect and receive from there")
    async def reset_by_time(tenant: str, namespace: str, topic: str, subscription: str, timestamp: Timestamp,
                            service: Service) -> Response:
        name, sub = bodies.topic(tenant, namespace, topic), bodies.subscription(subscription)
        await service.on_partitions(name, "POST", "/internal/v1/subscription/reset", check_subscription=True,
                                    subscription=sub, timestamp=timestamp)
        return Response(status_code=204)

    @r.post(SUB + "/resetcursor", **NO_CONTENT,
            summary="Reset the cursor to a message id (body), delivered next; consumers reconnect",
            openapi_extra=body_doc(MESSAGE_ID, example={"ledgerId": 0, "entryId": 12, "batchIndex": -1}))
    async def reset_by_id(tenant: str, namespace: str, topic: str, subscription: str, service: Service,
                          body: Body) -> Response:
        name, sub = bodies.topic(tenant, namespace, topic), bodies.subscription(subscription)
        mid = bodies.message_id(body)
        target = await _units_for(service, name, mid)
        if mid.entry_id is None:  # latest: the end of each partition
            await service.on_partitions(target, "POST", "/internal/v1/subscription/skip", check_subscription=True,
                                        subscription=sub)
        else:
            await service.on_partitions(target, "POST", "/internal/v1/subscription/reset", check_subscription=True,
                                        subscription=sub, entryId=max(mid.entry_id, 0), batchIndex=mid.batch_index)
        return Response(status_code=204)

    @r.get(SUB + "/position/{messagePosition}",
           summary="Peek the Nth unacknowledged message (1 = the next); the cursor does not move. "
                   "Body: the payload; metadata in X-Pulsar-* headers (JSON with Accept: application/json)")
    async def peek_position(tenant: str, namespace: str, topic: str, subscription: str,
                            messagePosition: PeekPosition, service: Service, request: Request) -> Response:  # noqa: N803
        name, sub = bodies.topic(tenant, namespace, topic), bodies.subscription(subscription)
        messages = await _peek(service, name, sub, messagePosition)
        if len(messages) < messagePosition:
            raise NotFound(f"subscription {sub!r} of {name.full} has {len(messages)} unacknowledged "
                           f"message(s); there is no message at position {messagePosition}")
        return message_response(messages[messagePosition - 1], request)

    @r.get(SUB + "/peek", summary="Magnetar: the first N unacknowledged messages as JSON (payload in base64, "
           "with their metadata; each partition's first N); the cursor does not move")
    async def peek(tenant: str, namespace: str, topic: str, subscription: str, service: Service,
                   count: Annotated[int, Query(ge=1, le=MAX_PEEK)] = 1) -> dict:
        name, sub = bodies.topic(tenant, namespace, topic), bodies.subscription(subscription)
        return {"messages": await _peek(service, name, sub, count)}

    @r.get(TOPIC + "/ledger/{ledgerId}/entry/{entryId}",
           summary="get-message-by-id: a message of a partition (batchIndex: which message of the "
                   "entry, default 0); payload and X-Pulsar-* headers, or JSON")
    async def message_by_id(tenant: str, namespace: str, topic: str, ledgerId: LedgerId,  # noqa: N803
                            entryId: EntryId, service: Service, request: Request,  # noqa: N803
                            batchIndex: Annotated[int, Query(ge=-1, le=INT32_MAX)] = 0) -> Response:  # noqa: N803
        unit = bodies.topic(tenant, namespace, topic)
        await service.unit_id(unit)
        if ledgerId != 0:
            raise NotFound(f"ledger {ledgerId} does not exist: Magnetar keeps one ledger per partition, ledger 0")
        answer = await service.on_owner(unit, "GET", "/internal/v1/message", entryId=entryId, batchIndex=batchIndex)
        if batchIndex == -1 and _wants_json(request):
            return Response(json.dumps(answer), media_type="application/json")
        return message_response(answer["messages"][0], request)

    @r.get(TOPIC + "/examinemessage",
           summary="examine-message: the messagePosition-th entry from the earliest or latest one; its (first) "
                   "message's payload and X-Pulsar-* headers (X-Pulsar-num-batch-message: the entry's count), "
                   "or JSON with every message of the entry")
    async def examine_message(tenant: str, namespace: str, topic: str, service: Service, request: Request,
                              initialPosition: Annotated[str, Query(pattern="^(earliest|latest)$")] = "latest",  # noqa: N803
                              messagePosition: Annotated[int, Query(ge=1, le=INT64_MAX)] = 1) -> Response:  # noqa: N803
        unit = bodies.topic(tenant, namespace, topic)
        await service.unit_id(unit)
        answer = await service.on_owner(unit, "GET", "/internal/v1/examine", initialPosition=initialPosition,
                                        messagePosition=messagePosition)
        if _wants_json(request):
            return Response(json.dumps(answer), media_type="application/json")
        return message_response(answer["messages"][0], request)

    @r.get(TOPIC + "/lastMessageId", summary="The id of the topic's last message (of each partition: "
           "{\"partitions\": {...}} for a partitioned topic)")
    async def last_message_id(tenant: str, namespace: str, topic: str, service: Service) -> dict:
        name = bodies.topic(tenant, namespace, topic)
        answers = await service.on_partitions(name, "GET", "/internal/v1/last-message-id")
        if await service.store.partitions(name):
            return {"partitions": answers}
        return answers[name.full]

    @r.post(TOPIC + "/terminate", summary="Terminate a topic: no more messages are accepted; answers the "
            "last message id (a partitioned topic: use terminate/partitions)")
    async def terminate(tenant: str, namespace: str, topic: str, service: Service) -> dict:
        name = bodies.topic(tenant, namespace, topic)
        if count := await service.store.partitions(name):
            raise Conflict(f"{name.full} is a partitioned topic with {count} partitions: terminate it with "
                           "POST .../terminate/partitions")
        await service.unit_id(name)
        return (await service.on_partitions(name, "POST", "/internal/v1/terminate"))[name.full]

    @r.post(TOPIC + "/terminate/partitions",
            summary="Terminate every partition of a partitioned topic: {partition index: last message id}")
    async def terminate_partitions(tenant: str, namespace: str, topic: str, service: Service) -> dict:
        name = bodies.topic(tenant, namespace, topic)
        if not await service.store.partitions(name):
            raise TopicNotFound(f"partitioned topic {name.full} does not exist")
        answers = await service.on_partitions(name, "POST", "/internal/v1/terminate")
        return {str(TopicName.parse(unit).partition_index): mid for unit, mid in answers.items()}

    @r.put(TOPIC + "/compaction", **NO_CONTENT,
           summary="Compact the topic (every partition): the latest message of each key below its "
                   "head, in the background; 409 while a compaction is under way")
    async def compact(tenant: str, namespace: str, topic: str, service: Service) -> Response:
        await service.on_partitions(bodies.topic(tenant, namespace, topic), "POST", "/internal/v1/compaction")
        return Response(status_code=204)

    @r.get(TOPIC + "/compaction", summary="The status of the topic's last compaction (Pulsar's "
           "LongRunningProcessStatus: NOT_RUN, RUNNING, SUCCESS or ERROR with lastError)")
    async def compaction_status(tenant: str, namespace: str, topic: str, service: Service) -> dict:
        answers = await service.on_partitions(bodies.topic(tenant, namespace, topic), "GET",
                                              "/internal/v1/compaction")
        return merged_compaction_status(list(answers.values()))

    @r.put(TOPIC + "/unload", **NO_CONTENT,
           summary="Unload the topic (every partition): its owner hands it to another live broker")
    async def unload(tenant: str, namespace: str, topic: str, service: Service) -> Response:
        await service.unload(bodies.topic(tenant, namespace, topic))
        return Response(status_code=204)

    @r.post(TOPIC + "/partitions", **NO_CONTENT,
            summary="update-partitioned-topic: raise the partition count (body: the new count); "
                    "409 unless it grows",
            openapi_extra=body_doc({"type": "integer", "minimum": 1}, example=8))
    async def update_partitions(tenant: str, namespace: str, topic: str, service: Service, body: Body) -> Response:
        name = bodies.topic(tenant, namespace, topic)
        count = bodies.partition_count(body, service.settings.max_partitions)
        await service.grow_partitions(name, count)
        return Response(status_code=204)


def topic_routes() -> APIRouter:
    r = APIRouter(prefix="/admin/v2/persistent", tags=["topics"],
                  dependencies=[Depends(tenant_admin_only)])
    backlog_routes(r)

    @r.get(BASE, summary="List the namespace's topics as full names (partitions included)")
    async def list_topics(tenant: str, namespace: str, service: Service) -> list[str]:
        return await service.store.topics(*bodies.namespace(tenant, namespace))

    @r.get(BASE + "/partitioned", summary="List the namespace's partitioned topics")
    async def list_partitioned(tenant: str, namespace: str, service: Service) -> list[str]:
        return await service.store.partitioned_topics(*bodies.namespace(tenant, namespace))

    @r.put(TOPIC + "/partitions", **NO_CONTENT,
           summary="Create a partitioned topic (body: the partition count, a JSON integer)",
           openapi_extra=body_doc({"type": "integer", "minimum": 1}, example=4))
    async def create_partitioned(tenant: str, namespace: str, topic: str, service: Service,
                                 body: Body) -> Response:
        name = bodies.topic(tenant, namespace, topic)
        count = bodies.partition_count(body, service.settings.max_partitions)
        await service.create_topic(name, count)
        return Response(status_code=204)

    @r.get(TOPIC + "/partitions", summary="Partitioned topic metadata: {\"partitions\": N} (0: not partitioned, "
           "or not created yet; with checkAllowAutoCreation=true, 404 for a missing topic when topics are not "
           "created automatically)")
    async def get_partitions(tenant: str, namespace: str, topic: str, service: Service,
                             checkAllowAutoCreation: bool = False) -> dict:  # noqa: N803
        name = bodies.topic(tenant, namespace, topic)
        count, _ = await service.units(name)
        if not count and checkAllowAutoCreation and not service.settings.allow_auto_topic_creation:
            # As Pulsar: a client that asks before producing learns the topic will not
            # be made for it.  Without the flag a missing topic reads as not partitioned.
            await service.unit_id(name)  # 404 unless it is a non-partitioned topic
        return {"partitions": count}

    @r.delete(TOPIC + "/partitions", **NO_CONTENT,
              summary="Delete a partitioned topic and its partitions (409 while clients are "
                      "connected, unless force=true)")
    async def delete_partitioned(tenant: str, namespace: str, topic: str, service: Service,
                                 force: bool = False) -> Response:
        await service.delete_topic(bodies.topic(tenant, namespace, topic), force, partitioned=True)
        return Response(status_code=204)

    @r.put(TOPIC, summary="Create a non-partitioned topic", **NO_CONTENT)
    async def create_topic(tenant: str, namespace: str, topic: str, service: Service) -> Response:
        await service.create_topic(bodies.topic(tenant, namespace, topic), 0)
        return Response(status_code=204)

    @r.delete(TOPIC, **NO_CONTENT,
              summary="Delete a non-partitioned topic (409 while clients are connected, unless force=true)")
    async def delete_topic(tenant: str, namespace: str, topic: str, service: Service,
                           force: bool = False) -> Response:
        await service.delete_topic(bodies.topic(tenant, namespace, topic), force, partitioned=False)
        return Response(status_code=204)

    @r.get(TOPIC + "/stats", summary="TopicStats of a topic or partition: publishers, subscriptions, backlog")
    async def topic_stats(tenant: str, namespace: str, topic: str, service: Service) -> dict:
        return await service.stats(bodies.topic(tenant, namespace, topic))

    @r.get(TOPIC + "/partitioned-stats",
           summary="PartitionedTopicStats: totals over the partitions, and each partition's stats")
    async def partitioned_stats(tenant: str, namespace: str, topic: str, service: Service,
                                perPartition: bool = True) -> dict:  # noqa: N803 - Pulsar's name
        return await service.partitioned_stats(bodies.topic(tenant, namespace, topic), perPartition)

    @r.get(TOPIC + "/internalStats",
           summary="Storage-level stats of a topic or partition: entries, cursors, owner and epochs")
    async def internal_stats(tenant: str, namespace: str, topic: str, service: Service) -> dict:
        return await service.internal_stats(bodies.topic(tenant, namespace, topic))

    @r.get(TOPIC + "/internal-stats", summary="Same as internalStats (the spelling of docs/design.md)")
    async def internal_stats_alias(tenant: str, namespace: str, topic: str, service: Service) -> dict:
        return await service.internal_stats(bodies.topic(tenant, namespace, topic))

    @r.get(TOPIC + "/partitioned-internalStats", summary="internalStats of every partition")
    async def partitioned_internal_stats(tenant: str, namespace: str, topic: str, service: Service) -> dict:
        return await service.partitioned_internal_stats(bodies.topic(tenant, namespace, topic))

    @r.get(TOPIC + "/subscriptions", summary="List the topic's durable subscriptions (all partitions)")
    async def subscriptions(tenant: str, namespace: str, topic: str, service: Service) -> list[str]:
        return await service.subscriptions(bodies.topic(tenant, namespace, topic))

    @r.delete(TOPIC + "/subscription/{subscription}", **NO_CONTENT,
              summary="Delete a subscription (409 while consumers are connected, unless force=true)")
    async def delete_subscription(tenant: str, namespace: str, topic: str, subscription: str,
                                  service: Service, force: bool = False) -> Response:
        await service.delete_subscription(bodies.topic(tenant, namespace, topic),
                                          bodies.subscription(subscription), force)
        return Response(status_code=204)

    return r
