"""Spark benchmark (issue #6): streaming rows/s end to end — read ``orders`` with the
``magnetar`` source, run the enrich job's transformation, write ``orders-enriched`` and
``order-alerts`` — with the transactional ``magnetar`` sink (one transaction per
micro-batch) vs the same query writing with plain non-transactional sends
(``foreachBatch`` -> one idempotent producer per task), in one run on one cluster
(fsync on), Spark ``local[2]``.

    .venv/bin/python bench/spark.py [--rows 30000] [--entries-per-batch 20] [--rounds 3]

The input is written in entries (producer batches) of 100 messages, and each
micro-batch reads ``--entries-per-batch`` entries (``maxOffsetsPerTrigger`` counts
entries).  Rows/s counts input rows over the micro-batches' own durations (Spark's
progress reports), so query start-up is excluded; the wall-clock figure includes it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "spark-jobs"))
from _common import bench_cluster, durable_postgres, report  # noqa: E402

import magnetar  # noqa: E402

CUSTOMERS = Path(__file__).resolve().parents[1] / "spark-jobs" / "data" / "customers.csv"


ROWS_PER_ENTRY = 100


def _ignore(result, _msg_id) -> None:
    """The fill's send_async callback: the input is checked by the runs that read it."""


def fill(service_url: str, topic: str, rows: int) -> None:
    """``rows`` JSON orders in entries of 100: a third over their customer's limit, a
    tenth of unknown customers, so both output topics get messages."""
    client = magnetar.Client(service_url)
    producer = client.create_producer(topic, batching_max_publish_delay_ms=50,
                                      batching_max_messages=ROWS_PER_ENTRY,
                                      max_pending_messages=10000)
    for i in range(rows):
        customer = "c-404" if i % 10 == 0 else f"c-{1 + i % 8}"
        order = {"order_id": f"o-{i}", "customer_id": customer, "sku": f"SKU-{i % 50}",
                 "quantity": 1 + i % 7, "unit_price": 40.0 if i % 3 == 0 else 5.0}
        producer.send_async(json.dumps(order).encode(), _ignore, partition_key=order["order_id"])
    producer.flush()
    client.close()


def send_plain(service_url: str):
    """A foreachPartition function: this task's rows, each to its ``__topic``, by plain
    (non-transactional, idempotent, batched) sends."""
    def send_partition(rows) -> None:
        import magnetar

        client = magnetar.Client(service_url)
        producers: dict = {}
        failed = _Failures()
        try:
            for row in rows:
                topic = row["__topic"]
                if topic not in producers:
                    producers[topic] = client.create_producer(
                        topic, batching_max_publish_delay_ms=5, max_pending_messages=10000)
                producers[topic].send_async(bytes(row["value"]), failed.append_if_error,
                                            partition_key=row["__key"])
            for producer in producers.values():
                producer.flush()
            failed.raise_first()
        finally:
            client.close()
    return send_partition


class _Failures(list):
    """Collects send_async failures (the callback runs on the client's thread)."""

    def append_if_error(self, result, _msg_id) -> None:
        if result is not magnetar.Result.Ok:
            self.append(result)

    def raise_first(self) -> None:
        if self:
            raise self[0]


def run_query(spark, urls: tuple[str, str], source: str, suffix: str, entries_per_batch: int,
              transactional: bool) -> dict:
    import transforms

    service_url, admin_url = urls
    checkpoint = tempfile.mkdtemp(prefix=f"magnetar-bench-spark-{suffix}-")
    options = {"service.url": service_url, "admin.url": admin_url}
    raw = (spark.readStream.format("magnetar").options(**options).option("topic", source)
           .option("startingOffsets", "earliest")
           .option("maxOffsetsPerTrigger", str(entries_per_batch)).load())
    customers = spark.read.csv(str(CUSTOMERS), header=True, schema=transforms.CUSTOMER_SCHEMA).cache()
    out = transforms.enrich(raw, customers, f"enriched-{suffix}", f"alerts-{suffix}")
    # As fast as it goes: the next micro-batch starts when the previous one ended.
    writer = out.writeStream.option("checkpointLocation", checkpoint).trigger(processingTime="0 seconds")
    if transactional:
        writer = writer.format("magnetar").options(**options)
    else:
        sender = send_plain(service_url)
        writer = writer.foreachBatch(lambda df, _batch_id: df.foreachPartition(sender))
    started = time.perf_counter()
    query = writer.start()
    query.processAllAvailable()
    wall = time.perf_counter() - started
    query.stop()
    if query.exception():
        raise query.exception()
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in progress)
    batch_seconds = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
    shutil.rmtree(checkpoint, ignore_errors=True)
    return {"input rows": rows, "micro-batches": len(progress),
            "ms per micro-batch": round(batch_seconds / len(progress) * 1000),
            "rows_per_s": round(rows / batch_seconds), "wall_rows_per_s": round(rows / wall),
            "wall_s": round(wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=30000)
    parser.add_argument("--rounds", type=int, default=3, help="runs of each sink, alternated")
    parser.add_argument("--entries-per-batch", type=int, default=20,
                        help="maxOffsetsPerTrigger: entries of 100 rows per micro-batch")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers need magnetar too
    from pyspark.sql import SparkSession

    import magnetar.spark

    with durable_postgres() as url, bench_cluster(url, brokers=1, coordinators=1, admin=True) as cluster:
        urls = (cluster.service_url, cluster.admin_url)
        fill(cluster.service_url, "bench-spark-orders", args.rows)
        fill(cluster.service_url, "bench-spark-warmup", 4 * ROWS_PER_ENTRY)
        spark = (SparkSession.builder.master("local[2]").appName("magnetar-bench")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                 .getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        magnetar.spark.register(spark)
        # Spark's first queries pay for class loading and Python worker start-up: run both
        # sinks once on a small topic so neither measured run pays for it.
        print("warm-up ...", flush=True)
        run_query(spark, urls, "bench-spark-warmup", "warm-plain", 2, transactional=False)
        run_query(spark, urls, "bench-spark-warmup", "warm-txn", 2, transactional=True)
        # Alternate the two sinks, a fresh checkpoint and output topics each time, and
        # compare medians: on a shared 2-core machine one run of either varies by ±30%.
        runs: dict[bool, list[dict]] = {False: [], True: []}
        for i in range(args.rounds):
            for transactional in (False, True):
                name = "txn" if transactional else "plain"
                print(f"round {i + 1}/{args.rounds}: {name}, {args.rows} rows ...", flush=True)
                runs[transactional].append(run_query(spark, urls, "bench-spark-orders", f"{name}{i}",
                                                     args.entries_per_batch, transactional))
        spark.stop()
    summary = {}
    for transactional, title in ((False, "plain sends (foreachBatch)"),
                                 (True, "transactional magnetar sink")):
        figures = {key: statistics.median(r[key] for r in runs[transactional])
                   for key in ("rows_per_s", "wall_rows_per_s", "ms per micro-batch")}
        figures["rows_per_s of each round"] = [r["rows_per_s"] for r in runs[transactional]]
        figures["micro-batches per round"] = runs[transactional][0]["micro-batches"]
        summary[transactional] = figures
        report(f"Spark enrich, {title}, median of {args.rounds}", figures)
    report("Spark enrich, transactional / plain (medians)", {
        "rows/s ratio": round(summary[True]["rows_per_s"] / summary[False]["rows_per_s"], 2),
        "wall rows/s ratio": round(summary[True]["wall_rows_per_s"] / summary[False]["wall_rows_per_s"], 2)})


if __name__ == "__main__":
    main()
