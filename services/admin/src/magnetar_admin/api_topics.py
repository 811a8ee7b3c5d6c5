"""Topic routes: /admin/v2/persistent/{tenant}/{namespace}/... (persistent topics only)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response

from magnetar_admin import bodies
from magnetar_admin.deps import NO_CONTENT, Body, Service, body_doc, tenant_admin_only

BASE = "/{tenant}/{namespace}"
TOPIC = BASE + "/{topic}"


def topic_routes() -> APIRouter:
    r = APIRouter(prefix="/admin/v2/persistent", tags=["topics"],
                  dependencies=[Depends(tenant_admin_only)])

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

    @r.get(TOPIC + "/partitions", summary="Partitioned topic metadata: {\"partitions\": N} (0: not partitioned)")
    async def get_partitions(tenant: str, namespace: str, topic: str, service: Service) -> dict:
        name = bodies.topic(tenant, namespace, topic)
        count, _ = await service.units(name)
        if not count:
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

    @r.get(TOPIC + "/internal-stats", summary="Same as internalStats (the spelling of the design brief)")
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
