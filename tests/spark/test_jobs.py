"""spark-jobs/ end to end: real local Spark (local[2]) against a real local Magnetar.

The in-process tests drive each job's ``start``/``export``/``import_`` on the shared
SparkSession; the crash and fencing tests run ``enrich`` with spark-submit as separate
processes (tests/spark/drivers.py) and SIGKILL or freeze them mid-batch.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from collections import Counter
from pathlib import Path

import pytest

import magnetar
from tests.e2e.helpers import read_all
from tests.spark.drivers import (
    SPARK_JOBS,
    SparkDriver,
    checkpoint_batches,
    mid_batch,
    open_sink_transactions,
)
from tests.waiting import wait_until

sys.path.insert(0, str(SPARK_JOBS))

import archive  # noqa: E402
import enrich  # noqa: E402
import windowed_counts  # noqa: E402

pytestmark = pytest.mark.e2e

# Customers of spark-jobs/data/customers.csv: limit 5000 (gold), 1000 (silver), 250 (bronze).
LIMITS = {"c-1": 5000, "c-2": 5000, "c-3": 1000, "c-4": 1000, "c-5": 250, "c-6": 250,
          "c-7": 5000, "c-8": 1000}


def make_orders(first: int, count: int) -> list[dict]:
    """Orders o-<i>: every third over its customer's limit, every fifth of an unknown
    customer, the rest fine."""
    orders = []
    for i in range(first, first + count):
        customer = "c-404" if i % 5 == 0 else f"c-{1 + i % 8}"
        quantity = 100 if i % 3 == 0 else 1
        orders.append({"order_id": f"o-{i}", "customer_id": customer, "sku": f"SKU-{i % 4}",
                       "quantity": quantity, "unit_price": 60.0})
    return orders


def expected_alerts(orders: list[dict]) -> Counter:
    alerts = Counter()
    for o in orders:
        if o["customer_id"] not in LIMITS:
            alerts[(o["order_id"], "unknown_customer")] += 1
        elif o["quantity"] * o["unit_price"] > LIMITS[o["customer_id"]]:
            alerts[(o["order_id"], "over_credit_limit")] += 1
    return alerts


def produce(client, topic: str, orders: list[dict]) -> None:
    """One entry per order (a sync send seals its batch): offsets count entries, so
    ``--max-offsets-per-trigger`` then counts orders."""
    producer = client.create_producer(topic)
    for o in orders:
        producer.send(json.dumps(o).encode(), partition_key=o["order_id"])
    producer.close()


def outputs(client, enriched_topic="orders-enriched", alerts_topic="order-alerts"):
    """(order ids in the enriched topic, (order id, reason) in the alerts topic), as counts."""
    enriched = Counter(json.loads(v)["order_id"] for v in read_all(client, enriched_topic))
    alerts = Counter((json.loads(v).get("order_id"), json.loads(v)["alert"])
                     for v in read_all(client, alerts_topic))
    return enriched, alerts


def assert_exactly_once(client, orders: list[dict]) -> None:
    enriched, alerts = outputs(client)
    duplicates = {k: n for k, n in enriched.items() if n > 1}
    assert not duplicates, f"orders enriched more than once: {duplicates}"
    assert enriched == Counter(o["order_id"] for o in orders)
    assert alerts == expected_alerts(orders)


def caught_up(client, checkpoint: Path, orders: int) -> bool:
    """Every order is in the enriched topic and the query has no batch in flight."""
    planned, committed = checkpoint_batches(checkpoint)
    return planned == committed and sum(outputs(client)[0].values()) >= orders


def assert_subscription_acknowledged_all(client, topic: str, subscription: str) -> None:
    """Everything the job read is acknowledged: the subscription's next message is one
    sent now."""
    client.create_producer(topic).send(b"sent after the job")
    consumer = client.subscribe(topic, subscription,
                                initial_position=magnetar.InitialPosition.Earliest)
    assert consumer.receive(timeout_millis=10000).data() == b"sent after the job"
    consumer.close()


def job_args(cluster, *args: str) -> list[str]:
    return ["--service-url", ",".join(cluster.broker_urls), "--admin-url", cluster.admin_url,
            "--shuffle-partitions", "2", *args]


# ---- in process, on the shared SparkSession -------------------------------------------

def test_enrich_writes_both_topics_and_resumes_from_its_checkpoint(cluster, client, spark, tmp_path):
    first = make_orders(0, 15)
    produce(client, "orders", first)
    client.create_producer("orders").send(b"not an order")
    checkpoint = str(tmp_path / "ckpt")
    args = enrich.parse_args(job_args(cluster, "--checkpoint", checkpoint, "--available-now",
                                      "--ack-subscription", "enrich"))

    query = enrich.start(spark, args)
    query.awaitTermination(120)
    assert query.exception() is None
    enriched, alerts = outputs(client)
    assert enriched == Counter(o["order_id"] for o in first)
    assert alerts == expected_alerts(first) + Counter({(None, "malformed"): 1})

    # A second run on the same checkpoint reads only what came after.
    second = make_orders(15, 6)
    produce(client, "orders", second)
    query = enrich.start(spark, args)
    query.awaitTermination(120)
    assert query.exception() is None
    enriched, alerts = outputs(client)
    assert enriched == Counter(o["order_id"] for o in first + second)
    assert alerts == expected_alerts(first + second) + Counter({(None, "malformed"): 1})
    assert_subscription_acknowledged_all(client, "orders", "enrich")


def test_windowed_counts_emit_each_window_once_after_the_watermark(cluster, client, spark, tmp_path):
    base = int(dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.timezone.utc).timestamp() * 1000)
    producer = client.create_producer("clicks")

    def click(key: str, at_seconds: float) -> None:
        producer.send(b"click", partition_key=key, event_timestamp=base + int(at_seconds * 1000))

    for key, at in [("a", 1), ("a", 5), ("b", 9), ("a", 12), ("b", 15), ("a", 31)]:
        click(key, at)  # windows of 10 s: [0,10) a=2 b=1, [10,20) a=1 b=1, [30,40) a=1
    checkpoint = str(tmp_path / "ckpt")
    args = windowed_counts.parse_args(job_args(
        cluster, "--checkpoint", checkpoint, "--input-topic", "clicks", "--output-topic", "counts",
        "--window", "10 seconds", "--watermark", "5 seconds", "--trigger-seconds", "0.2"))

    def counts() -> Counter:
        return Counter((m["key"], (m["window_start_ms"] - base) // 1000, m["count"])
                       for m in map(json.loads, read_all(client, "counts")))

    query = windowed_counts.start(spark, args)
    try:
        # The watermark (max event time 31 s - 5 s = 26 s) closes [0,10) and [10,20) only.
        wait_until(lambda: len(counts()) >= 4, 90, "windows [0,10) and [10,20) emitted",
                   interval=0.5, explain=lambda: str(counts()))
        assert query.exception() is None
    finally:
        query.stop()
    assert counts() == Counter({("a", 0, 2): 1, ("b", 0, 1): 1, ("a", 10, 1): 1, ("b", 10, 1): 1})

    # Restarted from its checkpoint: the open window [30,40) is emitted once when a later
    # event moves the watermark past it, and no earlier window again.
    click("c", 50)
    query = windowed_counts.start(spark, args)
    try:
        wait_until(lambda: ("a", 30, 1) in counts(), 90, "window [30,40) emitted", interval=0.5,
                   explain=lambda: str(counts()))
    finally:
        query.stop()
    assert counts() == Counter({("a", 0, 2): 1, ("b", 0, 1): 1, ("a", 10, 1): 1, ("b", 10, 1): 1,
                                ("a", 30, 1): 1})


def test_archive_exports_a_topic_to_parquet_and_imports_it_in_one_transaction(
        cluster, client, spark, tmp_path):
    producer = client.create_producer("events")
    for i in range(20):
        producer.send(b"event-%d" % i, partition_key=f"k{i % 3}")
    path = str(tmp_path / "events.parquet")
    base = ["--service-url", ",".join(cluster.broker_urls), "--admin-url", cluster.admin_url]

    exported = archive.export(spark, archive.parse_args([*base, "export", "--topic", "events",
                                                         "--path", path]))
    assert exported == 20
    parquet = spark.read.parquet(path).collect()
    assert sorted(bytes(r["value"]) for r in parquet) == sorted(b"event-%d" % i for i in range(20))
    assert {r["key"] for r in parquet} == {"k0", "k1", "k2"}
    assert {r["topic"].rsplit("/", 1)[-1] for r in parquet} == {"events"}

    # A range: entries [5, 15) of the (non-partitioned, "-1") topic; a sync send is one entry.
    def offsets(entry: int) -> str:
        return json.dumps({"persistent://public/default/events": {"-1": entry}})
    ranged = str(tmp_path / "range.parquet")
    assert archive.export(spark, archive.parse_args([
        *base, "export", "--topic", "events", "--path", ranged,
        "--starting-offsets", offsets(5), "--ending-offsets", offsets(15)])) == 10
    assert sorted(bytes(r["value"]) for r in spark.read.parquet(ranged).collect()) == sorted(
        b"event-%d" % i for i in range(5, 15))

    imported = archive.import_(spark, archive.parse_args([*base, "import", "--path", path,
                                                          "--topic", "events-restored"]))
    assert imported == 20
    restored = client.create_reader("events-restored", magnetar.MessageId.earliest)
    got = []
    while restored.has_message_available():
        msg = restored.read_next(timeout_millis=10000)
        got.append((msg.data(), msg.partition_key()))
    assert sorted(got) == sorted((b"event-%d" % i, f"k{i % 3}") for i in range(20))
    # One transaction: a committed transaction's messages on a partition are one entry.
    restored_rows = (spark.read.format("magnetar").option("service.url", cluster.service_url)
                     .option("admin.url", cluster.admin_url).option("topic", "events-restored")
                     .load().collect())
    ids = [r["__messageId"] for r in restored_rows]
    assert len(ids) == 20 and len({i.split(":")[1] for i in ids}) == 1, ids


# ---- separate driver processes: SIGKILL and zombie fencing ---------------------------

def enrich_driver(cluster, tmp_path: Path, checkpoint: Path, name: str, *extra: str) -> SparkDriver:
    args = job_args(cluster, "--checkpoint", str(checkpoint), "--trigger-seconds", "0.5",
                    "--max-offsets-per-trigger", "10", "--ack-subscription", "enrich", *extra)
    return SparkDriver("enrich.py", args, tmp_path / f"{name}.log")


def freeze_inside_a_transaction(driver: SparkDriver, checkpoint: Path, admin_url: str) -> None:
    """SIGSTOP the driver (a GC pause, a lost network) while a micro-batch's transaction
    is open.  The batch may commit between the check and the signal: then thaw and try
    the next batch."""
    for _ in range(4):
        wait_until(lambda: mid_batch(checkpoint, admin_url), 180,
                   "a batch running in its transaction after one committed", interval=0.01,
                   explain=driver.log_tail)
        driver.freeze()
        if open_sink_transactions(admin_url):
            return
        driver.thaw()
    raise AssertionError("four batches committed before the driver could be frozen inside one")


@pytest.mark.slow
def test_enrich_sigkilled_mid_batch_restarts_from_checkpoint_exactly_once(cluster, client, tmp_path):
    orders = make_orders(0, 40)  # 4 micro-batches of 10
    produce(client, "orders", orders)
    checkpoint = tmp_path / "ckpt"

    with enrich_driver(cluster, tmp_path, checkpoint, "first") as first:
        freeze_inside_a_transaction(first, checkpoint, cluster.admin_url)
        first.kill()  # SIGKILL reaches stopped processes: dead at that instruction
    planned, committed = checkpoint_batches(checkpoint)
    assert planned - committed, "the kill did not land mid-batch"
    assert open_sink_transactions(cluster.admin_url), "the kill did not land mid-transaction"
    enriched, _ = outputs(client)
    assert 0 < sum(enriched.values()) < len(orders)

    # Restarted on the same checkpoint: the unfinished batch again, then the rest, then exit.
    with enrich_driver(cluster, tmp_path, checkpoint, "second", "--available-now") as second:
        assert second.wait_exit(180) == 0, second.log_tail()
    assert caught_up(client, checkpoint, len(orders))
    assert_exactly_once(client, orders)
    assert_subscription_acknowledged_all(client, "orders", "enrich")


@pytest.mark.slow
def test_a_second_driver_on_the_same_checkpoint_fences_the_first(cluster, client, tmp_path):
    orders = make_orders(0, 50)
    produce(client, "orders", orders)
    checkpoint = tmp_path / "ckpt"

    with enrich_driver(cluster, tmp_path, checkpoint, "zombie") as zombie:
        freeze_inside_a_transaction(zombie, checkpoint, cluster.admin_url)
        with enrich_driver(cluster, tmp_path, checkpoint, "successor") as successor:
            # ... while its replacement takes over the query and processes every order.
            wait_until(lambda: caught_up(client, checkpoint, len(orders)), 180,
                       "the successor enriched every order", interval=0.5,
                       explain=successor.log_tail)
            zombie.thaw()
            # The zombie wakes up inside its transaction: it is fenced and its query fails.
            assert zombie.wait_exit(120) != 0, zombie.log_tail()
            # ... and the successor carries on undisturbed.
            more = make_orders(50, 5)
            produce(client, "orders", more)
            wait_until(lambda: caught_up(client, checkpoint, len(orders + more)), 120,
                       "the successor enriched the orders sent after the zombie died",
                       interval=0.5, explain=successor.log_tail)
    assert_exactly_once(client, orders + more)
    # Stopped by the transaction key's fencing (the message of ExpiredTransactionError, or
    # of the sink's failed commit), not by something else.
    assert "fenced" in (tmp_path / "zombie.log").read_text(errors="replace"), zombie.log_tail()
