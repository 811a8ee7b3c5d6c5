"""The admin service's database access.  SQL text lives in queries.sql.

Every change is one transaction: a request that is refused leaves the database as it
was.  Deleting topics follows the fencing rule of docs/architecture.md: the lease row
is updated first in the same transaction (it waits for writes in flight and makes later
ones fail their epoch check), then the rows go.
"""

from __future__ import annotations

from typing import NamedTuple

import asyncpg

from magnetar_protocol.errors import (
    Conflict,
    NamespaceNotFound,
    SubscriptionNotFound,
    TenantNotFound,
    TopicNotFound,
)
from magnetar_protocol.policies import DeadLetter, Row
from magnetar_protocol.topics import TopicName
from magnetar_protocol.txnid import TxnID
from magnetar_storage.listeners import listeners_of
from magnetar_storage.queries import load_queries

Q = load_queries("magnetar_admin")
SCHEMA_POLICY_QUERIES = ("set_schema_compatibility_strategy", "set_allow_auto_update_schema",
                         "set_schema_validation_enforced")

# Tables keyed by topic_id, children first; `topics` goes last.
_TOPIC_ROWS = ("delete_entries", "delete_txn_entries", "delete_txn_outcomes", "delete_pending_acks",
               "delete_delayed_deliveries", "delete_producer_sequences", "delete_subscriptions",
               "delete_compacted_entries", "delete_compactions", "delete_topic_owners", "delete_topics")


class DeletedSubscription(NamedTuple):
    deleted_from: list[int]  # the topic ids the subscription was deleted from
    fenced: list[int]        # the topic ids whose lease moved on (a broker held them)


class TxnSubscription(NamedTuple):
    topic: str
    subscription: str


class AdminStore:
    def __init__(self, pool: asyncpg.Pool, lease_ttl_s: float):
        self.pool = pool
        self.ttl_s = lease_ttl_s

    async def ping(self) -> bool:
        try:
            return await self.pool.fetchval(Q["ping"]) == 1
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError):
            return False

    # ---------------------------------------------------------------- tenants

    async def tenants(self) -> list[str]:
        return [r["tenant"] for r in await self.pool.fetch(Q["list_tenants"])]

    async def tenant_roles(self, tenant: str) -> list[str]:
        row = await self.pool.fetchrow(Q["get_tenant"], tenant)
        if row is None:
            raise TenantNotFound(f"tenant {tenant!r} does not exist")
        return list(row["admin_roles"])

    async def create_tenant(self, tenant: str, roles: list[str]) -> None:
        if await self.pool.fetchval(Q["create_tenant"], tenant, roles) is None:
            raise Conflict(f"tenant {tenant!r} already exists")

    async def update_tenant(self, tenant: str, roles: list[str]) -> None:
        if await self.pool.fetchval(Q["update_tenant"], tenant, roles) is None:
            raise TenantNotFound(f"tenant {tenant!r} does not exist")

    async def delete_tenant(self, tenant: str) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            if await conn.fetchval(Q["lock_tenant"], tenant) is None:
                raise TenantNotFound(f"tenant {tenant!r} does not exist")
            count = await conn.fetchval(Q["count_namespaces"], tenant)
            if count:
                raise Conflict(f"tenant {tenant!r} still has {count} namespace(s); delete them first")
            await conn.execute(Q["delete_tenant"], tenant)

    # ---------------------------------------------------------------- namespaces

    async def namespaces(self, tenant: str) -> list[str]:
        await self.tenant_roles(tenant)
        return [f"{tenant}/{r['namespace']}" for r in await self.pool.fetch(Q["list_namespaces"], tenant)]

    async def deduplication(self, tenant: str, namespace: str) -> bool | None:
        row = await self.pool.fetchrow(Q["get_namespace"], tenant, namespace)
        if row is None:
            raise NamespaceNotFound(f"namespace {tenant}/{namespace} does not exist")
        return row["deduplication_enabled"]

    async def create_namespace(self, tenant: str, namespace: str) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            if await conn.fetchrow(Q["get_tenant"], tenant) is None:
                raise TenantNotFound(f"tenant {tenant!r} does not exist")
            if await conn.fetchval(Q["create_namespace"], tenant, namespace) is None:
                raise Conflict(f"namespace {tenant}/{namespace} already exists")

    async def namespace_topics(self, tenant: str, namespace: str) -> dict[int, str]:
        """{topic id: full name} of the namespace's topics and partitions."""
        rows = await self.pool.fetch(Q["namespace_topics"], tenant, namespace)
        return {r["topic_id"]: r["topic"] for r in rows}

    async def delete_namespace(self, tenant: str, namespace: str, force: bool) -> None:
        """Without ``force`` only an empty namespace goes; with it its topics go too."""
        async with self.pool.acquire() as conn, conn.transaction():
            if await conn.fetchval(Q["lock_namespace"], tenant, namespace) is None:
                raise NamespaceNotFound(f"namespace {tenant}/{namespace} does not exist")
            ids = [r["topic_id"] for r in await conn.fetch(Q["namespace_topics"], tenant, namespace)]
            partitioned = await conn.fetch(Q["list_partitioned"], tenant, namespace)
            if (ids or partitioned) and not force:
                raise Conflict(f"namespace {tenant}/{namespace} still has {len(ids)} topic(s) or "
                               "partition(s); delete them first or pass force=true")
            await self._delete_topic_rows(conn, ids)
            await conn.execute(Q["delete_namespace_partitioned"], tenant, namespace)
            await conn.execute(Q["delete_namespace"], tenant, namespace)

    async def set_deduplication(self, tenant: str, namespace: str, enabled: bool | None) -> None:
        if await self.pool.fetchval(Q["set_deduplication"], tenant, namespace, enabled) is None:
            raise NamespaceNotFound(f"namespace {tenant}/{namespace} does not exist")

    async def schema_policies(self, tenant: str, namespace: str) -> tuple[str | None, bool | None, bool | None]:
        """(compatibility strategy, allow auto update, validation enforced); None: not set."""
        row = await self.pool.fetchrow(Q["get_schema_policies"], tenant, namespace)
        if row is None:
            raise NamespaceNotFound(f"namespace {tenant}/{namespace} does not exist")
        return (row["schema_compatibility_strategy"], row["is_allow_auto_update_schema"],
                row["schema_validation_enforced"])

    async def set_schema_policy(self, tenant: str, namespace: str, policy: str, value: str | bool | None) -> None:
        """Set one schema policy (``policy``: set_schema_compatibility_strategy,
        set_allow_auto_update_schema or set_schema_validation_enforced); None unsets it."""
        if policy not in SCHEMA_POLICY_QUERIES:
            raise ValueError(f"unknown schema policy query {policy!r}")
        if await self.pool.fetchval(Q[policy], tenant, namespace, value) is None:
            raise NamespaceNotFound(f"namespace {tenant}/{namespace} does not exist")

    # ---------------------------------------------------------------- topics

    async def topics(self, tenant: str, namespace: str) -> list[str]:
        await self.deduplication(tenant, namespace)  # 404 for a missing namespace
        return [r["topic"] for r in await self.pool.fetch(Q["list_topics"], tenant, namespace)]

    async def partitioned_topics(self, tenant: str, namespace: str) -> list[str]:
        await self.deduplication(tenant, namespace)
        return [r["topic"] for r in await self.pool.fetch(Q["list_partitioned"], tenant, namespace)]

    async def partitions(self, name: TopicName) -> int | None:
        """The partition count of a partitioned topic; None if it is not one."""
        return await self.pool.fetchval(Q["get_partitioned"], name.full)

    async def topic_id(self, name: TopicName) -> int | None:
        return await self.pool.fetchval(Q["get_topic"], name.full)

    async def topic_ids(self, names: list[TopicName]) -> dict[str, int]:
        rows = await self.pool.fetch(Q["get_topics"], [n.full for n in names])
        return {r["topic"]: r["topic_id"] for r in rows}

    async def subscription_topics(self, topic_ids: list[int], subscription: str) -> list[int]:
        """Which of the topics have the subscription."""
        return [r["topic_id"] for r in await self.pool.fetch(Q["subscription_topics"], topic_ids, subscription)]

    async def grow_partitions(self, name: TopicName, partitions: int) -> int:
        """Raise a partitioned topic's partition count to ``partitions``, creating the new
        partitions (a topics row and an unowned lease each), all or nothing; the count it
        had.  404 if it is not a partitioned topic, 409 unless the count grows."""
        async with self.pool.acquire() as conn, conn.transaction():
            current = await conn.fetchval(Q["lock_partitioned"], name.full)
            if current is None:
                raise TopicNotFound(f"partitioned topic {name.full} does not exist")
            if partitions <= current:
                raise Conflict(f"{name.full} has {current} partitions; the count can only grow "
                               f"(asked for {partitions}): partitions are never removed, as in Pulsar")
            units = [(name.partition(i).full, i) for i in range(current, partitions)]
            # A partition may exist already (a client looked it up before the count grew).
            await conn.fetch(Q["create_topics"], [u[0] for u in units], name.tenant, name.namespace,
                             [u[1] for u in units])
            ids = [r["topic_id"] for r in await conn.fetch(Q["get_topics"], [u[0] for u in units])]
            await conn.execute(Q["create_owner_rows"], ids)
            await conn.execute(Q["grow_partitioned"], name.full, partitions)
            return current

    async def create_topic(self, name: TopicName, partitions: int) -> None:
        """A non-partitioned topic (``partitions`` 0) or a partitioned one with a topics
        row and an unowned lease row per partition, all or nothing."""
        async with self.pool.acquire() as conn, conn.transaction():
            # A namespace deleted meanwhile fails the foreign keys: 409 (app.py).
            if await conn.fetchrow(Q["get_namespace"], name.tenant, name.namespace) is None:
                raise NamespaceNotFound(f"namespace {name.namespace_name} does not exist")
            if await conn.fetchval(Q["get_partitioned"], name.full) is not None:
                raise Conflict(f"partitioned topic {name.full} already exists")
            if await conn.fetchval(Q["get_topic"], name.full) is not None:
                raise Conflict(f"topic {name.full} already exists")
            if partitions:
                if await conn.fetchval(Q["create_partitioned"], name.full, name.tenant, name.namespace,
                                       partitions) is None:
                    raise Conflict(f"partitioned topic {name.full} already exists")
                units = [(name.partition(i).full, i) for i in range(partitions)]
            else:
                units = [(name.full, -1)]
            ids = [r["topic_id"] for r in await conn.fetch(
                Q["create_topics"], [u[0] for u in units], name.tenant, name.namespace,
                [u[1] for u in units])]
            if len(ids) != len(units):
                raise Conflict(f"a partition of {name.full} already exists as a topic")
            await conn.execute(Q["create_owner_rows"], ids)

    async def owners(self, topic_ids: list[int]) -> dict[int, dict]:
        rows = await self.pool.fetch(Q["topic_owners"], topic_ids, self.ttl_s)
        return {r["topic_id"]: dict(r) for r in rows}

    async def fence(self, topic_ids: list[int]) -> None:
        """Take the topics' leases away now (committed), so their owners stop writing."""
        await self.pool.execute(Q["fence_topics"], topic_ids)

    async def delete_topic(self, name: TopicName, units: list[TopicName], partitioned: bool) -> None:
        """Delete a topic (or a partitioned topic and its partitions ``units``) with
        everything stored for it, in one transaction."""
        async with self.pool.acquire() as conn, conn.transaction():
            if partitioned:
                if await conn.fetchval(Q["delete_partitioned"], name.full) is None:
                    raise TopicNotFound(f"partitioned topic {name.full} does not exist")
            rows = await conn.fetch(Q["get_topics"], [u.full for u in units])
            if not partitioned and not rows:
                raise TopicNotFound(f"topic {name.full} does not exist")
            await self._delete_topic_rows(conn, [r["topic_id"] for r in rows])
            await conn.execute(Q["delete_topic_grants"], name.base.full)
            await conn.execute(Q["delete_topic_storage_policies"], name.base.full)
            await conn.execute(Q["delete_topic_dead_letter_policies"], name.base.full)

    @staticmethod
    async def _delete_topic_rows(conn: asyncpg.Connection, topic_ids: list[int]) -> None:
        if not topic_ids:
            return
        # Lease first: waits for in-flight writes (FOR SHARE), and every later write of
        # any broker waits for this transaction and then finds no lease row.
        await conn.execute(Q["fence_topics"], topic_ids)
        for query in _TOPIC_ROWS:
            await conn.execute(Q[query], topic_ids)

    # ---------------------------------------------------------------- permissions

    async def namespace_grants(self, tenant: str, namespace: str) -> dict[str, list[str]]:
        await self.deduplication(tenant, namespace)  # 404 for a missing namespace
        rows = await self.pool.fetch(Q["namespace_grants"], tenant, namespace)
        return {r["role"]: list(r["actions"]) for r in rows}

    async def grant_namespace(self, tenant: str, namespace: str, role: str, actions: list[str]) -> None:
        if await self.pool.fetchval(Q["grant_namespace"], tenant, namespace, role, actions) is None:
            raise NamespaceNotFound(f"namespace {tenant}/{namespace} does not exist")

    async def revoke_namespace(self, tenant: str, namespace: str, role: str) -> None:
        await self.deduplication(tenant, namespace)
        await self.pool.execute(Q["revoke_namespace"], tenant, namespace, role)

    async def topic_grants(self, name: TopicName) -> dict[str, list[str]]:
        await self.deduplication(name.tenant, name.namespace)
        rows = await self.pool.fetch(Q["topic_grants"], name.full)
        return {r["role"]: list(r["actions"]) for r in rows}

    async def grant_topic(self, name: TopicName, role: str, actions: list[str]) -> None:
        if await self.pool.fetchval(Q["grant_topic"], name.tenant, name.namespace, name.full,
                                    role, actions) is None:
            raise NamespaceNotFound(f"namespace {name.namespace_name} does not exist")

    async def revoke_topic(self, name: TopicName, role: str) -> None:
        await self.deduplication(name.tenant, name.namespace)
        await self.pool.execute(Q["revoke_topic"], name.full, role)

    async def subscription_grants(self, tenant: str, namespace: str) -> dict[str, list[str]]:
        await self.deduplication(tenant, namespace)
        rows = await self.pool.fetch(Q["subscription_grants"], tenant, namespace)
        return {r["subscription"]: list(r["roles"]) for r in rows}

    async def grant_subscription(self, tenant: str, namespace: str, subscription: str,
                                 roles: list[str]) -> None:
        if await self.pool.fetchval(Q["grant_subscription"], tenant, namespace, subscription,
                                    roles) is None:
            raise NamespaceNotFound(f"namespace {tenant}/{namespace} does not exist")

    async def revoke_subscription_role(self, tenant: str, namespace: str, subscription: str,
                                       role: str) -> None:
        await self.deduplication(tenant, namespace)
        if await self.pool.fetchval(Q["revoke_subscription_role"], tenant, namespace,
                                    subscription, role) is None:
            raise SubscriptionNotFound(f"subscription {subscription!r} of {tenant}/{namespace} has "
                                       "no permissions to revoke")

    # ---------------------------------------------------------------- stats

    async def log_stats(self, topic_id: int) -> dict:
        return dict(await self.pool.fetchrow(Q["log_stats"], topic_id))

    async def subscriptions(self, topic_id: int) -> list[dict]:
        return [dict(r) for r in await self.pool.fetch(Q["subscriptions"], topic_id)]

    async def entry_sizes(self, topic_id: int, entry_ids: list[int]) -> dict[int, int]:
        if not entry_ids:
            return {}
        rows = await self.pool.fetch(Q["entry_sizes"], topic_id, entry_ids)
        return {r["entry_id"]: r["num_messages"] for r in rows}

    async def delete_subscription(self, topic_ids: list[int], subscription: str) -> DeletedSubscription:
        """Delete the subscription from every topic of ``topic_ids`` that has it, in one
        transaction.  Those topics' leases move on in it when a broker holds them (the
        broker keeps the cursor in memory and must reload)."""
        async with self.pool.acquire() as conn, conn.transaction():
            having = [r["topic_id"] for r in await conn.fetch(Q["subscription_topics"], topic_ids, subscription)]
            if not having:
                return DeletedSubscription([], [])
            fenced = [r["topic_id"] for r in await conn.fetch(Q["fence_owned_topics"], having)]
            deleted = [r["topic_id"] for r in await conn.fetch(Q["delete_subscription"], having, subscription)]
            return DeletedSubscription(deleted, fenced)

    # ---------------------------------------------------------------- brokers

    async def brokers(self) -> list[dict]:
        return [dict(r) for r in await self.pool.fetch(Q["live_brokers"], self.ttl_s)]

    async def ownership(self) -> list[dict]:
        return [dict(r) for r in await self.pool.fetch(Q["ownership"], self.ttl_s)]

    async def listeners_of(self, internal_urls: list[str]) -> dict[str, dict[str, str]]:
        """The advertised listeners of the processes at ``internal_urls`` (shared SQL)."""
        return await listeners_of(self.pool, internal_urls)

    # ---------------------------------------------------------------- transactions

    async def coordinators(self) -> list[asyncpg.Record]:
        """Every coordinator row with ``alive`` (heartbeat within the lease TTL)."""
        return await self.pool.fetch(Q["coordinators"], self.ttl_s)

    async def coordinator_counts(self) -> dict[int, asyncpg.Record]:
        """Per coordinator: ongoing/committed/aborted counts and the low-water mark."""
        return {r["coordinator_id"]: r for r in await self.pool.fetch(Q["coordinator_counts"])}

    async def transaction(self, txn: TxnID) -> asyncpg.Record | None:
        return await self.pool.fetchrow(Q["transaction"], *txn)

    async def transaction_partitions(self, txn: TxnID) -> list[str]:
        return [r["topic"] for r in await self.pool.fetch(Q["transaction_partitions"], *txn)]

    async def transaction_subscriptions(self, txn: TxnID) -> list[TxnSubscription]:
        return [TxnSubscription(r["topic"], r["subscription"])
                for r in await self.pool.fetch(Q["transaction_subscriptions"], *txn)]

    async def slow_transactions(self, open_for_s: float, coordinator_id: int | None) -> list[TxnID]:
        rows = await self.pool.fetch(Q["slow_transactions"], open_for_s, coordinator_id)
        return [TxnID(r["coordinator_id"], r["txn_id"]) for r in rows]

    async def txn_in_buffer(self, topic_id: int, txn: TxnID) -> asyncpg.Record:
        return await self.pool.fetchrow(Q["txn_in_buffer"], topic_id, *txn)

    async def pending_acks(self, topic_id: int, subscription: str) -> dict[TxnID, asyncpg.Record]:
        """The subscription's pending transactional acks, per transaction, in id order."""
        rows = await self.pool.fetch(Q["pending_acks"], topic_id, subscription)
        return {TxnID(r["txn_most"], r["txn_least"]): r for r in rows}

    async def subscription_outcome(self, topic_id: int, subscription: str, txn: TxnID) -> bool | None:
        """The transaction's recorded outcome on the subscription (None: none recorded)."""
        return await self.pool.fetchval(Q["sub_outcome"], topic_id, subscription, *txn)

    async def transaction_owner(self, txn: TxnID) -> str | None:
        return await self.pool.fetchval(Q["transaction_owner"], *txn)

    # ---------------------------------------------------------------- transaction keys

    async def transaction_keys(self, owner: str | None, after: tuple[str | None, str | None],
                               limit: int, key: str | None = None) -> list[asyncpg.Record]:
        """Live keys in (owner, key) order after ``after``; ``owner``/``key`` None: all."""
        return await self.pool.fetch(Q["list_keys"], owner, after[0], after[1], limit, key)

    async def live_registries(self) -> list[str]:
        return [r["url"] for r in await self.pool.fetch(Q["live_registries"], self.ttl_s)]

    # ---------------------------------------------------------------- storage policies (0008)

    async def storage_policies(self, tenant: str, namespace: str, topic: str = "") -> Row:
        """The policies set at one level (topic '' = the namespace's); all None if none."""
        row = await self.pool.fetchrow(Q["get_storage_policies"], tenant, namespace, topic)
        return Row(*row.values()) if row else Row()

    async def set_retention(self, tenant: str, namespace: str, topic: str,
                            time_minutes: int | None, size_mb: int | None) -> None:
        await self.pool.execute(Q["set_retention"], tenant, namespace, topic, time_minutes, size_mb)

    async def set_message_ttl(self, tenant: str, namespace: str, topic: str, seconds: int | None) -> None:
        await self.pool.execute(Q["set_message_ttl"], tenant, namespace, topic, seconds)

    async def set_delayed_delivery(self, tenant: str, namespace: str, topic: str, active: bool | None,
                                   tick_ms: int | None, max_delay_ms: int | None) -> None:
        await self.pool.execute(Q["set_delayed_delivery"], tenant, namespace, topic, active, tick_ms, max_delay_ms)

    async def dead_letter_policy(self, topic: str, subscription: str) -> DeadLetter | None:
        row = await self.pool.fetchrow(Q["get_dead_letter_policy"], topic, subscription)
        return DeadLetter(*row.values()) if row else None

    async def set_dead_letter_policy(self, name: TopicName, subscription: str, policy: DeadLetter) -> None:
        await self.pool.execute(Q["set_dead_letter_policy"], name.tenant, name.namespace, name.full, subscription,
                                policy.max_redeliver_count, policy.dead_letter_topic,
                                policy.initial_subscription_name, policy.retry_letter_topic)

    async def remove_dead_letter_policy(self, topic: str, subscription: str) -> bool:
        return await self.pool.fetchval(Q["delete_dead_letter_policy"], topic, subscription) is not None
    async def set_compaction_threshold(self, tenant: str, namespace: str, topic: str, threshold: int | None) -> None:
        await self.pool.execute(Q["set_compaction_threshold"], tenant, namespace, topic, threshold)

    async def set_backlog_quota(self, tenant: str, namespace: str, topic: str, size: int | None,
                                time_s: int | None, policy: str | None) -> None:
        await self.pool.execute(Q["set_backlog_quota"], tenant, namespace, topic, size, time_s, policy)
