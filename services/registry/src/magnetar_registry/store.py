"""The registry's database access.  SQL text lives in queries.sql."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import asyncpg

from magnetar_storage.queries import load_queries

Q = load_queries("magnetar_registry")


@dataclass(frozen=True)
class Binding:
    epoch: int
    coordinator_id: int


class LiveCoordinators(NamedTuple):
    urls: dict[int, str]  # every live TCID -> the URL answering for it
    bindable: list[int]   # the TCIDs served by their own process: the ones keys are bound to


class StoredKey(NamedTuple):
    epoch: int
    deleted: bool


class UnfinishedTxn(NamedTuple):
    coordinator_id: int
    txn_id: int
    status: int


class KeyActivity(NamedTuple):
    owner: str
    transaction_key: str
    epoch: int
    idle_s: float


class RegistryStore:
    def __init__(self, pool: asyncpg.Pool, instance: str):
        self.pool = pool
        self.instance = instance

    async def heartbeat(self, url: str) -> None:
        await self.pool.execute(Q["heartbeat"], self.instance, url)

    async def deregister(self) -> None:
        await self.pool.execute(Q["deregister"], self.instance)

    async def live_coordinators(self, ttl_s: float) -> LiveCoordinators:
        rows = await self.pool.fetch(Q["live_coordinators"], ttl_s)
        return LiveCoordinators({r["coordinator_id"]: r["url"] for r in rows},
                                [r["coordinator_id"] for r in rows if r["own"]])

    async def connect_new(self, owner: str, key: str, rebind_to: int,
                          bindable: list[int]) -> Binding:
        """Bump the epoch; a key bound to a TCID outside ``bindable`` moves to ``rebind_to``."""
        row = await self.pool.fetchrow(Q["connect_new"], owner, key, rebind_to, bindable)
        return Binding(row["epoch"], row["coordinator_id"])

    async def connect_resume(self, owner: str, key: str, epoch: int, rebind_to: int,
                             bindable: list[int]) -> Binding | None:
        row = await self.pool.fetchrow(Q["connect_resume"], owner, key, epoch, rebind_to,
                                       bindable)
        return Binding(row["epoch"], row["coordinator_id"]) if row else None

    async def get_key(self, owner: str, key: str) -> StoredKey | None:
        row = await self.pool.fetchrow(Q["get_key"], owner, key)
        return StoredKey(row["epoch"], row["deleted"]) if row else None

    async def delete_key(self, owner: str, key: str) -> int | None:
        """Tombstone the key (epoch + 1); None when there is no such live key."""
        return await self.pool.fetchval(Q["delete_key"], owner, key)

    async def unfinished_older(self, owner: str, key: str, epoch: int) -> list[UnfinishedTxn]:
        """The key's transactions opened under an older epoch and not yet ended."""
        return [UnfinishedTxn(r["coordinator_id"], r["txn_id"], r["status"])
                for r in await self.pool.fetch(Q["unfinished_older"], owner, key, epoch)]

    async def key_count(self) -> int:
        return await self.pool.fetchval(Q["key_count"])

    async def recent_keys(self, limit: int) -> list[KeyActivity]:
        return [KeyActivity(r["owner"], r["transaction_key"], r["epoch"], float(r["idle_s"]))
                for r in await self.pool.fetch(Q["recent_keys"], limit)]
