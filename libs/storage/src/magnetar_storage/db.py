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
    )
