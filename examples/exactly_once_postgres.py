"""A billing service, exactly once into its own PostgreSQL (docs/exactly-once-postgres.md):
it consumes orders, adds each to its account's balance row and emits a balance event,
all in ONE SQL transaction on its own connection, with no outbox table and no dual write.

    # PG: the PostgreSQL URL `make run` prints (its port is chosen per data directory),
    # e.g. postgresql://magnetar@127.0.0.1:26102/magnetar
    # once, as the owner of Magnetar's schema (the role magnetar-migrate ran as):
    .venv/bin/python examples/exactly_once_postgres.py setup --database-url "$PG" --app-role billing_app
    # some orders, then the service (as its own, unprivileged database role):
    .venv/bin/python examples/exactly_once_postgres.py produce --count 10
    .venv/bin/python examples/exactly_once_postgres.py run \\
        --database-url "${PG/magnetar@/billing_app@}"

Kill `run` at any moment and start it again: no order is added twice or lost, and each
balance event is emitted once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os

import asyncpg

import magnetar
import magnetar.asyncio as aio
import magnetar.pg


async def setup(args: argparse.Namespace) -> None:
    """The application's table, its database role, and the role's mapping to a Magnetar
    role (`anonymous` with authentication off: trusted)."""
    conn = await asyncpg.connect(args.database_url)
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", args.app_role):
            await conn.execute(f'CREATE ROLE "{args.app_role}" LOGIN')
        await conn.execute("CREATE TABLE IF NOT EXISTS balances "
                           "(account text PRIMARY KEY, amount bigint NOT NULL)")
        await conn.execute(f'GRANT SELECT, INSERT, UPDATE ON balances TO "{args.app_role}"')
        await conn.execute("SELECT magnetar_app.grant_app_role($1, $2, $3)", args.app_role,
                           args.magnetar_role, args.magnetar_role == "anonymous")
    finally:
        await conn.close()
    print(f"database role {args.app_role} may commit as Magnetar role {args.magnetar_role}")


async def produce(args: argparse.Namespace) -> None:
    client = aio.Client(args.service_url)
    try:
        producer = await client.create_producer(args.orders)
        for i in range(args.count):
            order = {"id": f"order-{i}", "account": f"customer-{i % 3}", "amount": 10 + i}
            await producer.send(json.dumps(order).encode(), partition_key=order["account"])
        print(f"sent {args.count} orders")
    finally:
        await client.close()


async def run(args: argparse.Namespace) -> None:
    client = aio.Client(args.service_url)
    conn = None
    handled = 0
    try:
        consumer = await client.subscribe(args.orders, "billing",
                                          consumer_type=magnetar.ConsumerType.Shared,
                                          initial_position=magnetar.InitialPosition.Earliest)
        conn = await asyncpg.connect(args.database_url)
        while args.stop_after is None or handled < args.stop_after:
            msg = await consumer.receive()
            order = json.loads(msg.data())
            async with magnetar.pg.transaction(conn, client) as tx:
                balance = await conn.fetchval(
                    "INSERT INTO balances VALUES ($1, $2) ON CONFLICT (account) DO UPDATE "
                    "SET amount = balances.amount + excluded.amount RETURNING amount",
                    order["account"], order["amount"])
                await tx.acknowledge(msg)
                event = {"order": order["id"], "account": order["account"], "balance": balance}
                await tx.send(args.events, json.dumps(event).encode(), partition_key=order["account"])
            handled += 1
            print(f"{order['id']}: {order['account']} balance {balance}", flush=True)
    finally:
        if conn is not None:
            await conn.close()
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("setup", "produce", "run"):
        cmd = sub.add_parser(name)
        cmd.add_argument("--service-url", default="http://localhost:8080")
        cmd.add_argument("--database-url", default=os.environ.get("MAGNETAR_DATABASE_URL"),
                         help="the PostgreSQL URL `make run` prints (default: $MAGNETAR_DATABASE_URL)")
        cmd.add_argument("--orders", default="orders")
        cmd.add_argument("--events", default="balance-events")
    sub.choices["setup"].add_argument("--app-role", default="billing_app")
    sub.choices["setup"].add_argument("--magnetar-role", default="anonymous")
    sub.choices["produce"].add_argument("--count", type=int, default=10)
    sub.choices["run"].add_argument("--stop-after", type=int, default=None)
    args = parser.parse_args()
    if args.command != "produce" and not args.database_url:
        parser.error("--database-url is required: the PostgreSQL URL `make run` prints")
    asyncio.run({"setup": setup, "produce": produce, "run": run}[args.command](args))


if __name__ == "__main__":
    main()
