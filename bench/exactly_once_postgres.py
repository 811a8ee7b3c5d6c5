"""What exactly-once into your own PostgreSQL costs (docs/exactly-once-postgres.md): messages
per second of a consumer that updates one balance row per message,

- `dual`: the unsafe dual write: its own SQL commit, then a plain ack (the ceiling here);
- `inbox`: `magnetar.pg`: the row, the ack and the commit decision in one SQL transaction,
  one message per block;
- `inbox x10`: the same with ten messages per block, acknowledged concurrently (the
  remedy for high rates);

alternating rounds in one run on one fsync-on PostgreSQL (the machine is shared and
noisy: a ratio against `dual` within the run, never a figure against another day's).
`db only` is the database alone (the UPDATE and COMMIT, no messaging): the floor of
`dual`'s cost.

    .venv/bin/python bench/exactly_once_postgres.py [--messages 1000] [--rounds 2] [--deployment separate]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import asyncpg  # noqa: E402
from _common import bench_cluster, durable_postgres, report  # noqa: E402

import magnetar  # noqa: E402
import magnetar.asyncio as aio  # noqa: E402
import magnetar.pg  # noqa: E402

ROLE = "bench_app"
UPDATE = "UPDATE balances SET amount = amount + 1 WHERE account = $1"


async def setup(url: str) -> str:
    conn = await asyncpg.connect(url)
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", ROLE):
            await conn.execute(f"CREATE ROLE {ROLE} LOGIN")
        await conn.execute("CREATE TABLE balances (account text PRIMARY KEY, amount bigint NOT NULL)")
        await conn.execute("INSERT INTO balances SELECT 'a' || i, 0 FROM generate_series(0, 99) i")
        await conn.execute(f"GRANT USAGE ON SCHEMA public TO {ROLE}")  # bench_cluster re-created it
        await conn.execute(f"GRANT SELECT, UPDATE ON balances TO {ROLE}")
        await conn.execute("SELECT magnetar_app.grant_app_role($1, 'anonymous', true)", ROLE)
    finally:
        await conn.close()
    return url.replace("://magnetar@", f"://{ROLE}@", 1)


async def one_round(service_url: str, app_url: str, mode: str, messages: int, topic: str) -> float:
    client = aio.Client(service_url)
    conn = await asyncpg.connect(app_url)
    try:
        if mode == "db only":
            started = time.perf_counter()
            for i in range(messages):
                async with conn.transaction():
                    await conn.execute(UPDATE, f"a{i % 100}")
            return messages / (time.perf_counter() - started)
        producer = await client.create_producer(topic, batching_max_messages=1000)
        await asyncio.gather(*(producer.send(b"a%d" % (i % 100)) for i in range(messages)))
        consumer = await client.subscribe(topic, "bench", consumer_type=magnetar.ConsumerType.Shared,
                                          initial_position=magnetar.InitialPosition.Earliest)
        per_block = 10 if mode == "inbox x10" else 1
        started = time.perf_counter()
        for _ in range(0, messages, per_block):
            batch = [await consumer.receive(timeout_millis=30000) for _ in range(per_block)]
            if mode == "dual":
                async with conn.transaction():
                    await conn.execute(UPDATE, batch[0].data().decode())
                await consumer.acknowledge(batch[0])  # a crash just before: applied twice
            else:
                async with magnetar.pg.transaction(conn, client) as tx:
                    for msg in batch:
                        await conn.execute(UPDATE, msg.data().decode())
                    # Concurrent acks of one block share the broker's round trips.
                    await asyncio.gather(*(tx.acknowledge(msg) for msg in batch))
        return messages / (time.perf_counter() - started)
    finally:
        await conn.close()
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--deployment", choices=["hosted", "separate"], default="hosted",
                        help="coordinator hosted by the broker (one-phase ends) or its own process")
    args = parser.parse_args()
    modes = ["db only", "dual", "inbox", "inbox x10"]
    rates: dict[str, list[float]] = {m: [] for m in modes}
    with durable_postgres() as url, bench_cluster(
            url, brokers=1, coordinators=int(args.deployment == "separate"),
            coordinator_in_broker=args.deployment == "hosted") as cluster:
        app_url = asyncio.run(setup(url))
        for r in range(args.rounds):
            for mode in modes if r % 2 == 0 else reversed(modes):  # alternate the order
                topic = f"orders-{mode.replace(' ', '-')}-{r}"
                rate = asyncio.run(one_round(cluster.service_url, app_url, mode, args.messages, topic))
                rates[mode].append(rate)
                print(f"round {r} {mode:<10} {rate:8.0f} msg/s", flush=True)
    dual = statistics.median(rates["dual"])
    figures = {f"{m} msg/s (median)": round(statistics.median(v)) for m, v in rates.items()}
    figures |= {f"{m} / dual": round(statistics.median(v) / dual, 2) for m, v in rates.items() if m != "dual"}
    report(f"exactly-once into PostgreSQL ({args.deployment}): {args.messages} messages x "
           f"{args.rounds} rounds", figures)


if __name__ == "__main__":
    main()
