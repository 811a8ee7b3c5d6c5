"""Forward-only SQL migrations, applied by ``magnetar-migrate``.

Safe to run twice and concurrently: a session advisory lock serializes runners, and
each file is applied in its own transaction together with its row in
``magnetar_migrations``, so a crash leaves every file either fully applied or not.

The command waits for PostgreSQL (``MAGNETAR_DATABASE_WAIT_S``, default 120 s) with one
log line per attempt, so an init container started before the database logs why it
waits instead of crash-looping; nothing it prints carries the password.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from importlib import resources

import asyncpg

from magnetar_storage.db import DatabaseUnavailable, connect_when_ready, explain
from magnetar_storage.dsn import redact
from magnetar_storage.queries import substitute

log = logging.getLogger("magnetar.migrate")

# Any fixed 64-bit number; shared by every magnetar-migrate process.
_LOCK_KEY = 0x6D61676E6574_01

_BOOKKEEPING = """
CREATE TABLE IF NOT EXISTS magnetar_migrations (
    version     text PRIMARY KEY,
    applied_at  timestamptz NOT NULL DEFAULT now()
)
"""


def migration_files() -> list[tuple[str, str]]:
    """(version, sql) for every migration, in order; shared codes written by name
    (``{TXN_OPEN}``) are replaced by their values, as in queries (queries.substitute)."""
    folder = resources.files("magnetar_storage") / "migrations"
    names = sorted(p.name for p in folder.iterdir() if p.name.endswith(".sql"))
    return [(n.removesuffix(".sql"), substitute((folder / n).read_text())) for n in names]


DEFAULT_WAIT_S = 120.0


async def migrate(database_url: str, wait_s: float = 0.0) -> list[str]:
    """Apply every pending migration; return the versions applied by this call.
    ``wait_s``: how long to wait for PostgreSQL to accept connections (0: one try)."""
    conn = await connect_when_ready(database_url, wait_s)
    try:
        await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
        try:
            await conn.execute(_BOOKKEEPING)
            done = {r["version"] for r in await conn.fetch("SELECT version FROM magnetar_migrations")}
            applied = []
            for version, sql in migration_files():
                if version in done:
                    continue
                async with conn.transaction():
                    await conn.execute(sql)
                    await conn.execute(
                        "INSERT INTO magnetar_migrations (version) VALUES ($1)", version
                    )
                log.info("applied migration %s", version)
                applied.append(version)
            return applied
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
    finally:
        await conn.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="magnetar-migrate", description="Apply Magnetar's schema migrations."
    )
    parser.add_argument(
        "--database-url",
        default=os.environ.get("MAGNETAR_DATABASE_URL"),
        help="PostgreSQL URL (default: $MAGNETAR_DATABASE_URL)",
    )
    parser.add_argument(
        "--wait-s",
        type=_seconds,
        default=os.environ.get("MAGNETAR_DATABASE_WAIT_S", DEFAULT_WAIT_S),
        help="seconds to wait for PostgreSQL to accept connections, retrying "
        f"(default: $MAGNETAR_DATABASE_WAIT_S, else {DEFAULT_WAIT_S:g}; 0: one try)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    if not args.database_url:
        print(
            "magnetar-migrate: no database given; set MAGNETAR_DATABASE_URL or pass "
            "--database-url postgresql://user@host:port/db",
            file=sys.stderr,
        )
        return 2
    log.info("migrating %s (waiting up to %g s for it)", redact(args.database_url), args.wait_s)
    try:
        applied = asyncio.run(migrate(args.database_url, args.wait_s))
    except DatabaseUnavailable as exc:
        print(f"magnetar-migrate: cannot migrate: {exc}", file=sys.stderr)
        return 1
    except (OSError, asyncpg.PostgresError) as exc:  # lost mid-way, or a migration failed
        print(f"magnetar-migrate: cannot migrate {explain(exc, args.database_url)}", file=sys.stderr)
        return 1
    print(f"magnetar-migrate: {len(applied)} migration(s) applied, schema is current")
    return 0


def _seconds(text: str | float) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value <= 86400:
        raise argparse.ArgumentTypeError(f"must be between 0 and 86400 seconds, got {text!r}")
    return value


if __name__ == "__main__":
    sys.exit(main())
