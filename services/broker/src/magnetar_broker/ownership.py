"""Topic ownership: leases in PostgreSQL, lookup, lazy loading, the heartbeat loop.

A broker is alive while its heartbeat row is fresher than the lease TTL (judged by the
database clock).  Lookup answers with the owner; if the owner is dead or absent, it
assigns the topic to a live broker chosen by rendezvous hashing, with a compare-and-set
on the owner epoch.  The assigned broker loads the topic on its first request.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from typing import Any

from magnetar_broker import metrics
from magnetar_broker.partition.log import PartitionLog
from magnetar_broker.settings import BrokerSettings
from magnetar_broker.store import BrokerStore
from magnetar_broker.subscription.subscription import refresh_dead_letter_policies
from magnetar_protocol.errors import (
    InvalidTopicName,
    NamespaceNotFound,
    NotOwner,
    ServiceNotReady,
    TopicNotFound,
)
from magnetar_protocol.policies import DelayedDelivery, Row, resolve_delayed
from magnetar_protocol.topics import TopicName
from magnetar_runtime.roles import Roles

log = logging.getLogger("magnetar.broker.ownership")


def rendezvous(topic: str, brokers: list[tuple[str, str]]) -> tuple[str, str]:
    """The live broker with the highest hash for this topic (stable, evenly spread)."""
    return max(brokers, key=lambda b: hashlib.blake2b(f"{b[0]}|{topic}".encode(), digest_size=8).digest())


class Ownership:
    def __init__(self, store: BrokerStore, settings: BrokerSettings,
                 on_lost: Callable[[PartitionLog], None], roles: Roles):
        self.store = store
        self.settings = settings
        self.roles = roles  # who may register a partition with whose transaction
        self.ttl_s = settings.lease_ttl_ms / 1000
        self.logs: dict[str, PartitionLog] = {}
        self._loading: dict[str, asyncio.Lock] = {}
        self._on_lost = on_lost
        # Where the subscriptions of the partitions loaded here write their dead-letter
        # moves (subscription/deadletters.Sink; the service's, set once it exists).
        self.dead_letter_sink: Any = None
        self.default_delayed = DelayedDelivery(settings.delayed_delivery_enabled, settings.delayed_delivery_tick_ms,
                                               settings.delayed_delivery_max_delay_ms)

    # ---------------------------------------------------------------- topics

    async def topic_id(self, name: TopicName, create: bool) -> int:
        found = await self.store.get_topic(name.full)
        if found:
            return found.topic_id
        base_partitions = await self.store.partitions(name.base.full)
        is_partition = base_partitions is not None and name.partition_index >= 0
        if base_partitions is not None and is_partition and name.partition_index >= base_partitions:
            raise TopicNotFound(
                f"{name.full}: partitioned topic {name.base.full} has only {base_partitions} partitions"
            )
        if not (create and (is_partition or self.settings.allow_auto_topic_creation)):
            raise TopicNotFound(f"topic {name.full} does not exist (auto-creation is off)")
        if not is_partition and (problem := name.creation_problem()):
            raise InvalidTopicName(f"cannot auto-create: {problem}")
        if not (await self.store.namespace(name.tenant, name.namespace)).exists:
            raise NamespaceNotFound(
                f"namespace {name.namespace_name} does not exist; create it with "
                f"`magnetar-admin namespaces create {name.namespace_name}`"
            )
        return await self.store.create_topic(name.full, name.tenant, name.namespace, name.partition_index)

    async def partitions(self, name: TopicName) -> int:
        count = await self.store.partitions(name.full)
        if count is not None:
            return count
        await self.topic_id(name, create=True)
        return 0

    async def lookup(self, name: TopicName) -> tuple[str, str]:
        """(broker_id, url) of the topic's owner, assigning a live broker if needed."""
        topic_id = await self.topic_id(name, create=True)
        for _ in range(5):
            owner = await self.store.lookup_owner(topic_id, self.ttl_s)
            if owner is None:
                raise TopicNotFound(f"topic {name.full} was deleted")
            if owner.broker_id and owner.alive and owner.url is not None:
                return owner.broker_id, owner.url
            live = await self.store.live_brokers(self.ttl_s)
            if not live:
                raise ServiceNotReady("no live broker to serve the topic; retry shortly")
            broker_id, url = rendezvous(name.full, live)
            if await self.store.assign_owner(topic_id, broker_id, owner.epoch) is not None:
                log.info("assigned %s to %s (previous owner %s)", name.full, broker_id, owner.broker_id)
                return broker_id, url
        raise ServiceNotReady(f"ownership of {name.full} is changing; retry")

    async def get_log(self, name: TopicName) -> PartitionLog:
        """The loaded partition, loading it if this broker owns it; else NotOwner."""
        existing = self.logs.get(name.full)
        if existing is not None and not existing.closed:
            return existing
        lock = self._loading.setdefault(name.full, asyncio.Lock())
        async with lock:
            existing = self.logs.get(name.full)
            if existing is not None and not existing.closed:
                return existing
            found = await self.store.get_topic(name.full)
            if found is None:
                raise NotOwner(f"{name.full} is not assigned to this broker; look it up first")
            topic_id = found.topic_id
            epoch = await self.store.my_epoch(topic_id)
            if epoch is None:
                raise NotOwner(f"{name.full} is not owned by this broker; look it up again")
            policy = (await self.store.namespace(name.tenant, name.namespace)).deduplication
            rows = await self.store.delayed_delivery_policies([name.namespace_name])
            plog = PartitionLog(
                name, topic_id, epoch, self.store,
                dedup=self.settings.deduplication_enabled if policy is None else policy,
                max_message_size=self.settings.max_message_size,
                max_batch_messages=self.settings.max_batch_messages,
                cache_bytes=self.settings.entry_cache_bytes,
                max_batches_per_commit=self.settings.max_batches_per_commit,
                on_lost=self._lost,
                roles=self.roles,
                delayed_delivery=self._delayed_delivery(name, rows),
            )
            await plog.load()
            plog.dead_letter_sink = self.dead_letter_sink
            self.logs[name.full] = plog
            metrics.OWNED_TOPICS.set(len(self.logs))
            log.info("serving %s (epoch %d, next entry %d)", name.full, epoch, plog.next_entry_id)
            return plog

    def _delayed_delivery(self, name: TopicName, rows: list[tuple[tuple[str, str, str], Row]]) -> DelayedDelivery:
        """The partition's delayed_delivery policy: its topic's, else its namespace's, else
        this broker's settings."""
        found = {key: row for key, row in rows}
        return resolve_delayed(self.default_delayed, found.get((name.tenant, name.namespace, "")),
                               found.get((name.tenant, name.namespace, name.base.full)))

    def _lost(self, plog: PartitionLog) -> None:
        if self.logs.get(plog.name.full) is plog:
            del self.logs[plog.name.full]
        metrics.OWNED_TOPICS.set(len(self.logs))
        self._on_lost(plog)

    async def unload(self, name: TopicName) -> bool:
        plog = self.logs.get(name.full)
        if plog is None:
            return False
        plog.lose("unloaded")
        await self.store.release_topic(plog.topic_id, plog.epoch)
        return True

    # ---------------------------------------------------------------- heartbeat

    async def heartbeat_once(self) -> None:
        """Keep the broker's lease fresh and drop topics whose lease moved away."""
        if not await self.store.heartbeat():
            await self.store.register(self.settings.url)
        owned = await self.store.owned_topics()
        for plog in list(self.logs.values()):
            if owned.get(plog.topic_id) != plog.epoch:
                plog.lose("lease lost (epoch changed)")
        await self._refresh_policies()

    async def _refresh_policies(self) -> None:
        logs = [p for p in self.logs.values() if not p.closed]
        if logs:
            # Operators' dead-letter policies, set through the admin API meanwhile: one
            # query for every partition served here.
            rows = await self.store.dead_letter_policies(
                sorted({n for p in logs for n in (p.name.full, p.name.base.full)}))
            for plog in logs:
                refresh_dead_letter_policies(plog, rows)
            # Delayed-delivery policies: one query for the namespaces served here.
            delayed = await self.store.delayed_delivery_policies(sorted({p.name.namespace_name for p in logs}))
            for plog in logs:
                plog.delayed_delivery = self._delayed_delivery(plog.name, delayed)
        namespaces = {(p.name.tenant, p.name.namespace) for p in self.logs.values()}
        for tenant, namespace in namespaces:
            policy = (await self.store.namespace(tenant, namespace)).deduplication
            dedup = self.settings.deduplication_enabled if policy is None else policy
            for plog in self.logs.values():
                if (plog.name.tenant, plog.name.namespace) == (tenant, namespace):
                    plog.dedup_state.set_enabled(dedup)
