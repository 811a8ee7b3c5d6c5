"""The spark-jobs/ transformations on hand-made DataFrames: real local Spark, no Magnetar."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")

SPARK_JOBS = Path(__file__).resolve().parents[2] / "spark-jobs"
sys.path.insert(0, str(SPARK_JOBS))

import enrich  # noqa: E402
import transforms  # noqa: E402

RAW_SCHEMA = ("value binary, __key string, __topic string, __messageId string, "
              "__publishTime timestamp, __eventTime timestamp, "
              "__messageProperties map<string,string>")
T0 = dt.datetime(2026, 1, 1, 12, 0, 0)


def raw_rows(spark, values, event_times=None, keys=None):
    rows = []
    for i, value in enumerate(values):
        event = event_times[i] if event_times else None
        key = keys[i] if keys else None
        rows.append((value, key, "orders", f"0:{i}:-1", T0 + dt.timedelta(seconds=i), event, {}))
    return spark.createDataFrame(rows, RAW_SCHEMA)


def order(order_id, customer_id, quantity, unit_price, sku="SKU-1") -> bytes:
    return json.dumps({"order_id": order_id, "customer_id": customer_id, "sku": sku,
                       "quantity": quantity, "unit_price": unit_price}).encode()


def messages(df) -> list[tuple[str, str | None, dict]]:
    return sorted(((r["__topic"], r["__key"], json.loads(bytes(r["value"]))) for r in df.collect()),
                  key=lambda m: (m[0], m[1] or "", m[2].get("source_id", "")))


def test_enrich_joins_the_customer_table_and_routes_alerts(spark):
    raw = raw_rows(spark, [
        order("o-1", "c-1", 2, 10.5),        # fine: enriched only
        order("o-2", "c-5", 100, 10.0),      # 1000 > bronze limit 250: enriched + alert
        order("o-3", "nobody", 1, 1.0),      # unknown customer: enriched + alert
        b"not json",                         # malformed: alert only
        json.dumps({"order_id": "o-5"}).encode(),  # no customer/quantity: malformed
    ])
    customers = enrich.load_customers(spark, enrich.DEFAULT_CUSTOMERS)
    out = messages(transforms.enrich(raw, customers, "enriched", "alerts"))

    enriched = {key: value for topic, key, value in out if topic == "enriched"}
    alerts = [(key, value["alert"], value["source_id"]) for topic, key, value in out
              if topic == "alerts"]
    assert sorted(enriched) == ["o-1", "o-2", "o-3"]
    assert enriched["o-1"] == {"order_id": "o-1", "customer_id": "c-1", "name": "Ada Lovelace",
                               "tier": "gold", "country": "GB", "sku": "SKU-1", "quantity": 2,
                               "unit_price": 10.5, "amount": 21.0, "source_id": "0:0:-1"}
    assert "name" not in enriched["o-3"]  # no customer: no customer fields
    assert sorted(alerts, key=lambda a: a[2]) == [
        ("o-2", transforms.OVER_CREDIT_LIMIT, "0:1:-1"),
        ("o-3", transforms.UNKNOWN_CUSTOMER, "0:2:-1"),
        (None, transforms.MALFORMED, "0:3:-1"),
        ("o-5", transforms.MALFORMED, "0:4:-1"),
    ]


def test_an_order_at_its_credit_limit_is_no_alert(spark):
    raw = raw_rows(spark, [order("o-1", "c-5", 25, 10.0)])  # exactly the 250 limit
    customers = enrich.load_customers(spark, enrich.DEFAULT_CUSTOMERS)
    out = messages(transforms.enrich(raw, customers, "enriched", "alerts"))
    assert [(topic, key) for topic, key, _ in out] == [("enriched", "o-1")]


def test_windowed_counts_per_key_and_window_use_event_time_else_publish_time(spark):
    # Publish times are T0 + i seconds; events 0-2 carry event times in another window.
    event_times = [T0 + dt.timedelta(minutes=5), T0 + dt.timedelta(minutes=5, seconds=59),
                   T0 + dt.timedelta(minutes=6), None, None]
    raw = raw_rows(spark, [b"x"] * 5, event_times=event_times, keys=["a", "a", "a", "a", None])
    counts = transforms.windowed_counts(raw, "1 minute", "10 seconds")
    got = sorted((r["key"], r["window_start"], r["count"]) for r in counts.collect())
    assert got == [("", T0, 1), ("a", T0, 1),
                   ("a", T0 + dt.timedelta(minutes=5), 2), ("a", T0 + dt.timedelta(minutes=6), 1)]
    message = transforms.counts_to_messages(counts.filter("key = ''")).collect()[0]
    assert message["__key"] == ""
    start_ms = int(T0.timestamp() * 1000)
    assert json.loads(bytes(message["value"])) == {
        "key": "", "count": 1, "window_start_ms": start_ms, "window_end_ms": start_ms + 60_000}


def test_archive_layout_round_trips_to_sink_rows(spark):
    raw = raw_rows(spark, [b"v0", b"v1"], keys=["k0", None])
    archived = transforms.to_archive(raw)
    assert archived.columns == ["value", "key", "topic", "message_id", "publish_time",
                                "event_time", "properties", "publish_date"]
    assert {r["publish_date"] for r in archived.collect()} == {T0.date()}
    back = transforms.from_archive(archived)
    assert sorted((bytes(r["value"]), r["__key"]) for r in back.collect()) == [
        (b"v0", "k0"), (b"v1", None)]
