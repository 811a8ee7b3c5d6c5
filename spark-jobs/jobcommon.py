"""What every job in spark-jobs/ shares: its command-line options and its SparkSession.

The options mirror the ``magnetar`` data source's (docs/spark.md): ``--service-url`` is
``service.url``, ``--admin-url`` is ``admin.url``, ``--auth-token`` is ``auth.token``.
"""

from __future__ import annotations

import argparse
import os

from pyspark.sql import DataFrameReader, SparkSession
from pyspark.sql.streaming import DataStreamReader, DataStreamWriter

DEFAULT_SERVICE_URL = "http://127.0.0.1:8080"  # `make run`'s broker-0
DEFAULT_ADMIN_URL = "http://127.0.0.1:8081"  # `make run`'s admin service


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--service-url", default=os.environ.get("MAGNETAR_SERVICE_URL", DEFAULT_SERVICE_URL),
                   help="broker URL(s), comma-separated (default %(default)s)")
    p.add_argument("--admin-url", default=os.environ.get("MAGNETAR_ADMIN_URL", DEFAULT_ADMIN_URL),
                   help="admin service URL (default %(default)s)")
    p.add_argument("--auth-token", default=os.environ.get("MAGNETAR_AUTH_TOKEN"),
                   help="JWT sent as a bearer token (default: $MAGNETAR_AUTH_TOKEN, or none)")
    p.add_argument("--tls-trust-cert-path", default=os.environ.get("MAGNETAR_TLS_TRUST_CERT_PATH"),
                   help="CA verifying https:// services (default: $MAGNETAR_TLS_TRUST_CERT_PATH)")
    p.add_argument("--tls-cert-file", default=os.environ.get("MAGNETAR_TLS_CERT_FILE"),
                   help="client certificate under mutual TLS (default: $MAGNETAR_TLS_CERT_FILE)")
    p.add_argument("--tls-key-file", default=os.environ.get("MAGNETAR_TLS_KEY_FILE"),
                   help="its key (default: $MAGNETAR_TLS_KEY_FILE)")
    # A handful of shuffle partitions: these jobs' state is small, and Spark's default of
    # 200 makes every stateful micro-batch run 200 tasks.  Fixed at a query's first start.
    p.add_argument("--shuffle-partitions", type=int, default=4)
    p.add_argument("--log-level", default="WARN", help="Spark's log level (default %(default)s)")
    return p


def add_streaming_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True,
                   help="Spark checkpoint folder; also names the transaction key that fences "
                        "an older driver of the same query")
    p.add_argument("--trigger-seconds", type=float, default=1.0,
                   help="micro-batch interval (default %(default)s)")
    p.add_argument("--max-offsets-per-trigger", type=int, default=None,
                   help="at most this many entries (producer batches) per micro-batch, as the "
                        "source's maxOffsetsPerTrigger counts them (default: no limit)")
    p.add_argument("--starting-offsets", default="earliest",
                   help="where a query without a checkpoint starts (default %(default)s)")
    p.add_argument("--available-now", action="store_true",
                   help="process what is in the topic now (an unfinished batch of an earlier run "
                        "first), in batches of --max-offsets-per-trigger, then stop")


def session(app_name: str, args: argparse.Namespace) -> SparkSession:
    """The active session (a test's, or spark-submit's), else a new one; with the
    ``magnetar`` format registered."""
    import magnetar.spark

    spark = (SparkSession.builder.appName(app_name)
             .config("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
             .getOrCreate())
    spark.sparkContext.setLogLevel(args.log_level)
    magnetar.spark.register(spark)
    return spark


def connection_options(args: argparse.Namespace) -> dict[str, str]:
    options = {"service.url": args.service_url, "admin.url": args.admin_url}
    if args.auth_token:
        options["auth.token"] = args.auth_token
    for option, value in (("tls.trustCertsFilePath", args.tls_trust_cert_path),
                          ("tls.certificateFilePath", args.tls_cert_file),
                          ("tls.privateKeyFilePath", args.tls_key_file)):
        if value:
            options[option] = value
    return options


def read_stream(spark: SparkSession, args: argparse.Namespace, topic: str) -> DataStreamReader:
    reader = (spark.readStream.format("magnetar").options(**connection_options(args))
              .option("topic", topic).option("startingOffsets", args.starting_offsets))
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
    return reader


def read_batch(spark: SparkSession, args: argparse.Namespace) -> DataFrameReader:
    return spark.read.format("magnetar").options(**connection_options(args))


def with_trigger(writer: DataStreamWriter, args: argparse.Namespace) -> DataStreamWriter:
    if args.available_now:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=f"{int(args.trigger_seconds * 1000)} milliseconds")
