"""Who may look up, produce to and consume from a topic on this broker (the rules:
magnetar_runtime.permissions).  Checked when a producer or consumer is created, at
lookup and at unsubscribe, never per send: the hot path pays nothing.

Policies are cached per topic for ``auth_policy_cache_ms`` (Pulsar caches policies
too), so a revoke takes effect on new producers and consumers within that delay; ones
already created keep working until they close (as in Pulsar, which re-checks only on a
policy change notification).
"""

from __future__ import annotations

import json
import time

from magnetar_broker.store import BrokerStore
from magnetar_protocol.errors import AuthorizationError
from magnetar_protocol.topics import TopicName
from magnetar_runtime import permissions
from magnetar_runtime.auth import current_role
from magnetar_runtime.roles import Roles

MAX_CACHED_TOPICS = 10000  # bound memory against a client looking up endless names


class Authorizer:
    def __init__(self, store: BrokerStore, roles: Roles, cache_s: float):
        self.store = store
        self.roles = roles
        self.cache_s = cache_s
        self._cache: dict[str, tuple[float, permissions.Policies]] = {}

    async def policies(self, name: TopicName) -> permissions.Policies:
        topic = name.base.full  # a partitioned topic's grants cover its partitions
        now = time.monotonic()
        hit = self._cache.get(topic)
        if hit is not None and now - hit[0] < self.cache_s:
            return hit[1]
        admins, ns_grants, topic_grants, sub_roles = await self.store.auth_policies(
            name.tenant, name.namespace, topic)
        found = permissions.Policies(
            frozenset(admins), permissions.as_grants(json.loads(ns_grants)),
            permissions.as_grants(json.loads(topic_grants)),
            permissions.as_grants(json.loads(sub_roles)))
        if len(self._cache) >= MAX_CACHED_TOPICS:
            self._cache.clear()
        self._cache[topic] = (now, found)
        return found

    async def require(self, name: TopicName, action: str, subscription: str | None = None) -> str:
        """Raise AuthorizationError unless the request's role may do ``action`` on
        ``name``; answer the role.  Free for a superuser (everyone with auth off)."""
        role = current_role()
        if self.roles.is_superuser(role):
            return role
        if not permissions.allowed(await self.policies(name), role, False, action, subscription):
            raise AuthorizationError(permissions.refusal(role, action, name.full, subscription,
                                                         name.namespace_name))
        return role

    async def require_tenant_admin(self, name: TopicName) -> str:
        """Raise AuthorizationError unless the request's role is a superuser or an admin
        of ``name``'s tenant (who may upload and delete schemas, as Pulsar's admin routes
        ask); answer the role."""
        role = current_role()
        if self.roles.is_superuser(role) or permissions.is_tenant_admin(await self.policies(name), role):
            return role
        raise AuthorizationError(f"role {role!r} is neither a superuser nor an admin of tenant {name.tenant!r}")
