"""What the commit order of application commits costs (docs/exactly-once-postgres.md
"Ordering"): outbox blocks (`magnetar.pg`: one row updated, one event sent) from W
concurrent workers, each with its own connection and its own row,

- `shared`: every worker sends to ONE partition: the blocks pass the commit function's
  per-partition lock one at a time (their COMMITs serialize) and the coordinator ends
  any earlier commit still COMMITTING there first;
- `spread`: each worker sends to a partition of its own: nothing to order;
- `dual`: the unsafe dual write of `shared`: the row's SQL commit, then a plain send
  (the ceiling here);

alternating rounds in one run on one fsync-on PostgreSQL (a ratio within the run).

    .venv/bin/python bench/app_commit_order.py [--blocks 300] [--workers 8] [--rounds 2] [--deployment hosted]
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
from exactly_once_postgres import setup  # noqa: E402

import magnetar.asyncio as aio  # noqa: E402
import magnetar.pg  # noqa: E402

UPDATE = "UPDATE balances SET amount = amount + 1 WHERE account = $1"


async def one_round(service_url: str, app_url: str, mode: str, blocks: int, workers: int, tag: str) -> float:
    client = aio.Client(service_url)

    async def worker(w: int) -> None:
        topic = f"events-{tag}" if mode != "spread" else f"events-{tag}-{w}"
        conn = await asyncpg.connect(app_url)
        producer = await client.create_producer(topic) if mode == "dual" else None
        try:
            for i in range(blocks // workers):
                if producer is not None:
                    async with conn.transaction():
                        await conn.execute(UPDATE, f"a{w}")
                    await producer.send(b"%d" % i)  # a crash just before: the event lost
                    continue
                async with magnetar.pg.transaction(conn, client) as tx:
                    await conn.execute(UPDATE, f"a{w}")
                    await tx.send(topic, b"%d" % i)
        finally:
            await conn.close()

    try:
        # Topics exist and are owned before the clock starts.
        for w in range(workers if mode == "spread" else 1):
            await (await client.create_producer(f"events-{tag}" if mode != "spread" else f"events-{tag}-{w}")).close()
        started = time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(workers)))
        return (blocks // workers) * workers / (time.perf_counter() - started)
    finally:
        await client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blocks", type=int, default=300)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--deployment", choices=["hosted", "separate"], default="hosted",
                        help="coordinator hosted by the broker (one-phase ends) or its own process")
    args = parser.parse_args()
    modes = ["dual", "shared", "spread"]
    rates: dict[str, list[float]] = {m: [] for m in modes}
    with durable_postgres() as url, bench_cluster(
            url, brokers=1, coordinators=int(args.deployment == "separate"),
            coordinator_in_broker=args.deployment == "hosted") as cluster:
        app_url = asyncio.run(setup(url))
        for r in range(args.rounds):
            for mode in modes if r % 2 == 0 else reversed(modes):  # alternate the order
                rate = asyncio.run(one_round(cluster.service_url, app_url, mode, args.blocks,
                                             args.workers, f"{mode}-{r}"))
                rates[mode].append(rate)
                print(f"round {r} {mode:<7} {rate:8.0f} blocks/s", flush=True)
    dual = statistics.median(rates["dual"])
    figures = {f"{m} blocks/s (median)": round(statistics.median(v)) for m, v in rates.items()}
    figures |= {f"{m} / dual": round(statistics.median(v) / dual, 2) for m, v in rates.items() if m != "dual"}
    figures["shared / spread"] = round(statistics.median(rates["shared"]) / statistics.median(rates["spread"]), 2)
    report(f"application commit order ({args.deployment}): {args.blocks} blocks x {args.workers} workers x "
           f"{args.rounds} rounds", figures)


if __name__ == "__main__":
    main()
