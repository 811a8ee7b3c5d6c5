"""Storage-lifecycle policy routes on Pulsar's admin v2 paths (docs/admin.md): retention,
messageTTL, backlogQuota and compactionThreshold per namespace and per topic, the namespace's
whole policy object, expire-messages, and a subscription's dead-letter policy (Magnetar's own
path: Pulsar sets it only in clients).  Bodies are validated by magnetar_protocol.policies (400
with the reason; nothing is written)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Response

from magnetar_admin import bodies
from magnetar_admin.deps import NO_CONTENT, Body, Service, body_doc, tenant_admin_only
from magnetar_protocol.errors import BadRequest, TopicNotFound
from magnetar_protocol.policies import (
    MAX_VALUE,
    QUOTA_POLICIES,
    QUOTA_TYPES,
    BacklogQuota,
    DelayedDelivery,
    PolicyError,
    Retention,
    Row,
    parse_backlog_quota,
    parse_compaction_threshold,
    parse_dead_letter,
    parse_delayed_delivery,
    parse_retention,
    parse_ttl,
)
from magnetar_protocol.topics import TopicName

NS = "/admin/v2/namespaces/{tenant}/{namespace}"
TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
RETENTION_DOC = body_doc({"type": "object", "properties": {
    "retentionTimeInMinutes": {"type": "integer", "minimum": -1},
    "retentionSizeInMB": {"type": "integer", "minimum": -1}}},
    example={"retentionTimeInMinutes": 60, "retentionSizeInMB": 1024})
QUOTA_DOC = body_doc({"type": "object", "properties": {
    "limitSize": {"type": "integer", "minimum": -1, "description": "bytes"},
    "limitTime": {"type": "integer", "minimum": -1, "description": "seconds"},
    "policy": {"type": "string", "enum": list(QUOTA_POLICIES)}}},
    example={"limitSize": 10737418240, "limitTime": -1, "policy": "producer_request_hold"})
DELAYED_DOC = body_doc({"type": "object", "required": ["active"], "properties": {
    "active": {"type": "boolean"}, "tickTime": {"type": "integer", "minimum": 1},
    "maxDeliveryDelayInMillis": {"type": "integer", "minimum": 0}}},
    example={"active": True, "tickTime": 1000, "maxDeliveryDelayInMillis": 86400000})
DEAD_LETTER_DOC = body_doc({"type": "object", "required": ["maxRedeliverCount"], "properties": {
    "maxRedeliverCount": {"type": "integer", "minimum": 1},
    "deadLetterTopic": {"type": "string", "description": "default: <topic>-<subscription>-DLQ"},
    "initialSubscriptionName": {"type": "string", "description": "created on the dead-letter topic first"},
    "retryLetterTopic": {"type": "string", "description": "default: <topic>-<subscription>-RETRY"}}},
    example={"maxRedeliverCount": 5, "initialSubscriptionName": "triage"})
Seconds = Annotated[int, Path(ge=0, le=MAX_VALUE, description="seconds")]


def _checked(parse, *args):
    try:
        return parse(*args)
    except PolicyError as exc:
        raise BadRequest(str(exc)) from None


def retention_json(row: Row) -> dict | None:
    if row.retention_time_minutes is None:
        return None
    return Retention(row.retention_time_minutes, row.retention_size_mb).as_json()


def quota_map_json(row: Row) -> dict:
    if row.backlog_policy is None:
        return {}
    return {"destination_storage": BacklogQuota(row.backlog_limit_size, row.backlog_limit_time,
                                                row.backlog_policy).as_json()}


def policy_routes() -> APIRouter:
    r = APIRouter(tags=["policies"], dependencies=[Depends(tenant_admin_only)])

    async def namespace_scope(service, tenant: str, namespace: str) -> tuple[str, str, str]:
        tenant, namespace = bodies.namespace(tenant, namespace)
        await service.store.deduplication(tenant, namespace)  # 404 for a missing namespace
        return tenant, namespace, ""

    async def topic_scope(service, tenant: str, namespace: str, topic: str) -> tuple[str, str, str]:
        """A topic-level policy is keyed by the topic's full name (a partitioned topic's
        covers its partitions; naming a partition means its partitioned topic)."""
        name = bodies.topic(tenant, namespace, topic).base
        if await service.store.topic_id(name) is None and not await service.store.partitions(name):
            raise TopicNotFound(f"topic {name.full} does not exist")
        return name.tenant, name.namespace, name.full

    # ---------------------------------------------------------------- namespace level

    @r.get(NS, tags=["namespaces"], summary="The namespace's policies (Pulsar's Policies object)")
    async def namespace_policies(tenant: str, namespace: str, service: Service) -> dict:
        scope = await namespace_scope(service, tenant, namespace)
        row = await service.store.storage_policies(*scope)
        strategy, auto_update, enforced = await service.store.schema_policies(*scope[:2])
        return {"retention_policies": retention_json(row),
                "message_ttl_in_seconds": row.message_ttl_seconds,
                "backlog_quota_map": quota_map_json(row),
                "compaction_threshold": row.compaction_threshold,
                "deduplicationEnabled": await service.store.deduplication(*scope[:2]),
                "delayed_delivery_policies": None if row.delayed_delivery_active is None else DelayedDelivery(
                    row.delayed_delivery_active, row.delayed_delivery_tick_ms or 1000,
                    row.delayed_delivery_max_delay_ms or 0).as_json(),
                # Pulsar's names; UNDEFINED / null: the broker's default
                "schema_compatibility_strategy": strategy or "UNDEFINED",
                "is_allow_auto_update_schema": auto_update,
                "schema_validation_enforced": enforced}

    def level_routes(prefix: str, scope_of, tag: str) -> None:
        @r.get(prefix + "/retention", tags=[tag], summary="Retention set at this level (null: none)")
        async def get_retention(service: Service, tenant: str, namespace: str, topic: str = "") -> dict | None:
            scope = await scope_of(service, tenant, namespace, topic)
            return retention_json(await service.store.storage_policies(*scope))

        @r.post(prefix + "/retention", tags=[tag], **NO_CONTENT, openapi_extra=RETENTION_DOC,
                summary="Set retention of acknowledged data (-1 = infinite; both 0 = keep nothing)")
        async def set_retention(service: Service, body: Body, tenant: str, namespace: str,
                                topic: str = "") -> Response:
            scope = await scope_of(service, tenant, namespace, topic)
            retention = _checked(parse_retention, None if body is bodies.MISSING else body)
            await service.store.set_retention(*scope, retention.time_minutes, retention.size_mb)
            return Response(status_code=204)

        @r.delete(prefix + "/retention", tags=[tag], **NO_CONTENT, summary="Remove retention at this level")
        async def remove_retention(service: Service, tenant: str, namespace: str, topic: str = "") -> Response:
            scope = await scope_of(service, tenant, namespace, topic)
            await service.store.set_retention(*scope, None, None)
            return Response(status_code=204)

        @r.get(prefix + "/messageTTL", tags=[tag], summary="messageTTL in seconds set at this level (null: none)")
        async def get_ttl(service: Service, tenant: str, namespace: str, topic: str = "") -> int | None:
            scope = await scope_of(service, tenant, namespace, topic)
            return (await service.store.storage_policies(*scope)).message_ttl_seconds

        @r.post(prefix + "/messageTTL", tags=[tag], **NO_CONTENT,
                openapi_extra=body_doc({"type": "integer", "minimum": 0}, required=False, example=3600),
                summary="Set messageTTL (seconds; 0 = off): body N, or ?messageTTL=N as Pulsar's topic route")
        async def set_ttl(service: Service, body: Body, tenant: str, namespace: str, topic: str = "",
                          message_ttl: Annotated[int | None, Query(alias="messageTTL")] = None) -> Response:
            scope = await scope_of(service, tenant, namespace, topic)
            value = message_ttl if message_ttl is not None else (None if body is bodies.MISSING else body)
            await service.store.set_message_ttl(*scope, _checked(parse_ttl, value))
            return Response(status_code=204)

        @r.delete(prefix + "/messageTTL", tags=[tag], **NO_CONTENT, summary="Remove messageTTL at this level")
        async def remove_ttl(service: Service, tenant: str, namespace: str, topic: str = "") -> Response:
            scope = await scope_of(service, tenant, namespace, topic)
            await service.store.set_message_ttl(*scope, None)
            return Response(status_code=204)

        @r.get(prefix + "/compactionThreshold", tags=[tag],
               summary="compactionThreshold in bytes set at this level (null: none)")
        async def get_compaction_threshold(service: Service, tenant: str, namespace: str,
                                           topic: str = "") -> int | None:
            scope = await scope_of(service, tenant, namespace, topic)
            return (await service.store.storage_policies(*scope)).compaction_threshold

        @r.post(prefix + "/compactionThreshold", tags=[tag], **NO_CONTENT,
                openapi_extra=body_doc({"type": "integer", "minimum": 0}, example=104857600),
                summary="Set compactionThreshold: bytes past the compaction horizon that start a "
                        "compaction (0 = off)")
        async def set_compaction_threshold(service: Service, body: Body, tenant: str, namespace: str,
                                           topic: str = "") -> Response:
            scope = await scope_of(service, tenant, namespace, topic)
            threshold = _checked(parse_compaction_threshold, None if body is bodies.MISSING else body)
            await service.store.set_compaction_threshold(*scope, threshold)
            return Response(status_code=204)

        @r.delete(prefix + "/compactionThreshold", tags=[tag], **NO_CONTENT,
                  summary="Remove compactionThreshold at this level")
        async def remove_compaction_threshold(service: Service, tenant: str, namespace: str,
                                              topic: str = "") -> Response:
            scope = await scope_of(service, tenant, namespace, topic)
            await service.store.set_compaction_threshold(*scope, None)
            return Response(status_code=204)

        @r.get(prefix + "/backlogQuotaMap", tags=[tag],
               summary="Backlog quotas set at this level: {\"destination_storage\": {...}} or {}")
        async def get_quota(service: Service, tenant: str, namespace: str, topic: str = "") -> dict:
            scope = await scope_of(service, tenant, namespace, topic)
            return quota_map_json(await service.store.storage_policies(*scope))

        @r.post(prefix + "/backlogQuota", tags=[tag], **NO_CONTENT, openapi_extra=QUOTA_DOC,
                summary="Set the backlog quota (limitSize bytes, limitTime seconds, policy)")
        async def set_quota(service: Service, body: Body, tenant: str, namespace: str, topic: str = "",
                            quota_type: Annotated[str | None, Query(alias="backlogQuotaType")] = None) -> Response:
            scope = await scope_of(service, tenant, namespace, topic)
            quota = _checked(parse_backlog_quota, None if body is bodies.MISSING else body, quota_type)
            await service.store.set_backlog_quota(*scope, quota.limit_size, quota.limit_time, quota.policy)
            return Response(status_code=204)

        @r.get(prefix + "/delayedDelivery", tags=[tag],
               summary="The delayed_delivery policy set at this level (null: none)")
        async def get_delayed(service: Service, tenant: str, namespace: str, topic: str = "") -> dict | None:
            scope = await scope_of(service, tenant, namespace, topic)
            row = await service.store.storage_policies(*scope)
            if row.delayed_delivery_active is None:
                return None
            return DelayedDelivery(row.delayed_delivery_active, row.delayed_delivery_tick_ms or 1000,
                                   row.delayed_delivery_max_delay_ms or 0).as_json()

        @r.post(prefix + "/delayedDelivery", tags=[tag], **NO_CONTENT, openapi_extra=DELAYED_DOC,
                summary="Set delayed delivery (active; tickTime ms; maxDeliveryDelayInMillis, 0 = no limit)")
        async def set_delayed(service: Service, body: Body, tenant: str, namespace: str,
                              topic: str = "") -> Response:
            scope = await scope_of(service, tenant, namespace, topic)
            policy = _checked(parse_delayed_delivery, None if body is bodies.MISSING else body)
            await service.store.set_delayed_delivery(*scope, policy.active, policy.tick_ms, policy.max_delay_ms)
            return Response(status_code=204)

        @r.delete(prefix + "/delayedDelivery", tags=[tag], **NO_CONTENT,
                  summary="Remove the delayed_delivery policy at this level")
        async def remove_delayed(service: Service, tenant: str, namespace: str, topic: str = "") -> Response:
            scope = await scope_of(service, tenant, namespace, topic)
            await service.store.set_delayed_delivery(*scope, None, None, None)
            return Response(status_code=204)

        @r.delete(prefix + "/backlogQuota", tags=[tag], **NO_CONTENT, summary="Remove the backlog quota here")
        async def remove_quota(service: Service, tenant: str, namespace: str, topic: str = "",
                               quota_type: Annotated[str | None, Query(alias="backlogQuotaType")] = None
                               ) -> Response:
            scope = await scope_of(service, tenant, namespace, topic)
            if quota_type is not None and quota_type not in QUOTA_TYPES:
                raise BadRequest(f"backlogQuota: unknown backlogQuotaType {quota_type!r} (one of {list(QUOTA_TYPES)})")
            await service.store.set_backlog_quota(*scope, None, None, None)
            return Response(status_code=204)

    async def ns_scope(service, tenant, namespace, topic=""):
        return await namespace_scope(service, tenant, namespace)

    level_routes(NS, ns_scope, "namespaces")
    level_routes(TOPIC, topic_scope, "topics")

    # ---------------------------------------------------------------- dead-letter policy

    @r.get(TOPIC + "/subscription/{subscription}/deadLetterPolicy", tags=["topics"],
           summary="The subscription's dead-letter policy set by an operator (null: none)")
    async def get_dead_letter(tenant: str, namespace: str, topic: str, subscription: str,
                              service: Service) -> dict | None:
        _, _, full = await topic_scope(service, tenant, namespace, topic)
        policy = await service.store.dead_letter_policy(full, bodies.subscription(subscription))
        return None if policy is None else policy.as_json()

    @r.post(TOPIC + "/subscription/{subscription}/deadLetterPolicy", tags=["topics"], **NO_CONTENT,
            openapi_extra=DEAD_LETTER_DOC,
            summary="Move messages redelivered more than maxRedeliverCount times to a dead-letter topic, "
                    "whatever client consumes (the copy and the ack in one SQL transaction)")
    async def set_dead_letter(tenant: str, namespace: str, topic: str, subscription: str,
                              service: Service, body: Body) -> Response:
        _, _, full = await topic_scope(service, tenant, namespace, topic)
        sub = bodies.subscription(subscription)
        policy = _checked(parse_dead_letter, None if body is bodies.MISSING else body)
        if policy.initial_subscription_name:
            bodies.subscription(policy.initial_subscription_name)
        for target in filter(None, (policy.dead_letter_topic, policy.retry_letter_topic)):
            # The broker writes there for this subscription: a topic whose tenant the
            # caller administers too, in a namespace that exists.
            name = TopicName.parse(target)
            await service.require_tenant_admin(name.tenant)
            await service.store.deduplication(name.tenant, name.namespace)  # 404 without the namespace
        await service.store.set_dead_letter_policy(TopicName.parse(full), sub, policy)
        return Response(status_code=204)

    @r.delete(TOPIC + "/subscription/{subscription}/deadLetterPolicy", tags=["topics"], **NO_CONTENT,
              summary="Remove the subscription's dead-letter policy (consumers' own ones apply again)")
    async def remove_dead_letter(tenant: str, namespace: str, topic: str, subscription: str,
                                 service: Service) -> Response:
        _, _, full = await topic_scope(service, tenant, namespace, topic)
        await service.store.remove_dead_letter_policy(full, bodies.subscription(subscription))
        return Response(status_code=204)

    # ---------------------------------------------------------------- expire-messages

    @r.post(TOPIC + "/subscription/{subscription}/expireMessages/{seconds}", tags=["topics"],
            summary="Acknowledge the subscription's messages older than `seconds` (every partition)")
    async def expire_subscription(tenant: str, namespace: str, topic: str, subscription: str,
                                  seconds: Seconds, service: Service) -> dict:
        name = bodies.topic(tenant, namespace, topic)
        expired = await service.expire_messages(name, bodies.subscription(subscription), seconds)
        return {"expiredEntries": expired}

    @r.post(TOPIC + "/all_subscription/expireMessages/{seconds}", tags=["topics"],
            summary="Acknowledge every subscription's messages older than `seconds`")
    async def expire_all(tenant: str, namespace: str, topic: str, seconds: Seconds, service: Service) -> dict:
        name = bodies.topic(tenant, namespace, topic)
        return {"expiredEntries": await service.expire_messages(name, None, seconds)}

    return r
