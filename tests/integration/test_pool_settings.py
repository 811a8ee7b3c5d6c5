"""Every service's pool sets the planner up for keyed lookups (magnetar_storage.db): the
settings reach each connection, and a registration-shaped lookup then probes the primary
key instead of scanning the table."""

from __future__ import annotations

import asyncio

from magnetar_storage.db import SESSION_SETTINGS, create_pool


def test_pool_connections_carry_the_session_settings(database_url):
    async def check():
        pool = await create_pool(database_url, max_size=2)
        try:
            async with pool.acquire() as conn:
                for name, value in SESSION_SETTINGS.items():
                    assert await conn.fetchval(f"SHOW {name}") == value
                await conn.execute(
                    "INSERT INTO coordinators (coordinator_id, instance, fence_epoch, url) "
                    "VALUES (0, 'i', 1, 'u')")
                await conn.execute(
                    "INSERT INTO transactions (coordinator_id, txn_id, status, timeout_ms, "
                    "deadline_at) SELECT 0, g, 2, 1000, now() FROM generate_series(1, 1000) g")
                await conn.execute("ANALYZE transactions")
                # The plan a service's prepared statement gets (generic: no array size known).
                await conn.execute(
                    "PREPARE lookup (bigint[]) AS SELECT t.status FROM unnest($1) AS r (id) "
                    "LEFT JOIN transactions t ON t.coordinator_id = 0 AND t.txn_id = r.id")
                plan = "\n".join(r[0] for r in await conn.fetch(
                    "EXPLAIN EXECUTE lookup('{1,2,3}')"))
                assert "transactions_pkey" in plan and "Seq Scan on transactions" not in plan
        finally:
            await pool.close()

    asyncio.run(check())
