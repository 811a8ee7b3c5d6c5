"""The admin service's database access.  SQL text lives in queries.sql."""

from __future__ import annotations

import asyncpg

from magnetar_protocol.errors import (
    Conflict,
    NamespaceNotFound,
    TenantNotFound,
    TopicNotFound,
)
from magnetar_protocol.topics import TopicName
from magnetar_storage.queries import load_queries

Q = load_queries("magnetar_admin")


class AdminStore:
    def __init__(self, pool: asyncpg.Pool, ttl_s: float):
        self.pool = pool
        self.ttl_s = ttl_s

    # ---------------------------------------------------------------- tenants

    async def tenants(self) -> list[str]:
        return [r[0] for r in await self.pool.fetch(Q["list_tenants"])]

    async def tenant(self, tenant: str) -> dict:
        row = await self.pool.fetchrow(Q["get_tenant"], tenant)
        if row is None:
            raise TenantNotFound(f"tenant {tenant!r} does not exist")
        return {"adminRoles": list(row["admin_roles"]), "allowedClusters": ["standalone"]}

    async def create_tenant(self, tenant: str, roles: list[str]) -> None:
        if await self.pool.fetchval(Q["create_tenant"], tenant, roles) is None:
            raise Conflict(f"tenant {tenant!r} already exists")

    async def delete_tenant(self, tenant: str) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            if await conn.fetchval(Q["count_namespaces"], tenant):
                raise Conflict(f"tenant {tenant!r} still has namespaces; delete them first")
            if await conn.fetchval(Q["delete_tenant"], tenant) is None:
                raise TenantNotFound(f"tenant {tenant!r} does not exist")

    # ---------------------------------------------------------------- namespaces

    async def namespaces(self, tenant: str) -> list[str]:
        await self.tenant(tenant)
        return [f"{tenant}/{r[0]}" for r in await self.pool.fetch(Q["list_namespaces"], tenant)]

    async def require_namespace(self, tenant: str, namespace: str) -> bool | None:
        row = await self.pool.fetchrow(Q["get_namespace"], tenant, namespace)
        if row is None:
            raise NamespaceNotFound(f"namespace {tenant}/{namespace} does not exist")
        return row["deduplication_enabled"]

    async def create_namespace(self, tenant: str, namespace: str) -> None:
        await self.tenant(tenant)
        if await self.pool.fetchval(Q["create_namespace"], tenant, namespace) is None:
            raise Conflict(f"namespace {tenant}/{namespace} already exists")

    async def delete_namespace(self, tenant: str, namespace: str, force: bool) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            if await conn.fetchval(Q["count_topics_in_namespace"], tenant, namespace) and not force:
                raise Conflict(f"namespace {tenant}/{namespace} still has topics; delete them or pass force=true")
            if await conn.fetchval(Q["delete_namespace"], tenant, namespace) is None:
                raise NamespaceNotFound(f"namespace {tenant}/{namespace} does not exist")

    async def set_deduplication(self, tenant: str, namespace: str, enabled: bool | None) -> None:
        if await self.pool.fetchval(Q["set_deduplication"], tenant, namespace, enabled) is None:
            raise NamespaceNotFound(f"namespace {tenant}/{namespace} does not exist")

    # ---------------------------------------------------------------- topics

    async def topics(self, tenant: str, namespace: str) -> list[str]:
        await self.require_namespace(tenant, namespace)
        return [r[0] for r in await self.pool.fetch(Q["list_topics"], tenant, namespace)]

    async def partitioned_topics(self, tenant: str, namespace: str) -> list[str]:
        await self.require_namespace(tenant, namespace)
        return [r[0] for r in await self.pool.fetch(Q["list_partitioned"], tenant, namespace)]

    async def partitions(self, name: TopicName) -> int | None:
        return await self.pool.fetchval(Q["get_partitioned"], name.full)

    async def create_topic(self, name: TopicName, partitions: int) -> None:
        """A non-partitioned topic (partitions 0) or a partitioned one with its partitions."""
        await self.require_namespace(name.tenant, name.namespace)
        async with self.pool.acquire() as conn, conn.transaction():
            if await conn.fetchval(Q["get_topic"], name.full) is not None or \
                    await conn.fetchval(Q["get_partitioned"], name.full) is not None:
                raise Conflict(f"topic {name.full} already exists")
            units = [(name, -1)]
            if partitions:
                await conn.execute(Q["create_partitioned"], name.full, name.tenant, name.namespace, partitions)
                units = [(name.partition(i), i) for i in range(partitions)]
            for unit, index in units:
                topic_id = await conn.fetchval(Q["create_topic"], unit.full, name.tenant, name.namespace, index)
                if topic_id is None:
                    raise Conflict(f"topic {unit.full} already exists")
                await conn.execute(Q["create_owner_row"], topic_id)

    async def topic_id(self, name: TopicName) -> int:
        topic_id = await self.pool.fetchval(Q["get_topic"], name.full)
        if topic_id is None:
            raise TopicNotFound(f"topic {name.full} does not exist")
        return topic_id

    async def owner(self, topic_id: int) -> dict:
        row = await self.pool.fetchrow(Q["topic_owner"], topic_id, self.ttl_s)
        return dict(row) if row else {}

    async def fence_topic(self, topic_id: int) -> None:
        await self.pool.execute(Q["fence_topic"], topic_id)

    async def delete_topic_rows(self, topic_ids: list[int], partitioned: TopicName | None) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            for topic_id in topic_ids:
                await conn.execute(Q["delete_topic_rows"], topic_id)
            if partitioned is not None:
                await conn.execute(Q["delete_partitioned"], partitioned.full)

    async def log_stats(self, topic_id: int) -> dict:
        return dict(await self.pool.fetchrow(Q["log_stats"], topic_id))

    async def subscriptions(self, topic_id: int) -> list[dict]:
        return [dict(r) for r in await self.pool.fetch(Q["subscriptions"], topic_id)]

    async def delete_subscription(self, topic_id: int, subscription: str) -> bool:
        return await self.pool.fetchval(Q["delete_subscription"], topic_id, subscription) is not None

    async def brokers(self) -> list[dict]:
        return [dict(r) for r in await self.pool.fetch(Q["live_brokers"], self.ttl_s)]

    async def ownership(self) -> list[dict]:
        return [dict(r) for r in await self.pool.fetch(Q["ownership"])]
