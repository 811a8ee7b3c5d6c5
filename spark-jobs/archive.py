"""Batch archive of a topic: ``export`` a range of it to Parquet; ``import`` Parquet
files into a topic in one transaction (all rows visible at once, or none).

    spark-submit spark-jobs/archive.py export --topic orders --path /tmp/orders.parquet \
        [--starting-offsets earliest] [--ending-offsets latest]
    spark-submit spark-jobs/archive.py import --path /tmp/orders.parquet --topic orders-restored
"""

from __future__ import annotations

import sys

import jobcommon
import transforms
from pyspark.sql import SparkSession


def export(spark: SparkSession, args) -> int:
    """Rows of ``args.topic`` between the offsets -> Parquet at ``args.path``,
    partitioned by publish date.  Returns the number of rows written."""
    rows = (jobcommon.read_batch(spark, args).option("topic", args.topic)
            .option("startingOffsets", args.starting_offsets)
            .option("endingOffsets", args.ending_offsets).load())
    archived = transforms.to_archive(rows).cache()  # counted, then written: read once
    count = archived.count()
    archived.write.mode(args.mode).partitionBy("publish_date").parquet(args.path)
    archived.unpersist()
    return count


def import_(spark: SparkSession, args) -> int:
    """Parquet at ``args.path`` -> ``args.topic``, one transaction for the whole job.
    Returns the number of rows written."""
    rows = transforms.from_archive(spark.read.parquet(args.path)).cache()
    count = rows.count()
    (rows.write.format("magnetar").options(**jobcommon.connection_options(args))
         .option("topic", args.topic).mode("append").save())
    rows.unpersist()
    return count


def parse_args(argv: list[str] | None):
    p = jobcommon.parser(__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    exp = sub.add_parser("export", help="topic range -> Parquet")
    exp.add_argument("--topic", required=True)
    exp.add_argument("--path", required=True, help="Parquet output folder")
    exp.add_argument("--starting-offsets", default="earliest",
                     help="earliest, or JSON per partition as in docs/spark.md")
    exp.add_argument("--ending-offsets", default="latest",
                     help="latest, or JSON per partition as in docs/spark.md")
    exp.add_argument("--mode", default="errorifexists", choices=["errorifexists", "overwrite"],
                     help="when --path exists: fail (default) or replace it")
    imp = sub.add_parser("import", help="Parquet -> topic, in one transaction")
    imp.add_argument("--path", required=True, help="Parquet folder written by export")
    imp.add_argument("--topic", required=True)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    spark = jobcommon.session("magnetar-archive", args)
    if args.command == "export":
        print(f"exported {export(spark, args)} messages of {args.topic} to {args.path}")
    else:
        print(f"imported {import_(spark, args)} messages from {args.path} into {args.topic}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
