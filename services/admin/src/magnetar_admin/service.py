"""Admin logic: metadata changes, and topic stats that combine the database with the
owning broker's live view (GET /internal/v1/topic-stats, docs/protocol.md).

Deleting a topic, a namespace with ``force`` or a subscription of an owned topic moves
the lease on first: ``topic_owners.epoch`` grows and ``broker_id`` becomes NULL, so the
owning broker's next write fails its epoch compare-and-set; then the owner is asked to
unload the topic at once (best effort: a broker that does not answer notices the lost
lease at its next heartbeat); then the rows are deleted in one transaction.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp

from magnetar_admin import stats as shapes
from magnetar_admin.settings import AdminSettings
from magnetar_admin.store import AdminStore
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.cursorstate import acked_beyond, decode_acks
from magnetar_protocol.errors import (
    AuthorizationError,
    BadRequest,
    Conflict,
    MagnetarError,
    NotOwner,
    ServiceNotReady,
    SubscriptionNotFound,
    TenantNotFound,
    TopicNotFound,
)
from magnetar_protocol.listeners import choose_pulsar_url, choose_url
from magnetar_protocol.topics import TopicName
from magnetar_protocol.wire import decode_json_error
from magnetar_runtime import tls
from magnetar_runtime.auth import Authenticator, current_role
from magnetar_runtime.rpc import RpcClient

log = logging.getLogger("magnetar.admin")


class AdminService:
    def __init__(self, store: AdminStore, settings: AdminSettings, auth: Authenticator | None = None):
        self.store = store
        self.settings = settings
        self.auth = auth or Authenticator(settings)
        self._timeout = aiohttp.ClientTimeout(total=settings.broker_request_timeout_ms / 1000)
        self.http: aiohttp.ClientSession | None = None
        # Protobuf calls to coordinators and the registry, with this service's token.
        self.rpc = RpcClient(settings.broker_request_timeout_ms / 1000, self.auth.headers())

    async def start(self) -> None:
        # https:// brokers are verified against this process's CA (magnetar_runtime.tls).
        self.http = aiohttp.ClientSession(timeout=self._timeout, headers=self.auth.headers(),
                                          connector=aiohttp.TCPConnector(ssl=tls.client_ssl() or True))

    async def stop(self) -> None:
        if self.http is not None:
            await self.http.close()
        await self.rpc.close()

    # ---------------------------------------------------------------- authorization

    async def require_tenant_admin(self, tenant: str) -> None:
        """A superuser, or one of the tenant's admin roles; else AuthorizationError (also
        for a tenant that does not exist: a non-admin learns nothing about tenants)."""
        role = current_role()
        if self.auth.roles.is_superuser(role):
            return
        try:
            admins = await self.store.tenant_roles(tenant)
        except TenantNotFound:
            admins = []
        if role not in admins:
            raise AuthorizationError(f"role {role!r} is neither a superuser nor an admin of tenant "
                                     f"{tenant!r} (its adminRoles)")

    # ---------------------------------------------------------------- brokers

    async def broker_call(self, base_url: str, path: str, topic: str,
                          method: str = "GET", params: dict | None = None) -> tuple[int | None, dict | None]:
        """One call to a broker's internal JSON API: (HTTP status or None when it did not
        answer, the JSON answer when the status is 200)."""
        try:
            async with self.http.request(method, base_url.rstrip("/") + path,
                                         params={"topic": topic} | (params or {})) as resp:
                if resp.status == 200:
                    return 200, await resp.json()
                log.info("broker %s%s?topic=%s answered HTTP %s", base_url, path, topic, resp.status)
                return resp.status, None
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            log.info("broker %s%s?topic=%s did not answer: %s", base_url, path, topic, exc)
            return None, None

    async def _live(self, owner: dict, unit: TopicName) -> dict | None:
        """The live stats of the topic from its owner; None when no live broker owns it
        or the owner did not give them."""
        if not (owner.get("alive") and owner.get("url")):
            return None
        return (await self.broker_call(owner["url"], "/internal/v1/topic-stats", unit.full))[1]

    async def _check_idle(self, owner: dict, unit: TopicName, subscription: str | None = None) -> None:
        """409 unless the topic (or one subscription of it) has no connected clients.  An
        owner that does not answer cannot vouch for that: 409 too (force skips this)."""
        if not (owner.get("alive") and owner.get("url")):
            return
        status, live = await self.broker_call(owner["url"], "/internal/v1/topic-stats", unit.full)
        if status is None:
            raise Conflict(f"broker {owner['broker_id']} ({owner['url']}) owns {unit.full} but did not "
                           "answer, so connected clients cannot be ruled out; retry, or use force=true")
        subs = (live or {}).get("subscriptions", {})
        if subscription is not None:
            consumers = len(subs.get(subscription, {}).get("consumers", []))
            if consumers:
                raise Conflict(f"subscription {subscription!r} on {unit.full} has {consumers} connected "
                               "consumer(s); close them, or delete with force=true")
            return
        consumers = sum(len(s.get("consumers", [])) for s in subs.values())
        producers = len((live or {}).get("publishers", []))
        if producers or consumers:
            raise Conflict(f"topic {unit.full} has {producers} connected producer(s) and {consumers} "
                           "consumer(s); close them, or delete with force=true")

    async def _unload(self, owners: dict[int, dict], units: dict[int, TopicName]) -> None:
        calls = [self.broker_call(o["url"], "/internal/v1/unload", units[tid].full, "POST")
                 for tid, o in owners.items() if o.get("alive") and o.get("url") and tid in units]
        await asyncio.gather(*calls)

    async def ownership(self) -> list[dict]:
        return [{"topic": r["topic"], "brokerId": r["broker_id"], "brokerUrl": r["url"],
                 "ownerEpoch": r["epoch"], "brokerAlive": r["alive"]}
                for r in await self.store.ownership()]

    # ---------------------------------------------------------------- namespaces

    async def delete_namespace(self, tenant: str, namespace: str, force: bool) -> None:
        if force:  # stop the owners first; the delete transaction fences again under lock
            units = await self.store.namespace_topics(tenant, namespace)
            if units:
                owners = await self.store.owners(list(units))
                await self.store.fence(list(units))
                await self._unload(owners, {tid: TopicName.parse(t) for tid, t in units.items()})
        await self.store.delete_namespace(tenant, namespace, force)

    # ---------------------------------------------------------------- topics

    async def create_topic(self, name: TopicName, partitions: int) -> None:
        if problem := name.creation_problem():
            raise BadRequest(problem)
        await self.store.create_topic(name, partitions)

    async def units(self, name: TopicName) -> tuple[int, list[TopicName]]:
        """(partition count, the partitions) of a partitioned topic, else (0, [name])."""
        count = await self.store.partitions(name) or 0
        return count, [name.partition(i) for i in range(count)] if count else [name]

    async def unit_id(self, unit: TopicName) -> int:
        """The topic id of a non-partitioned topic or a partition; 404 otherwise."""
        topic_id = await self.store.topic_id(unit)
        if topic_id is not None:
            return topic_id
        count = await self.store.partitions(unit)
        if count:
            raise TopicNotFound(f"{unit.full} is a partitioned topic with {count} partitions: ask "
                                f"for partitioned-stats / partitioned-internalStats, or name a "
                                f"partition such as {unit.partition(0).full}")
        raise TopicNotFound(f"topic {unit.full} does not exist")

    async def existing_ids(self, name: TopicName) -> tuple[int, dict[int, TopicName]]:
        """(partition count, {topic id: unit}) of a topic that exists; 404 otherwise."""
        count, units = await self.units(name)
        by_name = await self.store.topic_ids(units)
        if not by_name:
            raise TopicNotFound(f"topic {name.full} does not exist")
        return count, {tid: TopicName.parse(full) for full, tid in by_name.items()}

    async def delete_topic(self, name: TopicName, force: bool, partitioned: bool) -> None:
        count = await self.store.partitions(name) or 0
        if partitioned and not count:
            raise TopicNotFound(f"partitioned topic {name.full} does not exist")
        if not partitioned and count:
            raise Conflict(f"{name.full} is a partitioned topic with {count} partitions: delete it "
                           "with DELETE .../partitions (magnetar-admin topics delete does)")
        if not partitioned and name.partition_index >= 0 and await self.store.partitions(name.base):
            raise Conflict(f"{name.full} is a partition of {name.base.full}; a partition goes "
                           "only with its partitioned topic")
        wanted = [name.partition(i) for i in range(count)] if partitioned else [name]
        by_name = await self.store.topic_ids(wanted)
        if not partitioned and not by_name:
            raise TopicNotFound(f"topic {name.full} does not exist")
        units = {tid: TopicName.parse(full) for full, tid in by_name.items()}
        owners = await self.store.owners(list(units))
        if not force:
            for tid, unit in units.items():
                await self._check_idle(owners.get(tid, {}), unit)
        if units:
            await self.store.fence(list(units))
            await self._unload(owners, units)
        await self.store.delete_topic(name, wanted, partitioned)

    # ---------------------------------------------------------------- stats

    async def _subscription_rows(self, topic_id: int) -> list[dict]:
        rows = []
        for s in await self.store.subscriptions(topic_id):
            acks = decode_acks(s["acked_state"])
            md = s["mark_delete_entry"]
            sizes = await self.store.entry_sizes(topic_id, [e for e in acks if e > md])
            rows.append({"name": s["subscription"], "mark_delete": md, "acks": acks,
                         "backlog": s["backlog_messages"] - acked_beyond(md, acks, sizes),
                         "backlog_bytes": s["backlog_bytes"]})
        return rows

    async def stats(self, unit: TopicName) -> dict:
        topic_id = await self.unit_id(unit)
        owner = (await self.store.owners([topic_id])).get(topic_id, {})
        # The database first, the broker after: a broker applies an ack in memory before
        # it stores the cursor, so the live part is then at least as new as the stored
        # one (asked the other way round, a response could count an ack in the backlog
        # and still count its message as unacknowledged).
        log_row = await self.store.log_stats(topic_id)
        subscriptions = await self._subscription_rows(topic_id)
        live = await self._live(owner, unit)
        return shapes.topic_stats(log_row, subscriptions, owner, live)

    async def internal_stats(self, unit: TopicName) -> dict:
        topic_id = await self.unit_id(unit)
        owner = (await self.store.owners([topic_id])).get(topic_id, {})
        log_row = await self.store.log_stats(topic_id)
        return shapes.internal_stats(log_row, await self._subscription_rows(topic_id), owner)

    async def _partitions(self, name: TopicName) -> list[TopicName]:
        count = await self.store.partitions(name)
        if not count:
            if await self.store.topic_id(name) is not None:
                raise TopicNotFound(f"{name.full} is not a partitioned topic (it has no partitions): "
                                    "ask for its stats / internalStats")
            raise TopicNotFound(f"partitioned topic {name.full} does not exist")
        return [name.partition(i) for i in range(count)]

    async def partitioned_stats(self, name: TopicName, per_partition: bool) -> dict:
        units = await self._partitions(name)
        parts = await asyncio.gather(*(self.stats(u) for u in units))
        return shapes.partitioned_stats({u.full: p for u, p in zip(units, parts)}, len(units), per_partition)

    async def partitioned_internal_stats(self, name: TopicName) -> dict:
        units = await self._partitions(name)
        parts = await asyncio.gather(*(self.internal_stats(u) for u in units))
        return shapes.partitioned_internal_stats({u.full: p for u, p in zip(units, parts)}, len(units))

    # ---------------------------------------------------------------- subscriptions

    async def subscriptions(self, name: TopicName) -> list[str]:
        _, units = await self.existing_ids(name)
        names: set[str] = set()
        for tid in units:
            names.update(s["subscription"] for s in await self.store.subscriptions(tid))
        return sorted(names)

    async def delete_subscription(self, name: TopicName, subscription: str, force: bool) -> None:
        _, units = await self.existing_ids(name)
        owners = await self.store.owners(list(units))
        if not force:
            for tid, unit in units.items():
                await self._check_idle(owners.get(tid, {}), unit, subscription)
        deleted, fenced = await self.store.delete_subscription(list(units), subscription)
        if not deleted:
            raise SubscriptionNotFound(f"subscription {subscription!r} does not exist on {name.full}")
        await self._unload({tid: owners[tid] for tid in fenced if tid in owners}, units)

    # ---------------------------------------------------------------- storage lifecycle

    async def expire_messages(self, name: TopicName, subscription: str | None, seconds: int) -> int:
        """expire-messages on every partition of ``name``: its owner acknowledges what is
        older than ``seconds`` on ``subscription`` (every subscription for None); the
        entries expired.  404 only when no partition has the subscription."""
        params = {"seconds": seconds, "subscription": subscription}
        answers = await self.on_partitions(name, "POST", "/internal/v1/expire-messages",
                                           tolerate=SubscriptionNotFound, **params)
        found = [a for a in answers.values() if not isinstance(a, SubscriptionNotFound)]
        if not found:
            raise SubscriptionNotFound(f"subscription {subscription!r} does not exist on {name.full}")
        return sum(a["expiredEntries"] for a in found)

    # ---------------------------------------------------------------- calls to the owner

    async def _lookup(self, unit: TopicName) -> str:
        """The URL of the broker that owns the partition, an owner assigned if it had none
        (a broker's lookup does that, as a client's would)."""
        brokers = await self.store.brokers()
        if not brokers:
            raise ServiceNotReady(f"no live broker to serve {unit.full}; start one and retry")
        reply = await self.rpc.call(brokers[0]["url"], "/v1/topics/lookup", pb.LookupRequest(topic=unit.full),
                                    pb.LookupResponse)
        return reply.broker_url

    async def schema_call(self, path: str, request, response_type):
        """One of the brokers' /v1/schemas/* calls (the registry is the brokers': they
        write it; any live broker serves any topic's), made with this service's token
        after the route checked the caller."""
        brokers = await self.store.brokers()
        if not brokers:
            raise ServiceNotReady("no live broker to serve the schema registry; start one and retry")
        return await self.rpc.call(brokers[0]["url"], path, request, response_type)

    async def pulsar_lookup(self, name: TopicName, listener: str, authorization: str | None) -> dict:
        """Pulsar's HTTP lookup (LookupData): the owner's pulsar:// and http:// URLs on the
        listener the client names.  The lookup runs in a broker as the caller (its token
        forwarded), so it assigns an owner and checks the LOOKUP permission as a Pulsar
        LOOKUP does."""
        brokers = await self.store.brokers()
        if not brokers:
            raise ServiceNotReady(f"no live broker to serve {name.full}; start one and retry")
        headers = {"authorization": authorization} if authorization else None
        reply = await self.rpc.call(brokers[0]["url"], "/v1/topics/lookup", pb.LookupRequest(topic=name.full),
                                    pb.LookupResponse, headers=headers)
        found = (await self.store.listeners_of([reply.broker_url]))[reply.broker_url]
        what = f"broker {reply.broker_id}"
        pulsar_url = choose_pulsar_url(found, listener, what)
        try:
            http_url = choose_url(reply.broker_url, found, listener, what)
        except BadRequest:   # a Pulsar-only listener: its HTTP side is the internal URL
            http_url = reply.broker_url
        tls = pulsar_url.startswith("pulsar+ssl://")
        return {"brokerUrl": "" if tls else pulsar_url, "brokerUrlTls": pulsar_url if tls else "",
                "httpUrl": "" if http_url.startswith("https://") else http_url,
                "httpUrlTls": http_url if http_url.startswith("https://") else ""}

    async def _broker_json(self, url: str, method: str, path: str, params: dict) -> dict:
        query = {k: str(v) for k, v in params.items() if v is not None}
        where = f"broker {url}{path}"
        try:
            async with self.http.request(method, url.rstrip("/") + path, params=query) as resp:
                body = await resp.read()
                if resp.status == 200:
                    return await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise ServiceNotReady(f"{where} did not answer: {exc}; retry") from None
        raise decode_json_error(resp.status, body, where)

    async def on_owner(self, unit: TopicName, method: str, path: str, *, owner: dict | None = None,
                       **params) -> dict:
        """One of the owner's /internal/v1 operations on a partition.  ``owner``: its
        ownership row when the caller has it (a live owner is called without a lookup);
        else, and again when the partition moved or its owner did not answer, a lookup
        finds (or assigns) the owner."""
        url = owner["url"] if owner and owner.get("alive") and owner.get("url") else None
        for attempt in range(3):
            url = url or await self._lookup(unit)
            try:
                return await self._broker_json(url, method, path, {"topic": unit.full, **params})
            except (NotOwner, ServiceNotReady):
                if attempt == 2:
                    raise
                url = None
        raise AssertionError("unreachable")

    async def on_partitions(self, name: TopicName, method: str, path: str, *, check_subscription: bool = False,
                            tolerate: type[MagnetarError] | None = None, **params) -> dict[str, dict]:
        """The operation on every partition of the topic (the topic itself when it is not
        partitioned): {partition name: answer}.  404 when the topic does not exist, or,
        with ``check_subscription``, when none of its partitions has ``subscription``.  A
        partition's ``tolerate`` error is its answer; any other error is raised."""
        _, units = await self.existing_ids(name)
        if check_subscription and not await self.store.subscription_topics(list(units), params["subscription"]):
            raise SubscriptionNotFound(f"subscription {params['subscription']!r} does not exist on {name.full}")
        owners = await self.store.owners(list(units))
        answers = await asyncio.gather(*(self.on_owner(u, method, path, owner=owners.get(tid), **params)
                                         for tid, u in units.items()), return_exceptions=True)
        for answer in answers:
            if isinstance(answer, BaseException) and not (tolerate and isinstance(answer, tolerate)):
                raise answer
        return {u.full: a for u, a in zip(units.values(), answers)}

    async def grow_partitions(self, name: TopicName, partitions: int) -> int:
        """Raise the partition count; the topic's durable subscriptions are created on the
        new partitions too, from their start (as Pulsar's updatePartitionedTopic does), so
        a consumer of the topic misses nothing sent to them.  The count it had."""
        old_units = [name.partition(i) for i in range((await self.store.partitions(name)) or 0)]
        old_ids = list((await self.store.topic_ids(old_units)).values())
        names = sorted({s["subscription"] for tid in old_ids for s in await self.store.subscriptions(tid)})
        before = await self.store.grow_partitions(name, partitions)
        for unit in (name.partition(i) for i in range(before, partitions)):
            for sub in names:
                try:
                    await self.on_owner(unit, "POST", "/internal/v1/subscription/create", subscription=sub,
                                        entryId=-1)
                except Conflict:
                    pass  # a consumer subscribed there first
        return before

    async def unload(self, name: TopicName) -> dict[str, str | None]:
        """Hand every partition to another live broker: {partition: the new owner, or None
        when no other broker was live (released: the next lookup assigns one)}."""
        _, units = await self.existing_ids(name)
        owners = await self.store.owners(list(units))
        out: dict[str, str | None] = {}
        for tid, unit in units.items():
            owner = owners.get(tid, {})
            if not (owner.get("alive") and owner.get("url")):
                out[unit.full] = None  # nobody serves it: nothing to hand over
                continue
            answer = await self._broker_json(owner["url"], "POST", "/internal/v1/hand-over", {"topic": unit.full})
            out[unit.full] = answer.get("brokerId")
        return out
