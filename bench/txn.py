"""Transaction benchmarks (issue #3), all in one run on one cluster (fsync on):

  (a) 1,000-message transactions of 1 KB vs the same messages without transactions
      (and the same at Kafka's 100 ms transactions, for comparison with its 0.97x);
  (b) commit latency of a 1,000-message vs a 10-message transaction;
  (c) consume-transform-produce transactions per second (1 ack + 2 sends to 2 topics)
      with 16 concurrent clients, and their p50/p99 commit latency; against
      (c)'s ceiling, the same work done directly in PostgreSQL in the same run (16
      asyncpg connections, each loop one SQL transaction that inserts two 100-byte rows
      into two topics' `entries`-shaped table and advances one cursor row), with the
      CPU per transaction of PostgreSQL, each service and this client (issue 18), and
      what one transaction costs PostgreSQL by its own counters (commits, statements,
      tuples, index entries, WAL: bench/_accounting.py, issue 26).

(c)'s input is produced, and a CHECKPOINT taken, before the ceiling is measured, so
neither measured window carries the feed's writes.  The output topics are not trimmed:
the bench cluster keeps acknowledged data (retention -1), because the ceiling deletes
nothing either; the transaction bookkeeping rows a transaction leaves for later deletion
are printed with the accounting instead.  The topic-metrics loop (a scan of every
owned partition's log every 15 s) runs once an hour here for the same reason.

Each in both deployments, one after the other on the same PostgreSQL: a coordinator
process beside the broker (docs/design.md's), and the broker hosting the coordinator
(MAGNETAR_HOST_COORDINATOR, the small-machine shape: docs/architecture.md).

    .venv/bin/python bench/txn.py [--transactions 30] [--seconds 10] [--parts abc]
                                  [--deployment both|separate|hosted]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _accounting import per_transaction as accounting  # noqa: E402
from _accounting import print_accounting, snapshot, top_statements  # noqa: E402
from _common import (  # noqa: E402
    bench_cluster,
    cpu_seconds,
    durable_postgres,
    percentile,
    postmaster_pid,
    report,
)

import magnetar.asyncio as magnetar  # noqa: E402

KB = b"k" * 1024
WARMUP_ROUNDS = 10


async def plain_vs_txn(client, transactions: int, size: int = 1000,
                       warmup_rounds: int = WARMUP_ROUNDS) -> dict:
    producer = await client.create_producer(f"bench-txn-a{size}", batching_max_publish_delay_ms=5,
                                            batching_max_allowed_size_in_bytes=256 * 1024,
                                            max_pending_messages=size)
    total = transactions * size

    async def burst(txn=None):
        await asyncio.gather(*(producer.send(KB, txn=txn) for _ in range(size)))

    # Plain and transactional bursts alternate, so both see the same machine: a
    # checkpoint or a noisy neighbour lands on both sides, not on whichever ran second.
    # The first WARMUP_ROUNDS of each are not measured (connections, caches, and the
    # client's pool of open transactions, which a busy client keeps: _txn_pool.py).
    plain_s = txn_s = 0.0
    for round_ in range(-warmup_rounds, transactions):
        if round_ == 0:
            plain_s = txn_s = 0.0
        started = time.perf_counter()
        await burst()
        plain_s += time.perf_counter() - started
        started = time.perf_counter()
        txn = await client.new_transaction()
        await burst(txn)
        await txn.commit()
        txn_s += time.perf_counter() - started
    plain, transactional = total / plain_s, total / txn_s
    return {"plain_msgs_per_s": round(plain), "txn_msgs_per_s": round(transactional),
            "txn_ms": round(txn_s / transactions * 1000, 1),
            "txn / plain": round(transactional / plain, 2)}


async def commit_latency(client, size: int, rounds: int) -> float:
    producer = await client.create_producer(f"bench-txn-b{size}", batching_max_publish_delay_ms=5)
    latencies = []
    for _ in range(rounds):
        txn = await client.new_transaction()
        await asyncio.gather(*(producer.send(KB, txn=txn) for _ in range(size)))
        started = time.perf_counter()
        await txn.commit()
        latencies.append(time.perf_counter() - started)
    return percentile(latencies, 50)


async def feed_input(client, workers: int, seconds: float, warmup: float, database_url: str) -> None:
    """(c)'s input, produced before anything is measured, then a CHECKPOINT: the feed's
    dirty pages are written before the ceiling's window, not during either window."""
    import asyncpg

    # Single-message input entries, as in every earlier round (send() sealed each message
    # then); a 1,000-message entry split among 16 Shared consumers is another workload.
    source = await client.create_producer("bench-ctp-in", batching_enabled=False,
                                          max_pending_messages=50000)
    await asyncio.gather(*(source.send(b"%d" % i)
                           for i in range(int(workers * (seconds + warmup) * 400))))
    await source.close()
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("CHECKPOINT")
    finally:
        await conn.close()


async def consume_transform_produce(client, workers: int, seconds: float, warmup: float = 0,
                                    database_url: str = "", sessions: dict[str, int] | None = None,
                                    postmaster: int | None = None) -> tuple[dict, dict]:
    out1 = await client.create_producer("bench-ctp-out1", batching_max_publish_delay_ms=0.2)
    out2 = await client.create_producer("bench-ctp-out2", batching_max_publish_delay_ms=0.2)
    latencies: list[float] = []
    phases: dict[str, list[float]] = {"receive": [], "new_transaction": [], "sends_and_ack": []}
    consumers = [await client.subscribe("bench-ctp-in", "ctp",
                                        consumer_type=magnetar.ConsumerType.Shared,
                                        initial_position=magnetar.InitialPosition.Earliest,
                                        receiver_queue_size=50) for _ in range(workers)]
    deadline = time.monotonic() + warmup

    async def worker(consumer) -> None:
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            msg = await consumer.receive(timeout_millis=5000)
            t1 = time.perf_counter()
            txn = await client.new_transaction()
            t2 = time.perf_counter()
            await asyncio.gather(out1.send(msg.data(), txn=txn), out2.send(msg.data(), txn=txn),
                                 consumer.acknowledge(msg, txn=txn))
            started = time.perf_counter()
            await txn.commit()
            latencies.append(time.perf_counter() - started)
            for phase, took in zip(phases, (t1 - t0, t2 - t1, started - t2)):
                phases[phase].append(took)

    if warmup:
        await asyncio.gather(*(worker(consumer) for consumer in consumers))
        latencies.clear()
        for took in phases.values():
            took.clear()
        await analyze(database_url)
        print(f"  warmed up for {warmup:g} s, then ANALYZE", flush=True)
    counters_before = await snapshot(database_url)
    deadline = time.monotonic() + seconds
    print(f"  input ready; {workers} workers start", flush=True)
    cpu_before = cpu_seconds(sessions, postmaster)
    started = time.perf_counter()
    await asyncio.gather(*(worker(consumer) for consumer in consumers))
    elapsed = time.perf_counter() - started
    cpu = per_transaction(cpu_before, cpu_seconds(sessions, postmaster), len(latencies))
    account = accounting(counters_before, await snapshot(database_url), len(latencies))
    return {"clients": workers, "transactions": len(latencies), "txn_per_s": round(len(latencies) / elapsed),
            "p50_commit_ms": round(percentile(latencies, 50) * 1000, 2),
            "p99_commit_ms": round(percentile(latencies, 99) * 1000, 2),
            **{f"p50_{phase}_ms": round(percentile(took, 50) * 1000, 2)
               for phase, took in phases.items()},
            **cpu}, account


def per_transaction(before: dict[str, float], after: dict[str, float], transactions: int) -> dict:
    """CPU milliseconds per transaction of each process (and in all) between two readings."""
    used = {name: (after[name] - before.get(name, 0)) * 1000 / max(transactions, 1) for name in after}
    return {**{f"cpu_ms/txn {name}": round(ms, 2) for name, ms in used.items()},
            "cpu_ms/txn total": round(sum(used.values()), 2)}


CEILING_TABLES = """
DROP TABLE IF EXISTS bench_ceiling_entries, bench_ceiling_cursors;
CREATE TABLE bench_ceiling_entries (LIKE entries INCLUDING ALL);
CREATE TABLE bench_ceiling_cursors (LIKE subscriptions INCLUDING ALL);
"""
# One round trip and one SQL transaction per loop: the two output rows and the cursor
# row, as (c)'s commit makes them visible (the fewest statements PostgreSQL needs).
CEILING_TXN = """
WITH out1 AS (
    INSERT INTO bench_ceiling_entries (topic_id, entry_id, producer_name, sequence_id,
        highest_sequence_id, num_messages, publish_time, payload)
    VALUES (1, $1, 'ceiling', $1, $1, 1, $3, $4)
), out2 AS (
    INSERT INTO bench_ceiling_entries (topic_id, entry_id, producer_name, sequence_id,
        highest_sequence_id, num_messages, publish_time, payload)
    VALUES (2, $1, 'ceiling', $1, $1, 1, $3, $4)
)
UPDATE bench_ceiling_cursors SET mark_delete_entry = mark_delete_entry + 1, updated_at = now()
WHERE topic_id = 3 AND subscription = $2
"""


async def sql_ceiling(database_url: str, workers: int, seconds: float, sessions: dict[str, int],
                      postmaster: int | None, warmup: float = 1.0) -> tuple[dict, dict]:
    """(c)'s durable work done directly in PostgreSQL: each of ``workers`` connections
    loops on one transaction inserting two 100-byte rows (two topics) in an
    `entries`-shaped table and advancing its own cursor row (a row per connection: one
    shared row would serialize the connections on its lock, which the broker's batched
    cursor writes do not)."""
    import asyncpg

    payload = os.urandom(100)
    pool = await asyncpg.create_pool(database_url, min_size=workers, max_size=workers)
    try:
        await pool.execute(CEILING_TABLES)
        await pool.executemany(
            "INSERT INTO bench_ceiling_cursors (topic_id, subscription, mark_delete_entry) "
            "VALUES (3, $1, 0)", [(f"w{i}",) for i in range(workers)])
        entry_ids = itertools.count()
        latencies: list[float] = []

        async def worker(index: int, until: float) -> None:
            async with pool.acquire() as conn:
                statement = await conn.prepare(CEILING_TXN)
                while time.monotonic() < until:
                    started = time.perf_counter()
                    await statement.fetch(next(entry_ids), f"w{index}", int(time.time() * 1000), payload)
                    latencies.append(time.perf_counter() - started)

        until = time.monotonic() + warmup
        await asyncio.gather(*(worker(i, until) for i in range(workers)))
        latencies.clear()
        counters_before = await snapshot(database_url)
        cpu_before = cpu_seconds(sessions, postmaster)
        started = time.perf_counter()
        until = time.monotonic() + seconds
        await asyncio.gather(*(worker(i, until) for i in range(workers)))
        elapsed = time.perf_counter() - started
        cpu = per_transaction(cpu_before, cpu_seconds(sessions, postmaster), len(latencies))
        account = accounting(counters_before, await snapshot(database_url), len(latencies))
        await pool.execute("DROP TABLE bench_ceiling_entries, bench_ceiling_cursors")
    finally:
        await pool.close()
    return {"clients": workers, "transactions": len(latencies),
            "txn_per_s": round(len(latencies) / elapsed),
            "p50_commit_ms": round(percentile(latencies, 50) * 1000, 2),
            "p99_commit_ms": round(percentile(latencies, 99) * 1000, 2),
            "cpu_ms/txn postgresql": cpu.get("cpu_ms/txn postgresql"),
            "cpu_ms/txn bench client": cpu["cpu_ms/txn bench client"]}, account


async def analyze(database_url: str) -> None:
    """What autovacuum's first pass does on a running system (a minute in by default):
    fresh statistics, so the services' cached plans are made again from real sizes."""
    import asyncpg

    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("ANALYZE")
        if await conn.fetchval("SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'"):
            await conn.execute("SELECT pg_stat_statements_reset()")  # --profile: the measured part
    finally:
        await conn.close()


async def run(url: str, args) -> None:
    options = {} if args.one_request_max_bytes is None else {
        "one_request_txn_max_bytes": args.one_request_max_bytes}
    client = magnetar.Client(url, **options)
    results = []
    if "a" in args.parts:
        print("(a) 1,000-message transactions vs plain sends ...", flush=True)
        a = await plain_vs_txn(client, args.transactions)
        results.append(("(a) 1 KB messages in 1,000-message transactions", a))
        # Kafka's 0.97x is for transactions that last 100 ms; 5,000 messages last about
        # that long here, which shows how much of (a)'s gap is a fixed cost per commit.
        a100 = await plain_vs_txn(client, max(args.transactions // 3, 3), size=5000,
                                  warmup_rounds=3)
        results.append(("(a, Kafka's shape) 1 KB messages in 5,000-message (~100 ms) "
                        "transactions", a100))
    if "b" in args.parts:
        print("(b) commit latency by transaction size ...", flush=True)
        small = await commit_latency(client, 10, 20)
        large = await commit_latency(client, 1000, 10)
        results.append(("(b) commit latency p50", {"10 messages ms": round(small * 1000, 2),
                                                   "1,000 messages ms": round(large * 1000, 2),
                                                   "ratio": round(large / small, 2)}))
    accounts = {}
    if "c" in args.parts:
        postmaster = await postmaster_pid(args.database_url)
        print("(c) its input, then a CHECKPOINT ...", flush=True)
        await feed_input(client, args.clients, args.seconds, args.warmup, args.database_url)
        print(f"(c) its ceiling: the same work in PostgreSQL, {args.clients} connections ...", flush=True)
        ceiling, accounts["ceiling"] = await sql_ceiling(
            args.database_url, args.clients, args.seconds, args.sessions, postmaster)
        results.append(("(c) ceiling: 2 rows + 1 cursor row per SQL transaction", ceiling))
        print(f"(c) consume-transform-produce with {args.clients} clients ...", flush=True)
        c, accounts["(c)"] = await consume_transform_produce(
            client, args.clients, args.seconds, args.warmup, args.database_url, args.sessions,
            postmaster)
        results.append(("(c) consume-transform-produce (1 ack + 2 sends)", c))
        ratio = round(c["txn_per_s"] / ceiling["txn_per_s"], 3)
        results.append(("(c) / its ceiling", {"ratio": ratio}))
        args.summary[args.current_deployment] = (
            f"ceiling {ceiling['txn_per_s']} txn/s, (c) {c['txn_per_s']} txn/s = {ratio}x, "
            f"(c) commit p99 {c['p99_commit_ms']} ms, CPU ms/txn {c['cpu_ms/txn total']}")
    await client.close()
    for title, figures in results:
        report(f"{title} [{args.current_deployment}]", figures)
    if accounts:
        print_accounting(f"(c) and its ceiling [{args.current_deployment}]", accounts)
    if args.profile:
        await print_profile(args.database_url, args.profile_urls)


async def print_profile(database_url: str, service_urls: dict[str, str]) -> None:
    """Where the work went: requests per /v1/batch (each service's histogram) and the
    SQL statements by total time (pg_stat_statements)."""
    import re
    import urllib.request

    for name, service_url in service_urls.items():
        text = await asyncio.to_thread(lambda url=service_url: urllib.request.urlopen(url + "/metrics").read().decode())
        count = re.search(r"^magnetar_batch_calls_count ([0-9.e+]+)", text, re.M)
        total = re.search(r"^magnetar_batch_calls_sum ([0-9.e+]+)", text, re.M)
        if count and float(count.group(1)):
            print(f"  {name}: {float(count.group(1)):.0f} batches carried "
                  f"{float(total.group(1)):.0f} calls")
    rows = await top_statements(database_url, "time", limit=15, width=90)
    print("  top statements (calls, times planned, total execution ms, total planning ms, query):")
    for r in rows:
        print(f"  {r['calls']:>8} {r['plans']:>6} {r['exec_ms']:>9.1f} {r['plan_ms']:>8.1f} {r['query']}")


def main() -> None:
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=30)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--warmup", type=float, default=3,
                        help="(c) runs this long first, then ANALYZE, then measures")
    parser.add_argument("--parts", default="abc", help="which of (a) (b) (c) to run, e.g. c")
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio",
                        help="the benchmark client's event loop (services always run uvloop)")
    parser.add_argument("--one-request-max-bytes", type=int, default=None,
                        help="the client's one_request_txn_max_bytes (default: the client's "
                             "own; 0: every transaction the classic way)")
    parser.add_argument("--profile", action="store_true",
                        help="afterwards, print batch sizes and the top SQL statements")
    parser.add_argument("--deployment", choices=["both", "separate", "hosted"], default="both",
                        help="a coordinator process beside the broker, the broker hosting "
                             "the coordinator, or both one after the other")
    args = parser.parse_args()
    # pg_stat_statements always (the accounting counts statements with it; both the
    # ceiling and (c) carry its small overhead); planning times only for --profile.
    pg_settings = {"shared_preload_libraries": "pg_stat_statements",
                   "pg_stat_statements.track_planning": "on" if args.profile else "off"}
    deployments = ["separate", "hosted"] if args.deployment == "both" else [args.deployment]
    args.summary = {}
    with durable_postgres(**pg_settings) as url:
        args.database_url = url
        for deployment in deployments:
            print(f"-- {deployment}: " + ("coordinator-0 and broker-0 processes"
                                          if deployment == "separate"
                                          else "broker-0 hosting coordinator 0"), flush=True)
            args.current_deployment = deployment
            with bench_cluster(url, brokers=1, coordinators=int(deployment == "separate"),
                               coordinator_in_broker=deployment == "hosted", env=BENCH_ENV) as cluster:
                run_on(cluster, args)
    if args.summary:
        report("(c) against its ceiling, each deployment of this run", args.summary)


# Acknowledged data is kept (no trimming in the measured windows: the ceiling deletes
# nothing either), and the topic gauges, a scan of each partition's log, are recomputed
# once an hour instead of every 15 s (not a cost of any transaction).
BENCH_ENV = {"MAGNETAR_DEFAULT_RETENTION_TIME_MINUTES": "-1",
             "MAGNETAR_DEFAULT_RETENTION_SIZE_MB": "-1",
             "MAGNETAR_TOPIC_METRICS_INTERVAL_MS": "3600000"}


def run_on(cluster, args) -> None:
    # Each service runs in its own session (LocalCluster): its CPU is the session's.
    args.sessions = {name: svc.pid for name, svc in cluster.services.items() if svc.pid}
    import asyncpg

    async def enable():
        conn = await asyncpg.connect(args.database_url)
        await conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        await conn.close()
    asyncio.run(enable())
    if args.profile:
        args.profile_urls = {name: svc.url for name, svc in cluster.services.items()}
    if args.loop == "uvloop":  # what the services run on; the asyncio API takes any loop
        import uvloop
        uvloop.run(run(cluster.service_url, args))
    else:
        asyncio.run(run(cluster.service_url, args))


if __name__ == "__main__":
    main()
