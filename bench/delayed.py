"""Delayed delivery at scale: normal traffic on a Shared subscription that holds 0 vs
1,000,000 pending delayed messages, in the same run.

1. Setup: send D delayed messages (each its own delivery time, a day ahead, so each is
   its own row of delayed_deliveries) to topic "held", subscribe "s" (Shared) and wait
   until the subscription has passed them all (every row stored, its cursor past them).
2. Rounds, alternating: on a fresh topic (0 delayed) and on "held"/"s" (D delayed),
   produce a backlog of N normal messages and drain it (receive + ack: dispatch
   throughput), then tail an offered rate for a few seconds (end-to-end p99).
3. Ratios held / fresh, round by round (which goes first alternates: the machine is
   shared and noisy), and their median and range.

    .venv/bin/python bench/delayed.py [--delayed 1000000] [--messages 300000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import statistics
import sys
import threading
import time
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).parent))
from _common import bench_cluster, durable_postgres, end_to_end_latencies, percentile, report  # noqa: E402

import magnetar  # noqa: E402

SHARED = magnetar.ConsumerType.Shared


def send_all(producer, count: int, payload_of, **options_of) -> None:
    done = threading.Event()
    settled = itertools.count(1)

    def on_sent(result, msg_id):
        if result is not magnetar.Result.Ok:
            print(f"  send failed: {result}", flush=True)
        if next(settled) == count:
            done.set()

    for i in range(count):
        producer.send_async(payload_of(i), on_sent, **{k: f(i) for k, f in options_of.items()})
    producer.flush()
    done.wait()


def stored_rows(url: str) -> int:
    async def count() -> int:
        conn = await asyncpg.connect(url)
        try:
            return await conn.fetchval("SELECT count(*) FROM delayed_deliveries")
        finally:
            await conn.close()
    return asyncio.run(count())


def hold_delayed(client, url: str, count: int) -> dict:
    consumer = client.subscribe("held", "s", consumer_type=SHARED, initial_position=magnetar.InitialPosition.Earliest)
    producer = client.create_producer("held", batching_max_publish_delay_ms=5, max_pending_messages=20000)
    base = int(time.time() * 1000) + 86_400_000
    started = time.perf_counter()
    send_all(producer, count, lambda i: b"d" * 100, deliver_at=lambda i: base + i)
    sent_s = time.perf_counter() - started
    while (rows := stored_rows(url)) < count:
        print(f"  ... {rows:,} delayed rows stored", flush=True)
        time.sleep(2)
    held_s = time.perf_counter() - started
    producer.close()
    consumer.close()
    return {"delayed": count, "send_s": round(sent_s, 1), "all_rows_stored_s": round(held_s, 1)}


def traffic(client, topic: str, messages: int, rate: int, seconds: float, size: int) -> dict:
    consumer = client.subscribe(topic, "s", consumer_type=SHARED, initial_position=magnetar.InitialPosition.Earliest,
                                receiver_queue_size=5000)
    producer = client.create_producer(topic, batching_max_publish_delay_ms=5, max_pending_messages=20000)
    send_all(producer, messages, lambda i: b"x" * size)
    started = time.perf_counter()
    for _ in range(messages):
        consumer.acknowledge(consumer.receive(timeout_millis=60_000))
    drain_s = time.perf_counter() - started
    latencies = end_to_end_latencies(consumer, producer, int(rate * seconds), rate, size)
    producer.close()
    consumer.close()
    return {"dispatch_msgs_per_s": round(messages / drain_s), "p50_ms": round(percentile(latencies, 50) * 1000, 2),
            "p99_ms": round(percentile(latencies, 99) * 1000, 2)}


def main() -> None:
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delayed", type=int, default=1_000_000)
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--rate", type=int, default=2000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with durable_postgres() as url, bench_cluster(url) as cluster:
        client = magnetar.Client(cluster.service_url)
        print(f"holding {args.delayed:,} delayed messages on held/s ...", flush=True)
        setup = hold_delayed(client, url, args.delayed)
        report("setup", setup)
        throughput, p99 = [], []
        for r in range(args.rounds):
            # Alternate which goes first: the machine's load drifts within a round too.
            if r % 2:
                held = traffic(client, "held", args.messages, args.rate, args.seconds, args.size)
                fresh = traffic(client, f"fresh-{r}", args.messages, args.rate, args.seconds, args.size)
            else:
                fresh = traffic(client, f"fresh-{r}", args.messages, args.rate, args.seconds, args.size)
                held = traffic(client, "held", args.messages, args.rate, args.seconds, args.size)
            throughput.append(held["dispatch_msgs_per_s"] / fresh["dispatch_msgs_per_s"])
            p99.append(held["p99_ms"] / fresh["p99_ms"])
            report(f"round {r + 1}: 0 delayed (fresh-{r})", fresh)
            report(f"round {r + 1}: {args.delayed:,} delayed (held)", held)
            report(f"round {r + 1}: held / fresh", {"dispatch throughput": round(throughput[-1], 2),
                                                   "p99 latency (lower is better)": round(p99[-1], 2)})
        report("held / fresh over the rounds", {
            "dispatch throughput, median": round(statistics.median(throughput), 2),
            "dispatch throughput, range": f"{min(throughput):.2f}-{max(throughput):.2f}",
            "p99 latency, median": round(statistics.median(p99), 2),
            "p99 latency, range": f"{min(p99):.2f}-{max(p99):.2f}"})
        report("still held", {"delayed rows": stored_rows(url)})
        client.close()


if __name__ == "__main__":
    main()
