"""Admin REST routes (JSON), on Pulsar's paths."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, FastAPI, Response

from magnetar_protocol.errors import BadRequest, TopicNotFound
from magnetar_protocol.topics import TopicName, validate_name_part

from magnetar_admin.service import AdminService


def _topic(tenant: str, namespace: str, topic: str) -> TopicName:
    return TopicName.parse(f"persistent://{tenant}/{namespace}/{topic}")


def _partition_count(body: Any) -> int:
    if isinstance(body, dict):
        body = body.get("partitions")
    if isinstance(body, bool) or not isinstance(body, int) or body <= 0:
        raise BadRequest(f"the body must be the partition count, a positive integer (got {body!r})")
    return body


def add_routes(app: FastAPI, service: AdminService) -> None:
    v2 = APIRouter(prefix="/admin/v2")

    # ---------------------------------------------------------------- tenants
    @v2.get("/tenants", summary="List tenants")
    async def list_tenants() -> list[str]:
        return await service.store.tenants()

    @v2.get("/tenants/{tenant}", summary="Get a tenant's configuration")
    async def get_tenant(tenant: str) -> dict:
        return await service.store.tenant(tenant)

    @v2.put("/tenants/{tenant}", status_code=204, summary="Create a tenant")
    async def create_tenant(tenant: str, body: dict | None = Body(None)) -> Response:
        validate_name_part("tenant", tenant)
        roles = (body or {}).get("adminRoles", [])
        if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
            raise BadRequest("adminRoles must be a list of role names")
        await service.store.create_tenant(tenant, roles)
        return Response(status_code=204)

    @v2.delete("/tenants/{tenant}", status_code=204, summary="Delete a tenant without namespaces")
    async def delete_tenant(tenant: str) -> Response:
        await service.store.delete_tenant(tenant)
        return Response(status_code=204)

    # ---------------------------------------------------------------- namespaces
    @v2.get("/namespaces/{tenant}", summary="List a tenant's namespaces")
    async def list_namespaces(tenant: str) -> list[str]:
        return await service.store.namespaces(tenant)

    @v2.put("/namespaces/{tenant}/{namespace}", status_code=204, summary="Create a namespace")
    async def create_namespace(tenant: str, namespace: str) -> Response:
        validate_name_part("namespace", namespace)
        await service.store.create_namespace(tenant, namespace)
        return Response(status_code=204)

    @v2.delete("/namespaces/{tenant}/{namespace}", status_code=204, summary="Delete a namespace")
    async def delete_namespace(tenant: str, namespace: str, force: bool = False) -> Response:
        await service.store.delete_namespace(tenant, namespace, force)
        return Response(status_code=204)

    @v2.get("/namespaces/{tenant}/{namespace}/topics", summary="List a namespace's topics")
    async def namespace_topics(tenant: str, namespace: str) -> list[str]:
        return await service.store.topics(tenant, namespace)

    @v2.get("/namespaces/{tenant}/{namespace}/deduplication",
            summary="The namespace's deduplication policy (null: the broker default)")
    async def get_dedup(tenant: str, namespace: str) -> bool | None:
        return await service.store.require_namespace(tenant, namespace)

    @v2.post("/namespaces/{tenant}/{namespace}/deduplication", status_code=204,
             summary="Turn deduplication on or off for the namespace")
    async def set_dedup(tenant: str, namespace: str, enabled: Any = Body(...)) -> Response:
        if not isinstance(enabled, bool):
            raise BadRequest(f"the body must be true or false (got {enabled!r})")
        await service.store.set_deduplication(tenant, namespace, enabled)
        return Response(status_code=204)

    @v2.delete("/namespaces/{tenant}/{namespace}/deduplication", status_code=204,
               summary="Follow the broker default again")
    async def clear_dedup(tenant: str, namespace: str) -> Response:
        await service.store.set_deduplication(tenant, namespace, None)
        return Response(status_code=204)

    # ---------------------------------------------------------------- topics
    base = "/persistent/{tenant}/{namespace}"

    @v2.get(base, summary="List topics (partitions included)")
    async def list_topics(tenant: str, namespace: str) -> list[str]:
        return await service.store.topics(tenant, namespace)

    @v2.get(base + "/partitioned", summary="List partitioned topics")
    async def list_partitioned(tenant: str, namespace: str) -> list[str]:
        return await service.store.partitioned_topics(tenant, namespace)

    @v2.put(base + "/{topic}/partitions", status_code=204, summary="Create a partitioned topic")
    async def create_partitioned(tenant: str, namespace: str, topic: str, body: Any = Body(...)) -> Response:
        await service.create_topic(_topic(tenant, namespace, topic), _partition_count(body))
        return Response(status_code=204)

    @v2.get(base + "/{topic}/partitions", summary="A partitioned topic's metadata")
    async def get_partitions(tenant: str, namespace: str, topic: str) -> dict:
        name = _topic(tenant, namespace, topic)
        count = await service.store.partitions(name)
        if count is None:
            await service.store.topic_id(name)  # 404 unless it is a non-partitioned topic
            count = 0
        return {"partitions": count}

    @v2.delete(base + "/{topic}/partitions", status_code=204, summary="Delete a partitioned topic")
    async def delete_partitioned(tenant: str, namespace: str, topic: str, force: bool = False) -> Response:
        name = _topic(tenant, namespace, topic)
        if not await service.store.partitions(name):
            raise TopicNotFound(f"{name.full} is not a partitioned topic")
        await service.delete_topic(name, force)
        return Response(status_code=204)

    @v2.put(base + "/{topic}", status_code=204, summary="Create a non-partitioned topic")
    async def create_topic(tenant: str, namespace: str, topic: str) -> Response:
        await service.create_topic(_topic(tenant, namespace, topic), 0)
        return Response(status_code=204)

    @v2.delete(base + "/{topic}", status_code=204, summary="Delete a topic")
    async def delete_topic(tenant: str, namespace: str, topic: str, force: bool = False) -> Response:
        await service.delete_topic(_topic(tenant, namespace, topic), force)
        return Response(status_code=204)

    @v2.get(base + "/{topic}/stats", summary="Topic stats: producers, subscriptions, backlog")
    async def topic_stats(tenant: str, namespace: str, topic: str) -> dict:
        return await service.stats(_topic(tenant, namespace, topic))

    @v2.get(base + "/{topic}/partitioned-stats", summary="Stats of every partition, and totals")
    async def partitioned_stats(tenant: str, namespace: str, topic: str) -> dict:
        return await service.partitioned_stats(_topic(tenant, namespace, topic))

    @v2.get(base + "/{topic}/internal-stats", summary="Storage-level stats: entries, cursors, owner")
    async def internal_stats(tenant: str, namespace: str, topic: str) -> dict:
        return await service.internal_stats(_topic(tenant, namespace, topic))

    @v2.get(base + "/{topic}/subscriptions", summary="List a topic's durable subscriptions")
    async def subscriptions(tenant: str, namespace: str, topic: str) -> list[str]:
        names = []
        for unit in await service.units(_topic(tenant, namespace, topic)):
            names += [s["subscription"] for s in await service.store.subscriptions(await service.store.topic_id(unit))]
        return sorted(set(names))

    @v2.delete(base + "/{topic}/subscription/{subscription}", status_code=204,
               summary="Delete a subscription")
    async def delete_subscription(tenant: str, namespace: str, topic: str, subscription: str) -> Response:
        for unit in await service.units(_topic(tenant, namespace, topic)):
            await service.delete_subscription(unit, subscription)
        return Response(status_code=204)

    # ---------------------------------------------------------------- brokers
    @v2.get("/brokers", summary="Live brokers")
    async def brokers() -> list[str]:
        return [b["url"] for b in await service.store.brokers()]

    @v2.get("/brokers/ownership", summary="Which broker owns which topic")
    async def ownership() -> list[dict]:
        return [{"topic": r["topic"], "broker": r["broker_id"], "epoch": r["epoch"]}
                for r in await service.store.ownership()]

    app.include_router(v2)
