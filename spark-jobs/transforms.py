"""The jobs' transformations: DataFrame in, DataFrame out, Spark SQL expressions only.

Nothing here reads or writes Magnetar (the job modules do), so every function runs on
any DataFrame with the right columns, e.g. one built with ``spark.createDataFrame`` in a
test.  No Python UDFs either: built-in expressions run in the JVM, so executors never
need to import this module.

Columns of a row read with ``format("magnetar")``: ``value`` (binary), ``__key``,
``__topic``, ``__messageId``, ``__publishTime``, ``__eventTime``,
``__messageProperties``.  A row to write has ``value`` and optionally ``__key`` and
``__topic``.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

ORDER_SCHEMA = StructType([
    StructField("order_id", StringType()),
    StructField("customer_id", StringType()),
    StructField("sku", StringType()),
    StructField("quantity", LongType()),
    StructField("unit_price", DoubleType()),
])

CUSTOMER_SCHEMA = StructType([
    StructField("customer_id", StringType(), nullable=False),
    StructField("name", StringType()),
    StructField("tier", StringType()),
    StructField("country", StringType()),
    StructField("credit_limit", DoubleType()),
])

# Alert reasons, in the order they are checked.
MALFORMED = "malformed"  # not JSON, or no order_id / customer_id / quantity / unit_price
UNKNOWN_CUSTOMER = "unknown_customer"  # customer_id not in the static table
OVER_CREDIT_LIMIT = "over_credit_limit"  # quantity * unit_price above the customer's limit


# ---- enrich: orders -> orders-enriched + order-alerts ----------------------------------

def parse_orders(raw: DataFrame) -> DataFrame:
    """Magnetar rows of JSON orders -> one column per order field, plus the source
    message id (kept so each output names the input it came from)."""
    parsed = F.from_json(F.col("value").cast("string"), ORDER_SCHEMA)
    return raw.select(parsed.alias("o"), F.col("__messageId").cast("string").alias("source_id")) \
              .select("o.*", "source_id")


def enrich_orders(orders: DataFrame, customers: DataFrame) -> DataFrame:
    """Left join with the customer table; adds name, tier, country, credit_limit,
    amount and ``alert`` (a reason, or null when the order is fine)."""
    joined = orders.join(F.broadcast(customers), on="customer_id", how="left")
    amount = F.round(F.col("quantity") * F.col("unit_price"), 2)
    malformed = (F.col("order_id").isNull() | F.col("customer_id").isNull()
                 | F.col("quantity").isNull() | F.col("unit_price").isNull())
    alert = (F.when(malformed, F.lit(MALFORMED))
             .when(F.col("name").isNull(), F.lit(UNKNOWN_CUSTOMER))
             .when(amount > F.col("credit_limit"), F.lit(OVER_CREDIT_LIMIT)))
    return joined.withColumn("amount", amount).withColumn("alert", alert)


def _message(topic: str, key: Column, fields: list[str]) -> Column:
    return F.struct(F.lit(topic).alias("__topic"), key.alias("__key"),
                    F.to_json(F.struct(*fields)).cast("binary").alias("value"))


ENRICHED_FIELDS = ["order_id", "customer_id", "name", "tier", "country", "sku", "quantity",
                   "unit_price", "amount", "source_id"]
ALERT_FIELDS = ["order_id", "customer_id", "amount", "alert", "source_id"]


def route_orders(enriched: DataFrame, enriched_topic: str, alerts_topic: str) -> DataFrame:
    """One output row per message to write: every well-formed order to
    ``enriched_topic``, every order with an alert to ``alerts_topic`` (a malformed one
    only there).  Both kinds come out of one projection (no union of two branches), so
    one streaming sink writes both topics in the same transaction."""
    to_enriched = F.when(F.col("alert").isNull() | (F.col("alert") != MALFORMED),
                         _message(enriched_topic, F.col("order_id"), ENRICHED_FIELDS))
    to_alerts = F.when(F.col("alert").isNotNull(),
                       _message(alerts_topic, F.col("order_id"), ALERT_FIELDS))
    messages = F.filter(F.array(to_enriched, to_alerts), lambda m: m.isNotNull())
    return enriched.select(F.explode(messages).alias("m")).select("m.__topic", "m.__key", "m.value")


def enrich(raw: DataFrame, customers: DataFrame, enriched_topic: str, alerts_topic: str) -> DataFrame:
    """The whole enrich job: Magnetar rows of ``orders`` in, rows for the sink out."""
    return route_orders(enrich_orders(parse_orders(raw), customers), enriched_topic, alerts_topic)


# ---- windowed_counts: events -> per key and event-time window, once -------------------

def event_time(events: DataFrame) -> Column:
    """A message's event time, its publish time when the producer set none (Pulsar's
    convention: 0 or absent means unset)."""
    et = F.col("__eventTime")
    return F.when(et.isNull() | (et.cast("long") == 0), F.col("__publishTime")).otherwise(et) \
            .cast("timestamp")


def windowed_counts(events: DataFrame, window: str, watermark: str) -> DataFrame:
    """Count messages per ``__key`` and tumbling event-time window.  With the watermark
    a window is final once the watermark passes its end, so in append mode each window
    is emitted once, with its final count."""
    timed = events.select(F.coalesce(F.col("__key"), F.lit("")).alias("key"),
                          event_time(events).alias("event_time"))
    return (timed.withWatermark("event_time", watermark)
                 .groupBy(F.window("event_time", window).alias("w"), "key")
                 .count()
                 .select("key", F.col("w.start").alias("window_start"),
                         F.col("w.end").alias("window_end"), "count"))


def counts_to_messages(counts: DataFrame) -> DataFrame:
    """One message per (key, window): JSON value (window bounds in epoch milliseconds,
    independent of the session time zone), keyed by the counted key."""
    value = F.to_json(F.struct("key", F.unix_millis("window_start").alias("window_start_ms"),
                               F.unix_millis("window_end").alias("window_end_ms"), "count"))
    return counts.select(F.col("key").alias("__key"), value.cast("binary").alias("value"))


# ---- archive: topic <-> Parquet ----------------------------------------------------------

ARCHIVE_COLUMNS = {  # Magnetar column -> Parquet column
    "value": "value", "__key": "key", "__topic": "topic", "__messageId": "message_id",
    "__publishTime": "publish_time", "__eventTime": "event_time",
    "__messageProperties": "properties",
}


def to_archive(rows: DataFrame) -> DataFrame:
    """Magnetar rows -> the Parquet layout (plain column names; publish_date to
    partition the files by day)."""
    out = rows.select(*[F.col(src).alias(dst) for src, dst in ARCHIVE_COLUMNS.items()])
    return out.withColumn("publish_date", F.to_date(F.col("publish_time").cast("timestamp")))


def from_archive(archived: DataFrame) -> DataFrame:
    """The Parquet layout -> rows for the sink, in their original order (topic, then
    message id's entry and batch index as stored), key kept."""
    return archived.select(F.col("value").cast("binary").alias("value"),
                           F.col("key").alias("__key"))
