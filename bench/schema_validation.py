"""What schemaValidationEnforced costs: produce throughput and the broker's CPU per
message with the broker validating every payload against the topic's schema, against
the same produce without validation, in one run (one broker, one fsync-on PostgreSQL,
rounds alternating off and on: the machine is shared and noisy, so only ratios within a
run count), next to the COPY ceiling measured in the same run.

Two schemas: AVRO (fastavro's schemaless reader over each payload) and JSON (a JSON
document checked against the record's Avro definition, in Python).  The payloads are
one record encoded once (about ``--size`` bytes), sent by a Magnetar producer whose
schema passes them through as they are, so the client's work is the same with and
without validation: what differs is the broker's.

    .venv/bin/python bench/schema_validation.py [--messages 200000] [--size 100] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import _cpu, bench_cluster, copy_ceiling, durable_postgres, report, send_full_speed  # noqa: E402

import magnetar  # noqa: E402
from magnetar.schema import AvroSchema, Double, Integer, JsonSchema, Long, Record, String  # noqa: E402


class Reading(Record):
    """A sensor reading: a typical small record."""
    sensor = String(required=True)
    site = String()
    sequence = Long(required=True)
    value = Double(required=True)
    unit = String()
    quality = Integer()


def sample(size: int) -> Reading:
    reading = Reading(sensor="s-0001", site="north", sequence=123456789, value=21.5, unit="C", quality=3)
    pad = max(size - len(AvroSchema(Reading).encode(reading)), 0)
    reading.site = "north" + "x" * pad      # about ``size`` bytes of Avro
    return reading


def passing_through(schema_cls):
    """The schema on the wire, payloads sent as given (already encoded)."""
    class PassThrough(schema_cls):
        def encode(self, obj):
            return obj
    return PassThrough(Reading)


def set_policy(admin_url: str, namespace: str, enforced: bool) -> None:
    def call(method: str, path: str, body) -> None:
        req = urllib.request.Request(f"{admin_url}/admin/v2/namespaces/{namespace}{path}", method=method,
                                     data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=30).close()
    call("PUT", "", {})
    call("POST", "/schemaValidationEnforced", enforced)


def produce(cluster, broker, topic: str, kind: str, payload: bytes, messages: int) -> dict:
    client = magnetar.Client(cluster.service_url)
    try:
        schema = passing_through(AvroSchema if kind == "AVRO" else JsonSchema)
        producer = client.create_producer(topic, schema=schema, batching_max_messages=1000,
                                          batching_max_publish_delay_ms=5, max_pending_messages=20000)
        cpu = _cpu(broker)
        figures = send_full_speed(producer, messages, len(payload), magnetar.Result.Ok, timeout_s=600,
                                  payload=payload)
        figures["broker_cpu_us_per_msg"] = round((_cpu(broker) - cpu) / messages * 1e6, 2)
        producer.close()
        return figures
    finally:
        client.close()


def main() -> None:
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    reading = sample(args.size)
    payloads = {"AVRO": AvroSchema(Reading).encode(reading), "JSON": JsonSchema(Reading).encode(reading)}
    runs: dict[tuple[str, bool], list[dict]] = {}
    with durable_postgres() as url:
        print("measuring the COPY ceiling ...", flush=True)
        ceiling = asyncio.run(copy_ceiling(url, args.messages, args.size))
        with bench_cluster(url, admin=True) as cluster:
            import psutil

            broker = psutil.Process(cluster.services["broker-0"].process.pid)
            for enforced in (False, True):
                set_policy(cluster.admin_url, f"public/validation-{'on' if enforced else 'off'}", enforced)
            for r in range(args.rounds):
                for kind in ("AVRO", "JSON"):
                    for enforced in (False, True):
                        state = "on" if enforced else "off"
                        print(f"round {r + 1}: {kind}, validation {state} ...", flush=True)
                        topic = f"persistent://public/validation-{state}/bench-{kind.lower()}-{r}"
                        runs.setdefault((kind, enforced), []).append(
                            produce(cluster, broker, topic, kind, payloads[kind], args.messages))
    report(f"COPY ceiling ({args.size} B)", ceiling)
    summary: dict[str, object] = {}
    for kind in ("AVRO", "JSON"):
        for enforced in (False, True):
            figures = runs[(kind, enforced)]
            report(f"{kind} ({len(payloads[kind])} B payloads, {args.messages:,} messages), "
                   f"validation {'on' if enforced else 'off'}",
                   {"msgs_per_s (each round)": [f["msgs_per_s"] for f in figures],
                    "broker CPU µs/msg (each round)": [f["broker_cpu_us_per_msg"] for f in figures],
                    "p99_publish_ms (each round)": [f["p99_publish_ms"] for f in figures]})
        off = statistics.median(f["msgs_per_s"] for f in runs[(kind, False)])
        on = statistics.median(f["msgs_per_s"] for f in runs[(kind, True)])
        cpu_off = statistics.median(f["broker_cpu_us_per_msg"] for f in runs[(kind, False)])
        cpu_on = statistics.median(f["broker_cpu_us_per_msg"] for f in runs[(kind, True)])
        summary[f"{kind}: throughput on/off"] = round(on / off, 3)
        summary[f"{kind}: produce / COPY ceiling off -> on"] = (
            f"{off / ceiling['msgs_per_s']:.2f} -> {on / ceiling['msgs_per_s']:.2f}")
        summary[f"{kind}: broker CPU µs/msg off -> on"] = f"{cpu_off} -> {cpu_on} (+{cpu_on - cpu_off:.2f})"
    report("summary (medians of the rounds)", summary)


if __name__ == "__main__":
    main()
