"""Produce throughput and latency, against the COPY ceiling measured in the same run.

A local cluster (1 broker, fsync on) and the sync client in this process, on the same
2-core machine, as the issue asks.  Prints:
  - msgs/s and MB/s of `send_async` at full speed, and the ratio to bare COPY;
  - p50/p99 publish latency at full speed and at an offered 5,000 msgs/s;
  - the broker's peak RSS.

    .venv/bin/python bench/produce.py [--messages 300000] [--size 100]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import (  # noqa: E402
    RssSampler,
    bench_cluster,
    copy_ceiling,
    durable_postgres,
    percentile,
    report,
    send_full_speed,
    send_paced,
)

import magnetar  # noqa: E402


def produce_full_speed(client, topic: str, messages: int, size: int) -> dict:
    producer = client.create_producer(topic, batching_max_messages=1000, batching_max_publish_delay_ms=5,
                                      max_pending_messages=20000)
    figures = send_full_speed(producer, messages, size, magnetar.Result.Ok, progress_every=50000, timeout_s=600)
    producer.close()
    return figures


def produce_at_rate(client, topic: str, rate: int, seconds: float, size: int) -> dict:
    """Offered load: send_async paced at `rate` msgs/s; latency from call to receipt."""
    producer = client.create_producer(topic, batching_max_publish_delay_ms=1)
    total = int(rate * seconds)
    latencies = send_paced(producer, total, rate, b"y" * size)
    producer.close()
    return {"offered_msgs_per_s": rate, "messages": total,
            "p50_publish_ms": round(percentile(latencies, 50) * 1000, 2),
            "p99_publish_ms": round(percentile(latencies, 99) * 1000, 2)}


def main() -> None:
    gc.freeze()  # an application's choice: fewer collection pauses in the client
    gc.set_threshold(50_000, 20, 20)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rate", type=int, default=5000)
    args = parser.parse_args()
    with durable_postgres() as url:
        print("measuring the COPY ceiling ...", flush=True)
        ceiling = asyncio.run(copy_ceiling(url, args.messages, args.size))
        with bench_cluster(url) as cluster:
            rss = RssSampler(cluster.services["broker-0"].process.pid)
            client = magnetar.Client(cluster.service_url)
            # Offered load first, before the full-speed run fills the WAL and the heap.
            print(f"producing at an offered {args.rate:,} msgs/s ...", flush=True)
            offered = produce_at_rate(client, "bench-paced", args.rate, 5.0, args.size)
            print("producing at full speed ...", flush=True)
            full = produce_full_speed(client, "bench-produce", args.messages, args.size)
            client.close()
            peak = rss.stop()
    report(f"COPY ceiling ({args.size} B)", ceiling)
    report(f"produce, send_async at full speed ({args.size} B, dedup on)", full)
    report("produce at offered load", offered)
    report("summary", {"produce / COPY ceiling": round(full["msgs_per_s"] / ceiling["msgs_per_s"], 2),
                       "broker peak RSS MB": round(peak / 1e6)})


if __name__ == "__main__":
    main()
