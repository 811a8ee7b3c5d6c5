"""Storage-lifecycle soak (issue #16): does PostgreSQL's on-disk size plateau while
Magnetar produces and consumes steadily, and what does trimming cost produce?

A local cluster (1 broker, fsync on, lifecycle loop every second) and, in this process,
a producer at an offered rate, a consumer that acknowledges everything and one slow
subscription that acknowledges only messages older than ``--slow-lag-s`` (a constant
backlog, so trimming is bounded by the slowest cursor).  Three parts:

1. soak, retention 0 (the default), then soak with a short retention
   (``--retention-minutes``): every ``--sample-s`` the on-disk size of the hot tables
   (pg_total_relation_size: heap + indexes + TOAST of entries and txn_entries), the
   database's size, produce and consume rates; publish latency of every 10th message;
2. plateau check: growth of the on-disk size over the last third of each soak half;
3. produce throughput at full speed with trimming off (infinite retention) and on
   (retention 0, with the previous round's data to delete), alternating, ``--rounds``
   times each; the ratio of the medians.

Prints every sample and the figures, and writes a PNG (``--plot``) of storage and
throughput over time.

The broker keeps its minimum age before trimming (MAGNETAR_TRIM_MIN_AGE_S, 10 minutes):
nothing younger is deleted, so the size plateaus only after that age plus a vacuum cycle,
at about (age + lag) x the produce rate; a half must be long enough for it.  Try another
age with ``--broker-env MAGNETAR_TRIM_MIN_AGE_S=120`` (0: none).  With an age longer than
a round, part 3's "on" rounds delete nothing of the round before: they measure trimming's
cost only with the age at 0.

    .venv/bin/python bench/soak.py --duration-s 600 [--rate 2000] [--size 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import asyncpg  # noqa: E402
from _common import bench_cluster, durable_postgres, percentile, report, send_full_speed, send_paced  # noqa: E402

import magnetar  # noqa: E402
from magnetar_broker.settings import BrokerSettings  # noqa: E402

TOPIC = "persistent://public/default/soak"
HOT = "SELECT coalesce(sum(pg_total_relation_size(c)), 0) FROM unnest(ARRAY['entries', 'txn_entries']::regclass[]) c"
DB = "SELECT pg_database_size(current_database())"


async def _sizes(url: str) -> tuple[int, int]:
    conn = await asyncpg.connect(url)
    try:
        return int(await conn.fetchval(HOT)), int(await conn.fetchval(DB))
    finally:
        await conn.close()


def sizes(url: str) -> tuple[int, int]:
    return asyncio.run(_sizes(url))


def admin(cluster, method: str, path: str, body) -> None:
    req = urllib.request.Request(cluster.admin_url + path, data=json.dumps(body).encode(), method=method,
                                 headers={"Content-Type": "application/json"})
    urllib.request.urlopen(req, timeout=10).read()


def set_retention(cluster, minutes: int, size_mb: int) -> None:
    admin(cluster, "POST", "/admin/v2/namespaces/public/default/retention",
          {"retentionTimeInMinutes": minutes, "retentionSizeInMB": size_mb})


class Counters:
    def __init__(self):
        self.produced = 0
        self.consumed = 0
        self.latencies: list[float] = []
        self.failed = 0


def consume(client, sub: str, stop: threading.Event, counters: Counters | None, lag_s: float = 0) -> None:
    consumer = client.subscribe(TOPIC, sub, consumer_type=magnetar.ConsumerType.Shared,
                                initial_position=magnetar.InitialPosition.Earliest, receiver_queue_size=2000)
    held: list = []
    while not stop.is_set():
        try:
            msg = consumer.receive(timeout_millis=200)
            if lag_s:
                held.append(msg)
            else:
                consumer.acknowledge(msg)
                if counters is not None:
                    counters.consumed += 1
        except magnetar.Timeout:
            pass
        if lag_s:
            cutoff = time.time() * 1000 - lag_s * 1000
            while held and held[0].publish_timestamp() < cutoff:
                consumer.acknowledge(held.pop(0))
    consumer.close()


def soak(cluster, client, url: str, seconds: float, rate: float, size: int, sample_s: float,
         slow_lag_s: float, label: str, t0: float) -> list[dict]:
    counters = Counters()
    stop = threading.Event()
    threads = [threading.Thread(target=consume, args=(client, "fast", stop, counters), daemon=True),
               threading.Thread(target=consume, args=(client, "slow", stop, None, slow_lag_s), daemon=True)]
    for t in threads:
        t.start()
    producer = client.create_producer(TOPIC, batching_max_messages=200, batching_max_publish_delay_ms=5,
                                      max_pending_messages=20000)
    payload = b"s" * size

    def on_result(result) -> None:
        if result is magnetar.Result.Ok:
            counters.produced += 1
        else:
            counters.failed += 1

    def produce() -> None:
        counters.latencies = send_paced(producer, int(seconds * rate), rate, payload, sample_every=10,
                                        on_result=on_result, stop=stop)

    pt = threading.Thread(target=produce, daemon=True)
    pt.start()
    samples = []
    started = time.monotonic()
    last = (started, 0, 0)
    while pt.is_alive():
        pt.join(sample_s)
        now = time.monotonic()
        hot, db = sizes(url)
        produced, consumed = counters.produced, counters.consumed
        s = {"phase": label, "t": round(now - t0, 1), "hot_mb": round(hot / 2**20, 2), "db_mb": round(db / 2**20, 2),
             "produce_per_s": round((produced - last[1]) / (now - last[0])),
             "consume_per_s": round((consumed - last[2]) / (now - last[0]))}
        last = (now, produced, consumed)
        samples.append(s)
        print(f"  t={s['t']:7.1f}s [{label}] hot tables {s['hot_mb']:8.2f} MB  database {s['db_mb']:8.2f} MB  "
              f"produce {s['produce_per_s']:6d}/s  consume {s['consume_per_s']:6d}/s", flush=True)
    stop.set()
    for t in threads:
        t.join(10)
    producer.close()
    lat = sorted(counters.latencies)
    third = samples[len(samples) * 2 // 3:] or samples
    growth = (third[-1]["hot_mb"] - third[0]["hot_mb"]) / max(third[0]["hot_mb"], 0.01)
    return samples, {"phase": label, "produced": counters.produced, "failed": counters.failed,
                     "offered_per_s": rate, "p50_ms": round(percentile(lat, 50) * 1000, 2),
                     "p99_ms": round(percentile(lat, 99) * 1000, 2),
                     "hot_mb_end": samples[-1]["hot_mb"], "last_third_growth_pct": round(growth * 100, 1)}


def burst(client, messages: int, size: int) -> float:
    producer = client.create_producer(TOPIC, batching_max_messages=1000, batching_max_publish_delay_ms=5,
                                      max_pending_messages=20000)
    figures = send_full_speed(producer, messages, size, magnetar.Result.Ok)
    producer.close()
    return figures["msgs_per_s"]


def paced_latency(client, seconds: float, rate: float, size: int) -> float:
    """p99 publish latency (ms) of ``seconds`` of sends at ``rate`` per second."""
    producer = client.create_producer(TOPIC, batching_max_messages=200, batching_max_publish_delay_ms=5,
                                      max_pending_messages=20000)
    latencies = send_paced(producer, int(seconds * rate), rate, b"p" * size)
    producer.close()
    return round(percentile(latencies, 99) * 1000, 2)


def drain(client, sub: str) -> None:
    """Acknowledge everything on ``sub`` (so the on-round has acknowledged data to trim)."""
    consumer = client.subscribe(TOPIC, sub, consumer_type=magnetar.ConsumerType.Shared,
                                initial_position=magnetar.InitialPosition.Earliest, receiver_queue_size=2000)
    while True:
        try:
            consumer.acknowledge(consumer.receive(timeout_millis=500))
        except magnetar.Timeout:
            break
    consumer.close()


def trim_figures(cluster) -> dict:
    """The broker's trimming counters: batches, their mean time, the time paused."""
    import re
    with urllib.request.urlopen(cluster.broker_urls[0] + "/metrics", timeout=10) as resp:
        text = resp.read().decode()

    def value(name: str) -> float:
        m = re.search(rf"^{name} (\S+)$", text, re.M)
        return float(m[1]) if m else 0.0
    batches = value("magnetar_broker_trim_batch_seconds_count")
    return {"batches": int(batches), "entries": int(value("magnetar_broker_trimmed_entries_total")),
            "mean_batch_ms": round(value("magnetar_broker_trim_batch_seconds_sum") * 1000 / max(batches, 1), 2),
            "paused_s": round(value("magnetar_broker_trim_pause_seconds_total"), 1)}


def plot(samples: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(2, 1, figsize=(10, 7), sharex=True)
    t = [s["t"] for s in samples]
    a.plot(t, [s["hot_mb"] for s in samples], label="entries + txn_entries (heap+indexes+TOAST)")
    a.plot(t, [s["db_mb"] for s in samples], label="whole database")
    a.set_ylabel("MB on disk")
    a.legend()
    b.plot(t, [s["produce_per_s"] for s in samples], label="produced/s")
    b.plot(t, [s["consume_per_s"] for s in samples], label="consumed/s (fast subscription)")
    b.set_ylabel("messages/s")
    b.set_xlabel("seconds")
    b.legend()
    for ax in (a, b):
        for i in range(1, len(samples)):
            if samples[i]["phase"] != samples[i - 1]["phase"]:
                ax.axvline(samples[i]["t"], color="grey", linestyle="--")
    a.set_title("Magnetar soak: retention 0, then a short retention (dashed line)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration-s", type=float, default=600, help="soak length (both halves together)")
    ap.add_argument("--rate", type=float, default=2000, help="offered messages/s")
    ap.add_argument("--size", type=int, default=1000, help="payload bytes")
    ap.add_argument("--sample-s", type=float, default=5)
    ap.add_argument("--slow-lag-s", type=float, default=10, help="the slow subscription's lag")
    ap.add_argument("--retention-minutes", type=int, default=1, help="the second half's retention")
    ap.add_argument("--rounds", type=int, default=3, help="alternating throughput rounds (each way)")
    ap.add_argument("--burst", type=int, default=40000, help="messages per throughput round")
    ap.add_argument("--latency-s", type=float, default=15, help="paced seconds per latency round")
    ap.add_argument("--plot", type=Path, default=Path("soak.png"))
    ap.add_argument("--unpaced", action="store_true",
                    help="trim as before pacing (500-entry batches, no byte bound, no pause): for comparison")
    ap.add_argument("--broker-env", action="append", default=[], metavar="MAGNETAR_X=VALUE",
                    help="a setting for every service of the cluster (repeatable), e.g. to try a trim pace")
    a = ap.parse_args()
    extra = dict(kv.split("=", 1) for kv in a.broker_env)
    with durable_postgres() as url:
        unpaced = {"MAGNETAR_TRIM_BATCH_BYTES": str(1 << 40), "MAGNETAR_TRIM_DUTY_PERCENT": "100",
                   "MAGNETAR_TRIM_MIN_PAUSE_MS": "0", "MAGNETAR_TRIM_PASS_BATCHES": "1000000"} if a.unpaced else {}
        env = {"MAGNETAR_LIFECYCLE_INTERVAL_MS": "1000", "MAGNETAR_STORAGE_POLICY_CACHE_MS": "0"} | unpaced | extra
        with bench_cluster(url, admin=True, env=env) as cluster:
            client = magnetar.Client(",".join(cluster.broker_urls))
            t0 = time.monotonic()
            min_age_s = int(env.get("MAGNETAR_TRIM_MIN_AGE_S", BrokerSettings.model_fields["trim_min_age_s"].default))
            print(f"soak: {a.duration_s:.0f} s at {a.rate:.0f} msgs/s of {a.size} B; retention 0, then "
                  f"{a.retention_minutes} min; trimming {'unpaced' if a.unpaced else 'paced'}, "
                  f"nothing younger than {min_age_s} s", flush=True)
            set_retention(cluster, 0, 0)
            s1, f1 = soak(cluster, client, url, a.duration_s / 2, a.rate, a.size, a.sample_s, a.slow_lag_s,
                          "retention 0", t0)
            set_retention(cluster, a.retention_minutes, -1)
            s2, f2 = soak(cluster, client, url, a.duration_s / 2, a.rate, a.size, a.sample_s, a.slow_lag_s,
                          f"retention {a.retention_minutes} min", t0)
            plot(s1 + s2, a.plot)
            print(f"plot written to {a.plot}", flush=True)
            off, on, p99_off, p99_on = [], [], [], []
            for r in range(a.rounds):
                set_retention(cluster, -1, -1)  # trimming off: nothing may go
                off.append(burst(client, a.burst, a.size))
                p99_off.append(paced_latency(client, a.latency_s, a.rate, a.size))
                drain(client, "fast"), drain(client, "slow")
                set_retention(cluster, 0, 0)  # trimming on, with the off round's data to delete
                on.append(burst(client, a.burst, a.size))
                p99_on.append(paced_latency(client, a.latency_s, a.rate, a.size))
                drain(client, "fast"), drain(client, "slow")
                print(f"  round {r + 1}: full speed trimming off {off[-1]:,.0f} msgs/s, on {on[-1]:,.0f} msgs/s; "
                      f"p99 at {a.rate:.0f}/s off {p99_off[-1]} ms, on {p99_on[-1]} ms", flush=True)
            trims = trim_figures(cluster)
            print(f"  trimming: {trims}", flush=True)
            client.close()
    report("soak", {"trim_min_age_s": min_age_s, "trimming": trims, "retention 0": f1, "short retention": f2,
                    "throughput": {"off_msgs_per_s": [round(x) for x in off], "on_msgs_per_s": [round(x) for x in on],
                                   "ratio_on_to_off": round(statistics.median(on) / statistics.median(off), 3),
                                   "p99_ms_off": p99_off, "p99_ms_on": p99_on}})


if __name__ == "__main__":
    main()
