"""Latency of normal traffic while the protobuf fuzz runs (issue 20), against the same
traffic without it, in one run on one cluster.

A local cluster (2 brokers, a coordinator, the registry; fsync on).  Normal traffic: one
producer sending synchronously at a paced rate, one consumer receiving and acking.  The
window runs twice: alone, then with the seeded fuzz of tests/e2e/fuzzing.py hammering
every broker, coordinator and registry route at the same time.  Prints p50/p99 of the
send latency and of the end-to-end latency (publish to receive) of both windows, the
fuzz's request count by status and rate, and the p99 ratio (with fuzz / without).

    .venv/bin/python bench/fuzz_latency.py [--seconds 20] [--rate 200] [--fuzz-concurrency 4]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1]))  # tests.e2e.fuzzing
from _common import bench_cluster, durable_postgres, paced, percentile, report  # noqa: E402

import magnetar  # noqa: E402
from tests.e2e import fuzzing  # noqa: E402


def traffic(client, topic: str, seconds: float, rate: float) -> dict:
    """Send ``seconds * rate`` messages at ``rate``/s, receive them all; latencies in ms."""
    producer = client.create_producer(topic, batching_enabled=False)
    consumer = client.subscribe(topic, f"bench-{time.monotonic_ns()}",
                                initial_position=magnetar.InitialPosition.Latest)
    total = int(seconds * rate)
    sent_at: dict[bytes, float] = {}
    send_ms: list[float] = []
    e2e_ms: list[float] = []

    def receive() -> None:
        for _ in range(total):
            msg = consumer.receive(timeout_millis=60_000)
            e2e_ms.append((time.perf_counter() - sent_at[msg.data()]) * 1000)
            consumer.acknowledge(msg)

    receiver = threading.Thread(target=receive, daemon=True)
    receiver.start()
    for i in paced(total, rate):
        payload = b"%08d" % i
        started = sent_at[payload] = time.perf_counter()
        producer.send(payload)
        send_ms.append((time.perf_counter() - started) * 1000)
    receiver.join(timeout=120)
    producer.close()
    consumer.close()
    if len(e2e_ms) != total:
        raise SystemExit(f"only {len(e2e_ms)} of {total} messages arrived")
    return {"send": send_ms, "e2e": e2e_ms}


def fuzz_until(stop: threading.Event, urls: dict, seed: int, concurrency: int, out: dict) -> None:
    async def go():
        routes = fuzzing.discover_routes()
        total = fuzzing.Outcome()
        done = asyncio.Event()
        started = time.perf_counter()
        round_no = 0

        async def watch():
            # ``stop`` is a threading.Event (set by another thread): polled, since waiting
            # for it in a worker thread would hold asyncio.run's exit until it is set.
            while not stop.is_set():  # noqa: ASYNC110
                await asyncio.sleep(0.05)
            done.set()

        watcher = asyncio.create_task(watch())
        while not done.is_set():
            harvests = [await fuzzing.harvest(urls, None, f"bench-{round_no}")]
            calls = fuzzing.plan(seed + round_no, 1000, routes, harvests, 1)
            total.add(await fuzzing.run(calls, urls, [None], concurrency=concurrency, stop=done,
                                        max_failures=10**9))
            round_no += 1
        watcher.cancel()
        out["outcome"], out["elapsed"] = total, time.perf_counter() - started

    asyncio.run(go())


def figures(window: dict) -> dict:
    return {f"{kind} p{pct} ms": round(percentile(window[kind], pct), 2)
            for kind in ("send", "e2e") for pct in (50, 99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--rate", type=float, default=200, help="normal messages per second")
    parser.add_argument("--fuzz-concurrency", type=int, default=4)
    parser.add_argument("--seed", type=int, default=20)
    args = parser.parse_args()
    with durable_postgres() as url, bench_cluster(url, brokers=2, coordinators=1) as cluster:
        urls = {"broker": cluster.broker_urls, "coordinator": cluster.coordinator_urls,
                "registry": [cluster.url(n) for n in cluster.names("registry")]}
        client = magnetar.Client(",".join(cluster.broker_urls))
        try:
            traffic(client, "warm-up", 3, args.rate)
            alone = traffic(client, "normal", args.seconds, args.rate)
            stop, fuzz = threading.Event(), {}
            fuzzer = threading.Thread(target=fuzz_until, args=(stop, urls, args.seed,
                                                                 args.fuzz_concurrency, fuzz))
            fuzzer.start()
            time.sleep(1)  # the fuzz is up to speed before the window opens
            try:
                busy = traffic(client, "normal", args.seconds, args.rate)
            finally:
                stop.set()
                fuzzer.join()
        finally:
            client.close()
    outcome = fuzz["outcome"]
    base, under = figures(alone), figures(busy)
    report(f"normal traffic alone ({args.rate:.0f} msgs/s, {args.seconds:.0f} s)", base)
    report(f"the same traffic with the protobuf fuzz running (seed {args.seed}, "
           f"{args.fuzz_concurrency} in flight)", under | {
               "fuzz requests": outcome.sent,
               "fuzz requests/s": round(outcome.sent / fuzz["elapsed"]),
               "fuzz by status": dict(sorted(((str(k), v) for k, v in outcome.by_status.items()))),
               "fuzz 5xx or unanswered": len(outcome.failures)})
    for failure in outcome.failures[:10]:  # a 5xx or hang the fuzz met: replay it alone
        print("  fuzz failure: " + failure[:600])
    report("p99 ratio, with fuzz / without (1.0 = unaffected)", {
        "send p99 ratio": round(under["send p99 ms"] / base["send p99 ms"], 2),
        "e2e p99 ratio": round(under["e2e p99 ms"] / base["e2e p99 ms"], 2)})


if __name__ == "__main__":
    main()
