"""Connection pools, set up the same way by every service."""

from __future__ import annotations

import asyncpg


# Every hot statement is a keyed lookup or write over arrays (one per group commit), so:
# - random_page_cost 1.1: the working set is in memory (or on SSD), so an index probe is
#   not 4x a sequential page; at 4 the planner picked a hash join over a whole
#   `transactions` scan for a 3-row lookup.
# - force_generic_plan: the automatic choice kept re-planning the registration statements
#   on every call (0.3 ms of planning each, as much as their execution); one generic plan
#   per connection, made again after each ANALYZE, is as good for keyed lookups.
# bench/txn.py (c): +10-15% transactions per second with both (docs/performance.md).
SESSION_SETTINGS = {"random_page_cost": "1.1", "plan_cache_mode": "force_generic_plan"}


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
        server_settings=SESSION_SETTINGS,
    )


async def _rollback_if_in_transaction(conn: asyncpg.Connection) -> None:
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")
