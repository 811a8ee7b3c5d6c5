"""Admin logic: metadata changes, and topic stats that combine the database with the
owning broker's live view."""

from __future__ import annotations

import logging

import aiohttp

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import BadRequest, Conflict, SubscriptionNotFound, TopicNotFound
from magnetar_protocol.topics import TopicName, validate_name_part

from magnetar_admin.store import AdminStore

log = logging.getLogger("magnetar.admin")


def _individually_acked(state: bytes) -> list[str]:
    out = []
    for e in pb.CursorState.FromString(bytes(state)).entries:
        if not e.acked_bitset:
            out.append(f"{e.entry_id}:*")
        else:
            mask = int.from_bytes(e.acked_bitset, "little")
            out += [f"{e.entry_id}:{i}" for i in range(mask.bit_length()) if mask >> i & 1]
    return out


class AdminService:
    def __init__(self, store: AdminStore, timeout_s: float):
        self.store = store
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.http: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        self.http = aiohttp.ClientSession(timeout=self._timeout)

    async def stop(self) -> None:
        if self.http:
            await self.http.close()

    async def broker_json(self, base: str, path: str, method: str = "GET", **params) -> dict | None:
        """Best effort: a broker that does not answer yields None (stats fall back to the DB)."""
        try:
            async with self.http.request(method, base.rstrip("/") + path, params=params) as resp:
                return await resp.json() if resp.status == 200 else None
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            log.info("broker %s%s did not answer: %s", base, path, exc)
            return None

    # ---------------------------------------------------------------- topics

    async def create_topic(self, name: TopicName, partitions: int) -> None:
        if name.partition_index >= 0:
            raise BadRequest(f"{name.full} names a partition; create the partitioned topic instead")
        if partitions < 0:
            raise BadRequest("the partition count must be a positive integer")
        await self.store.create_topic(name, partitions)

    async def units(self, name: TopicName) -> list[TopicName]:
        """The partitions of a partitioned topic, or the topic itself."""
        count = await self.store.partitions(name)
        return [name.partition(i) for i in range(count)] if count else [name]

    async def delete_topic(self, name: TopicName, force: bool) -> None:
        count = await self.store.partitions(name)
        units = [name.partition(i) for i in range(count)] if count else [name]
        ids = []
        for unit in units:
            try:
                ids.append(await self.store.topic_id(unit))
            except TopicNotFound:
                if not count:
                    raise
        for topic_id, unit in zip(ids, units):
            owner = await self.store.owner(topic_id)
            live = await self.broker_json(owner["url"], "/internal/v1/topic-stats", topic=unit.full) \
                if owner.get("alive") else None
            if live and (live["publishers"] or any(s["consumers"] for s in live["subscriptions"].values())) \
                    and not force:
                raise Conflict(f"topic {unit.full} has connected producers or consumers; pass force=true")
            # Fence first: the owner's next write fails its epoch check, so nothing is
            # written after the rows are gone.  Then ask it to let go at once.
            await self.store.fence_topic(topic_id)
            if owner.get("alive"):
                await self.broker_json(owner["url"], "/internal/v1/unload", method="POST", topic=unit.full)
        await self.store.delete_topic_rows(ids, name if count else None)

    async def internal_stats(self, unit: TopicName) -> dict:
        topic_id = await self.store.topic_id(unit)
        log_stats = await self.store.log_stats(topic_id)
        owner = await self.store.owner(topic_id)
        last = log_stats["last_entry"]
        return {
            "entriesAddedCounter": log_stats["entries"],
            "numberOfEntries": log_stats["entries"],
            "numberOfMessages": log_stats["messages"],
            "totalSize": log_stats["bytes"],
            "lastConfirmedEntry": f"{last}:-1" if last is not None else "-1:-1",
            "ownerBroker": owner.get("broker_id"),
            "ownerEpoch": owner.get("epoch"),
            "topicEpoch": owner.get("topic_epoch"),
            "cursors": {
                s["subscription"]: {
                    "markDeletePosition": f"{s['mark_delete_entry']}:-1",
                    "individuallyDeletedMessages": _individually_acked(s["acked_state"]),
                    "messagesConsumedCounter": None,
                }
                for s in await self.store.subscriptions(topic_id)
            },
        }

    async def stats(self, unit: TopicName) -> dict:
        topic_id = await self.store.topic_id(unit)
        owner = await self.store.owner(topic_id)
        live = await self.broker_json(owner["url"], "/internal/v1/topic-stats", topic=unit.full) \
            if owner.get("alive") else None
        live = live or {}
        log_stats = await self.store.log_stats(topic_id)
        subs = {}
        for s in await self.store.subscriptions(topic_id):
            live_sub = live.get("subscriptions", {}).get(s["subscription"], {})
            subs[s["subscription"]] = {
                "type": live_sub.get("type", "None"),
                "msgBacklog": s["backlog"],
                "unackedMessages": live_sub.get("unackedMessages", 0),
                "consumers": live_sub.get("consumers", []),
                "pendingAckedMessages": live_sub.get("pendingAckedMessages", 0),
            }
        for name, live_sub in live.get("subscriptions", {}).items():
            subs.setdefault(name, {"type": live_sub["type"], "msgBacklog": live_sub.get("backlogEntries", 0),
                                   "unackedMessages": live_sub.get("unackedMessages", 0),
                                   "consumers": live_sub.get("consumers", []), "durable": False})
        return {
            "msgRateIn": 0.0, "msgRateOut": 0.0,
            "msgInCounter": live.get("msgInCounter", 0),
            "bytesInCounter": live.get("bytesInCounter", 0),
            "msgOutCounter": live.get("msgOutCounter", 0),
            "storageSize": log_stats["bytes"],
            "numberOfMessages": log_stats["messages"],
            "publishers": live.get("publishers", []),
            "subscriptions": subs,
            "accessMode": live.get("accessMode", "Shared"),
            "exclusiveProducer": live.get("exclusiveProducer"),
            "topicEpoch": live.get("topicEpoch", owner.get("topic_epoch")),
            "waitingProducers": live.get("waitingProducers", []),
            "deduplicationEnabled": live.get("deduplicationEnabled"),
            "ownerBroker": owner.get("broker_id"),
        }

    async def partitioned_stats(self, name: TopicName) -> dict:
        count = await self.store.partitions(name)
        if not count:
            raise TopicNotFound(f"{name.full} is not a partitioned topic")
        parts = {u.full: await self.stats(u) for u in await self.units(name)}
        total = {k: sum(p[k] for p in parts.values())
                 for k in ("msgInCounter", "bytesInCounter", "msgOutCounter", "storageSize", "numberOfMessages")}
        return {"metadata": {"partitions": count}, **total, "partitions": parts}

    async def delete_subscription(self, unit: TopicName, subscription: str) -> None:
        validate_name_part("subscription", subscription)
        topic_id = await self.store.topic_id(unit)
        if not await self.store.delete_subscription(topic_id, subscription):
            raise SubscriptionNotFound(f"subscription {subscription!r} does not exist on {unit.full}")
