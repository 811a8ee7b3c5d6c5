"""Streaming consume-transform-produce: ``orders`` -> ``orders-enriched`` and
``order-alerts``, joined with a static customer table, exactly once.

Every micro-batch is one Magnetar transaction covering both output topics (one sink,
the topic chosen per row by its ``__topic`` column), so an order's enriched record and
its alert become visible together or not at all, and a batch replayed after a crash is
not written twice.  A second driver started on the same checkpoint fences this one.
With ``--ack-subscription`` the orders a batch read are acknowledged on that
subscription in the same transaction.

    spark-submit spark-jobs/enrich.py --checkpoint /tmp/enrich-ckpt
"""

from __future__ import annotations

import sys
from pathlib import Path

import jobcommon
import transforms
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

DEFAULT_CUSTOMERS = str(Path(__file__).resolve().parent / "data" / "customers.csv")


def load_customers(spark: SparkSession, path: str) -> DataFrame:
    return spark.read.csv(path, header=True, schema=transforms.CUSTOMER_SCHEMA).cache()


def start(spark: SparkSession, args) -> StreamingQuery:
    orders = jobcommon.read_stream(spark, args, args.input_topic).load()
    out = transforms.enrich(orders, load_customers(spark, args.customers),
                            args.enriched_topic, args.alerts_topic)
    writer = (out.writeStream.format("magnetar").options(**jobcommon.connection_options(args))
              .option("checkpointLocation", args.checkpoint))
    if args.ack_subscription:
        writer = writer.option("ackSubscription", args.ack_subscription)
    return jobcommon.with_trigger(writer, args).start()


def parse_args(argv: list[str] | None):
    p = jobcommon.parser(__doc__.splitlines()[0])
    jobcommon.add_streaming_options(p)
    p.add_argument("--input-topic", default="orders")
    p.add_argument("--enriched-topic", default="orders-enriched")
    p.add_argument("--alerts-topic", default="order-alerts")
    p.add_argument("--ack-subscription", default=None, metavar="NAME",
                   help="also acknowledge the orders each micro-batch read on this subscription "
                        "of the input topic, in the batch's transaction (consume-transform-produce: "
                        "the subscription's position always matches the committed output)")
    p.add_argument("--customers", default=DEFAULT_CUSTOMERS,
                   help="CSV with customer_id,name,tier,country,credit_limit (default: the "
                        "one shipped in spark-jobs/data/)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spark = jobcommon.session("magnetar-enrich", args)
    query = start(spark, args)
    query.awaitTermination()  # raises if the query failed (e.g. this driver was fenced)
    return 0


if __name__ == "__main__":
    sys.exit(main())
