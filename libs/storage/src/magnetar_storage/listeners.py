"""The advertised-listeners table (migration 0006), shared by every service: each
process publishes its own listeners when it starts, and lookups read those of the
processes they answer with (magnetar_protocol.listeners chooses among them)."""

from __future__ import annotations

from magnetar_storage.queries import load_queries

Q = load_queries("magnetar_storage", "listeners.sql")


async def publish_listeners(pool, internal_url: str, listeners: dict[str, str]) -> None:
    """Make the table say exactly ``listeners`` for the process at ``internal_url``."""
    names, urls = list(listeners), list(listeners.values())
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(Q["forget_listeners"], internal_url, names)
        if names:
            await conn.execute(Q["publish_listeners"], internal_url, names, urls)


async def listeners_of(pool, internal_urls: list[str]) -> dict[str, dict[str, str]]:
    """internal URL -> {listener name: URL} for the processes at ``internal_urls``."""
    found: dict[str, dict[str, str]] = {url: {} for url in internal_urls}
    for row in await pool.fetch(Q["listeners_of"], list(found)):
        found[row["internal_url"]][row["listener"]] = row["url"]
    return found
