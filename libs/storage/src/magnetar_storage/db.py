"""Connection pools, set up the same way by every service."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import asyncpg

from magnetar_storage.dsn import redact, redact_text

log = logging.getLogger("magnetar.db")

# Failures that end once PostgreSQL is up: nothing listening yet, a name not yet in DNS,
# "the database system is starting up", no free connection slot.  A refused password or
# a missing database is permanent and fails at once.
TRANSIENT_CONNECT_ERRORS = (OSError, asyncio.TimeoutError, asyncpg.CannotConnectNowError,
                            asyncpg.TooManyConnectionsError)


# One attempt's limit (a server that accepts TCP but never answers); a last attempt may
# run this far past the wait.  Not shorter: a loaded machine's first connect can take a
# few seconds, and with no wait (one try) it is the only one.
CONNECT_TIMEOUT_S = 10.0


class DatabaseUnavailable(RuntimeError):
    """PostgreSQL could not be reached or refused us; the message names the server (the
    password masked) and the fix."""


def explain(exc: BaseException, database_url: str) -> str:
    """One line on why a connection failed, without the password, with a hint."""
    reason = redact_text(str(exc) or type(exc).__name__, database_url)
    where = redact(database_url)
    if isinstance(exc, asyncpg.InvalidPasswordError):
        return (f"{where}: {reason} — the password (in the URL or PGPASSWORD) is not the "
                f"server's (reinstalled over a kept volume? see docs/kubernetes.md, "
                f"'Reinstalling over kept data')")
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        return f"{where}: {reason} — create the database or fix the URL's database name"
    return f"{where}: {reason}"


def retry_delay(attempt: int) -> float:
    """Seconds before the next attempt: 0.5, 1, 2, 4, then every 5."""
    return min(5.0, 0.5 * 2 ** (attempt - 1))


async def connect_when_ready(
    database_url: str,
    wait_s: float,
    *,
    connect: Callable[..., Awaitable[asyncpg.Connection]] = asyncpg.connect,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> asyncpg.Connection:
    """A connection, retrying transient failures for up to ``wait_s`` seconds (0: one
    try; the last attempt may take CONNECT_TIMEOUT_S more) with one log line per failed
    attempt; then ``DatabaseUnavailable``."""
    start = clock()
    attempt = 0
    while True:
        attempt += 1
        try:
            return await connect(database_url, timeout=CONNECT_TIMEOUT_S)
        except TRANSIENT_CONNECT_ERRORS as exc:
            elapsed = clock() - start
            if elapsed + retry_delay(attempt) > wait_s:
                raise DatabaseUnavailable(
                    f"PostgreSQL not reachable after {attempt} attempt(s) in {elapsed:.0f} s "
                    f"(MAGNETAR_DATABASE_WAIT_S={wait_s:g}): {explain(exc, database_url)}"
                ) from None
            log.warning("waiting for PostgreSQL (attempt %d, %.0f s of %g s): %s",
                        attempt, elapsed, wait_s, explain(exc, database_url))
            await sleep(retry_delay(attempt))
        except (asyncpg.PostgresError, ValueError) as exc:
            raise DatabaseUnavailable(
                f"PostgreSQL refused the connection: {explain(exc, database_url)}") from None


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
    try:
        return await _create_pool(database_url, min_size=min_size, max_size=max_size)
    except (*TRANSIENT_CONNECT_ERRORS, asyncpg.PostgresError, ValueError) as exc:
        # asyncpg's own messages may quote the URL's parts: never the password.
        raise DatabaseUnavailable(f"cannot open a connection pool to {explain(exc, database_url)}") from None


async def _create_pool(database_url: str, *, min_size: int, max_size: int) -> asyncpg.Pool:
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
