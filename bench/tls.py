"""What TLS costs: produce throughput and p99 publish latency with TLS off and on, in one
run on one (fsync-on) PostgreSQL, alternating off/on rounds (the machine is shared and
noisy: a ratio within a run, never a figure against another day's).

TLS on means every hop: the client to the broker (HTTPS, or pulsar+ssl:// for the
`pulsar-client` wheel), and the broker to PostgreSQL (sslmode=verify-full; off: sslmode=
disable on the same server).  The target (issue 24): TLS costs at most 20% of produce
throughput, i.e. on/off >= 0.80.

    .venv/bin/python bench/tls.py [--messages 200000] [--size 100] [--rounds 2]
"""

from __future__ import annotations

import argparse
import gc
import logging
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import pulsar  # noqa: E402
from _common import bench_cluster, report, send_full_speed  # noqa: E402

import magnetar  # noqa: E402
from magnetar_runtime.local.certs import issue, make_ca  # noqa: E402
from magnetar_runtime.local.postgres import LocalPostgres  # noqa: E402


def produce_magnetar(cluster, messages: int, size: int, topic: str) -> dict:
    tls = {"tls_trust_certs_file_path": str(cluster.tls_files.ca_file)} if cluster.tls_files else {}
    client = magnetar.Client(cluster.service_url, **tls)
    try:
        producer = client.create_producer(topic, batching_max_messages=1000, batching_max_publish_delay_ms=5,
                                          max_pending_messages=20000)
        figures = send_full_speed(producer, messages, size, magnetar.Result.Ok, timeout_s=600)
        producer.close()
        return figures
    finally:
        client.close()


def produce_wheel(cluster, messages: int, size: int, topic: str) -> dict:
    tls = ({"tls_trust_certs_file_path": str(cluster.tls_files.ca_file), "tls_validate_hostname": True}
           if cluster.tls_files else {})
    client = pulsar.Client(cluster.pulsar_service_url, logger=logging.getLogger("pulsar"), **tls)
    try:
        producer = client.create_producer(f"persistent://public/default/{topic}", batching_max_messages=1000,
                                          batching_max_publish_delay_ms=5, max_pending_messages=20000,
                                          block_if_queue_full=True)
        figures = send_full_speed(producer, messages, size, pulsar.Result.Ok, timeout_s=600)
        producer.close()
        return figures
    finally:
        client.close()


def main() -> None:
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    logging.getLogger("pulsar").setLevel(logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="magnetar-bench-tls-"))
    ca = make_ca(folder / "ca")
    cert = issue(ca, folder / "ca", "postgres")
    pg = LocalPostgres(folder / "pg", durable=True, tls=(cert.cert_file, cert.key_file)).start()
    urls = {False: pg.url + "?sslmode=disable",
            True: pg.url + f"?sslmode=verify-full&sslrootcert={ca.cert_file}"}
    runs: dict[tuple[str, bool], list[dict]] = {}
    try:
        for r in range(args.rounds):
            for tls in (False, True):
                with bench_cluster(urls[tls], tls=tls) as cluster:
                    for name, produce in (("magnetar client", produce_magnetar), ("pulsar wheel", produce_wheel)):
                        print(f"round {r + 1}: {name}, TLS {'on' if tls else 'off'} ...", flush=True)
                        figures = produce(cluster, args.messages, args.size, f"bench-tls-{r}")
                        runs.setdefault((name, tls), []).append(figures)
    finally:
        pg.stop()
        shutil.rmtree(folder, ignore_errors=True)
    summary = {}
    for name in ("magnetar client", "pulsar wheel"):
        for tls in (False, True):
            figures = runs[(name, tls)]
            report(f"{name}, TLS {'on' if tls else 'off'} ({args.size} B, {args.messages:,} messages)",
                   {"msgs_per_s (each round)": [f["msgs_per_s"] for f in figures],
                    "p99_publish_ms (each round)": [f["p99_publish_ms"] for f in figures]})
        off = statistics.median(f["msgs_per_s"] for f in runs[(name, False)])
        on = statistics.median(f["msgs_per_s"] for f in runs[(name, True)])
        summary[f"{name}: throughput on/off"] = round(on / off, 3)
        summary[f"{name}: p99 ms off -> on"] = (
            f"{statistics.median(f['p99_publish_ms'] for f in runs[(name, False)])} -> "
            f"{statistics.median(f['p99_publish_ms'] for f in runs[(name, True)])}")
    summary["target"] = "throughput on/off >= 0.80 (TLS costs at most 20%)"
    report("summary (medians of the rounds)", summary)


if __name__ == "__main__":
    main()
