"""The topics' schema registry on the broker (Pulsar's is the broker's too): versions read
from and added to PostgreSQL (``schemas``, keyed by the topic's full name; a partitioned
topic's partitions share their topic's), decided by the pure rules of
magnetar_protocol.schemaregistry under the namespace's schema policies.  Both front ends
and the admin's routes (through /v1/schemas/*) come here.

A new version is a compare-and-set on (topic, version): when another broker stored that
version first, the versions are read again and the decision is made anew, so two
producers registering at once never both get a version the strategy did not check
against the other's."""

from __future__ import annotations

import logging

from magnetar_broker.authorization import Authorizer
from magnetar_broker.settings import BrokerSettings
from magnetar_broker.store import BrokerStore
from magnetar_protocol import schemaregistry as rules
from magnetar_protocol.errors import NamespaceNotFound, PersistenceError
from magnetar_protocol.schemainfo import Schema
from magnetar_protocol.schemaregistry import SchemaPolicy, Stored, Verdict
from magnetar_protocol.topics import TopicName
from magnetar_runtime.permissions import LOOKUP, PRODUCE

log = logging.getLogger("magnetar.broker.schemas")

# Versions a decision is retried for when other brokers keep taking the next one first.
MAX_RACES = 20


class SchemaRegistry:
    def __init__(self, store: BrokerStore, settings: BrokerSettings, authz: Authorizer) -> None:
        self.store = store
        self.settings = settings
        self.authz = authz

    async def policy(self, name: TopicName) -> SchemaPolicy:
        """The namespace's schema policies, the broker's defaults where it sets none."""
        found = await self.store.schema_policies(name.tenant, name.namespace)
        if found is None:
            raise NamespaceNotFound(f"namespace {name.namespace_name} does not exist")
        s = self.settings
        return SchemaPolicy(
            found.strategy or s.schema_compatibility_strategy,
            s.allow_auto_update_schema if found.allow_auto_update is None else found.allow_auto_update,
            s.schema_validation_enforced if found.validation_enforced is None else found.validation_enforced)

    async def _settle(self, name: TopicName, decide) -> Verdict:
        """Run ``decide(versions)`` and store the version it adds, again on a lost race."""
        key = name.base.full
        for _ in range(MAX_RACES):
            versions = await self.store.schema_versions(key)
            verdict, schema = decide(versions)
            if not verdict.add:
                return verdict
            assert verdict.version is not None
            if await self.store.add_schema(key, verdict.version, schema):
                log.info("%s: schema version %d (%s) registered", key, verdict.version,
                         "deleted" if schema is None else schema.type)
                return verdict
        raise PersistenceError(f"{key}: the schema's version was taken {MAX_RACES} times in a row; retry")

    # ---------------------------------------------------------------- producers and consumers

    async def for_producer(self, name: TopicName, schema: Schema | None) -> tuple[int | None, SchemaPolicy]:
        """The version a producer writes with (None: it has no schema) and the policy it
        was judged by; IncompatibleSchema when refused."""
        policy = await self.policy(name)
        verdict = await self._settle(name, lambda v: (rules.for_producer(v, schema, policy), schema))
        return verdict.version, policy

    async def for_consumer(self, name: TopicName, schema: Schema | None, idle: bool) -> None:
        """IncompatibleSchema unless a consumer with ``schema`` may read the topic; its
        schema is registered when the topic has none and is ``idle`` (Pulsar's rule)."""
        if schema is None:
            return
        policy = await self.policy(name)
        await self._settle(name, lambda v: (rules.for_consumer(v, schema, policy, idle), schema))

    # ---------------------------------------------------------------- the /v1/schemas/* calls

    async def get(self, topic: str, version: int | None) -> Stored:
        name = TopicName.parse(topic)
        await self.authz.require(name, LOOKUP)
        versions = await self.store.schema_versions(name.base.full)
        return rules.latest(versions) if version is None else rules.at(versions, version)

    async def versions(self, topic: str) -> list[Stored]:
        """Every version since the last deletion, oldest first (none: an empty list)."""
        name = TopicName.parse(topic)
        await self.authz.require(name, LOOKUP)
        return rules.live(await self.store.schema_versions(name.base.full))

    async def create(self, topic: str, schema: Schema, admin: bool) -> int:
        """Pulsar's GET_OR_CREATE_SCHEMA (a producer's right) or an upload (a tenant
        admin's: isAllowAutoUpdateSchema does not apply to it)."""
        name = TopicName.parse(topic)
        if admin:
            await self.authz.require_tenant_admin(name)
        else:
            await self.authz.require(name, PRODUCE)
        policy = await self.policy(name)
        decide = rules.for_upload if admin else rules.for_producer
        verdict = await self._settle(name, lambda v: (decide(v, schema, policy), schema))
        assert verdict.version is not None
        return verdict.version

    async def delete(self, topic: str, force: bool) -> int:
        """Delete the topic's schema: a deletion version (its history kept), or, forced,
        every version (TopicNotFound when it has none)."""
        name = TopicName.parse(topic)
        await self.authz.require_tenant_admin(name)
        key = name.base.full
        if force:
            if not await self.store.schema_versions(key):
                rules.latest([])   # TopicNotFound: nothing to delete
            await self.store.delete_schemas(key)
            log.info("%s: every schema version deleted (forced)", key)
            return 0

        def deletion(versions: list[Stored]) -> tuple[Verdict, None]:
            rules.latest(versions)   # TopicNotFound when there is no schema (or it is deleted)
            return Verdict(rules.next_version(versions), add=True), None

        verdict = await self._settle(name, deletion)
        assert verdict.version is not None
        return verdict.version

    async def check(self, topic: str, schema: Schema) -> tuple[str, str | None, int | None]:
        """(the effective strategy, why an upload would be refused or None, an identical
        schema's version or None)."""
        name = TopicName.parse(topic)
        await self.authz.require(name, LOOKUP)
        policy = await self.policy(name)
        problem, version = rules.check_upload(await self.store.schema_versions(name.base.full), schema, policy)
        return policy.strategy, problem, version
