"""Consume throughput and end-to-end latency, against the produce rate of the same run.

1. Produce a backlog of N messages (send_async, full speed) and time it.
2. Drain it with a sync consumer that acknowledges every message; consume / produce.
3. Tail a topic produced at an offered 5,000 msgs/s: end-to-end latency (send call to
   receive), p50/p99.

    .venv/bin/python bench/consume.py [--messages 300000] [--size 100]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import (  # noqa: E402
    RssSampler,
    bench_cluster,
    durable_postgres,
    end_to_end_latencies,
    percentile,
    report,
)

import magnetar  # noqa: E402


def produce_backlog(client, topic: str, messages: int, size: int) -> float:
    producer = client.create_producer(topic, batching_max_publish_delay_ms=5, max_pending_messages=20000)
    payload = b"x" * size
    done = threading.Event()
    settled = itertools.count(1)

    def on_sent(result, msg_id):
        if next(settled) == messages:
            done.set()

    started = time.perf_counter()
    for _ in range(messages):
        producer.send_async(payload, on_sent)
    producer.flush()
    done.wait()
    elapsed = time.perf_counter() - started
    producer.close()
    return messages / elapsed


def drain(client, topic: str, messages: int) -> dict:
    consumer = client.subscribe(topic, "bench", initial_position=magnetar.InitialPosition.Earliest,
                                receiver_queue_size=5000)
    started = time.perf_counter()
    for i in range(messages):
        consumer.acknowledge(consumer.receive(timeout_millis=30000))
        if i % 100000 == 0 and i:
            print(f"  ... {i:,} consumed ({i / (time.perf_counter() - started):,.0f} msgs/s)", flush=True)
    elapsed = time.perf_counter() - started
    consumer.close()
    return {"messages": messages, "seconds": round(elapsed, 3), "msgs_per_s": round(messages / elapsed)}


def tail_latency(client, topic: str, rate: int, seconds: float, size: int) -> dict:
    consumer = client.subscribe(topic, "tail", initial_position=magnetar.InitialPosition.Latest)
    producer = client.create_producer(topic, batching_max_publish_delay_ms=1)
    total = int(rate * seconds)
    latencies = end_to_end_latencies(consumer, producer, total, rate, size, timeout_ms=30000)
    return {"offered_msgs_per_s": rate, "messages": total,
            "p50_end_to_end_ms": round(percentile(latencies, 50) * 1000, 2),
            "p99_end_to_end_ms": round(percentile(latencies, 99) * 1000, 2)}


def main() -> None:
    gc.freeze()  # an application's choice: fewer collection pauses in the client
    gc.set_threshold(50_000, 20, 20)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rate", type=int, default=5000)
    args = parser.parse_args()
    with durable_postgres() as url, bench_cluster(url) as cluster:
        rss = RssSampler(cluster.services["broker-0"].process.pid)
        client = magnetar.Client(cluster.service_url)
        print(f"tailing at an offered {args.rate:,} msgs/s ...", flush=True)
        tail = tail_latency(client, "bench-tail", args.rate, 5.0, args.size)
        print(f"producing a backlog of {args.messages:,} ...", flush=True)
        produce_rate = produce_backlog(client, "bench-backlog", args.messages, args.size)
        print("draining it ...", flush=True)
        consumed = drain(client, "bench-backlog", args.messages)
        client.close()
        peak = rss.stop()
    report(f"produce backlog ({args.size} B)", {"msgs_per_s": round(produce_rate)})
    report("consume backlog, sync receive + ack", consumed)
    report("end-to-end latency at offered load", tail)
    report("summary", {"consume / produce": round(consumed["msgs_per_s"] / produce_rate, 2),
                       "broker peak RSS MB": round(peak / 1e6)})


if __name__ == "__main__":
    main()
