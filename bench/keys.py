"""Transaction-key benchmarks (issue #5), in one run on one cluster (fsync on):

  connects/s   new connections (epoch -1, each taking a key over) by 16 concurrent
               clients, vs the bare SQL of an epoch bump (one UPDATE per connect, same
               concurrency, straight to PostgreSQL) measured in the same run;
  fence        latency of a new connection while the previous holder has an open
               transaction with a send and an ack (the connect returns once that
               transaction is aborted on every participant), p50/p99, vs a plain
               abort of a transaction of the same shape.

    .venv/bin/python bench/keys.py [--clients 16] [--seconds 5] [--rounds 200]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).parent))
from _common import bench_cluster, durable_postgres, percentile, report  # noqa: E402

import magnetar.asyncio as magnetar  # noqa: E402

EPOCH_BUMP = """
INSERT INTO transaction_keys (owner, transaction_key, epoch, coordinator_id)
VALUES ('bench', $1, 0, 0)
ON CONFLICT (owner, transaction_key) DO UPDATE SET epoch = transaction_keys.epoch + 1
RETURNING epoch
"""


async def connects(url: str, clients: int, seconds: float) -> dict:
    holders = [magnetar.Client(url, transaction_key=f"connect-{i}") for i in range(clients)]
    count = 0
    deadline = time.monotonic() + seconds

    async def worker(holder) -> None:
        nonlocal count
        while time.monotonic() < deadline:
            await holder._key.connect(-1)  # a new connection every time: takes the key over
            count += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker(h) for h in holders))
    rate = count / (time.perf_counter() - started)
    for h in holders:
        await h.close()
    return {"clients": clients, "connects": count, "connects_per_s": round(rate)}


async def sql_ceiling(database_url: str, clients: int, seconds: float) -> float:
    pool = await asyncpg.create_pool(database_url, min_size=clients, max_size=clients)
    count = 0
    deadline = time.monotonic() + seconds

    async def worker(i: int) -> None:
        nonlocal count
        while time.monotonic() < deadline:
            await pool.fetchval(EPOCH_BUMP, f"sql-{i}")
            count += 1

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(clients)))
    rate = count / (time.perf_counter() - started)
    await pool.close()
    return rate


async def open_txn_with_work(client, producer, consumer):
    txn = await client.new_transaction()
    await producer.send(b"x", txn=txn)
    msg = await consumer.receive(timeout_millis=10000)
    await consumer.acknowledge(msg, txn=txn)
    return txn


async def fence_latency(url: str, rounds: int) -> dict:
    feeder = magnetar.Client(url)
    source = await feeder.create_producer("bench-keys-in")
    await asyncio.gather(*(source.send(b"%d" % i) for i in range(2 * rounds)))
    holders = [magnetar.Client(url, transaction_key="fenced"), magnetar.Client(url, transaction_key="fenced")]
    producers = [await h.create_producer("bench-keys-out") for h in holders]
    # A subscription each, so each holder has every input message to ack.
    consumers = [await h.subscribe("bench-keys-in", f"keys-{i}",
                                   initial_position=magnetar.InitialPosition.Earliest)
                 for i, h in enumerate(holders)]
    fences, aborts = [], []
    for i in range(rounds):
        old, new = i % 2, (i + 1) % 2
        await open_txn_with_work(holders[old], producers[old], consumers[old])
        started = time.perf_counter()
        await holders[new]._key.connect(-1)  # returns once old's transaction is aborted
        fences.append(time.perf_counter() - started)
    plain = magnetar.Client(url)
    producer = await plain.create_producer("bench-keys-out")
    consumer = await plain.subscribe("bench-keys-in", "keys-plain",
                                     initial_position=magnetar.InitialPosition.Earliest)
    for _ in range(rounds // 2):
        txn = await open_txn_with_work(plain, producer, consumer)
        started = time.perf_counter()
        await txn.abort()
        aborts.append(time.perf_counter() - started)
    for c in (*holders, plain, feeder):
        await c.close()
    return {"rounds": rounds,
            "fence_p50_ms": round(percentile(fences, 50) * 1000, 2),
            "fence_p99_ms": round(percentile(fences, 99) * 1000, 2),
            "plain_abort_p50_ms": round(percentile(aborts, 50) * 1000, 2),
            "plain_abort_p99_ms": round(percentile(aborts, 99) * 1000, 2),
            "fence / abort (p50)": round(percentile(fences, 50) / percentile(aborts, 50), 2)}


async def run(cluster, database_url: str, args) -> None:
    print(f"connects with {args.clients} clients for {args.seconds}s ...", flush=True)
    c = await connects(cluster.service_url, args.clients, args.seconds)
    ceiling = await sql_ceiling(database_url, args.clients, args.seconds)
    c |= {"bare SQL epoch bumps/s": round(ceiling), "connects / SQL": round(c["connects_per_s"] / ceiling, 2)}
    print(f"fence latency over {args.rounds} rounds ...", flush=True)
    f = await fence_latency(cluster.service_url, args.rounds)
    report("connects per second (epoch -1, each a takeover)", c)
    report("fence latency (new connection -> previous transaction aborted)", f)


def main() -> None:
    gc.freeze()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    with durable_postgres() as url, bench_cluster(url, brokers=1, coordinators=1) as cluster:
        asyncio.run(run(cluster, url, args))


if __name__ == "__main__":
    main()
