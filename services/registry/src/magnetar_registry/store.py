"""The registry's database access.  SQL text lives in queries.sql."""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from magnetar_storage.queries import load_queries

Q = load_queries("magnetar_registry")


@dataclass(frozen=True)
class Binding:
    epoch: int
    coordinator_id: int


class RegistryStore:
    def __init__(self, pool: asyncpg.Pool, instance: str):
        self.pool = pool
        self.instance = instance

    async def heartbeat(self, url: str) -> None:
        await self.pool.execute(Q["heartbeat"], self.instance, url)

    async def deregister(self) -> None:
        await self.pool.execute(Q["deregister"], self.instance)

    async def live_coordinators(self, ttl_s: float) -> tuple[dict[int, str], list[int]]:
        """(every live TCID -> the URL answering for it, the TCIDs served by their own
        process: the ones keys are bound to)."""
        rows = await self.pool.fetch(Q["live_coordinators"], ttl_s)
        return {r[0]: r[1] for r in rows}, [r[0] for r in rows if r[2]]

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

    async def get_key(self, owner: str, key: str) -> tuple[int, bool] | None:
        row = await self.pool.fetchrow(Q["get_key"], owner, key)
        return (row["epoch"], row["deleted"]) if row else None

    async def delete_key(self, owner: str, key: str) -> int | None:
        """Tombstone the key (epoch + 1); None when there is no such live key."""
        return await self.pool.fetchval(Q["delete_key"], owner, key)

    async def unfinished_older(self, owner: str, key: str, epoch: int) -> list[tuple[int, int, int]]:
        return [(r[0], r[1], r[2])
                for r in await self.pool.fetch(Q["unfinished_older"], owner, key, epoch)]

    async def key_count(self) -> int:
        return await self.pool.fetchval(Q["key_count"])

    async def recent_keys(self, limit: int) -> list[tuple[str, str, int, float]]:
        return [(r[0], r[1], r[2], float(r[3])) for r in await self.pool.fetch(Q["recent_keys"], limit)]
