"""The ``magnetar`` data source's batch read and write on local Spark against a real
local Magnetar: round trip, atomic writes, committed-only reads, option errors."""

from __future__ import annotations

import datetime as dt

import pytest

import magnetar
from magnetar.admin_cli._http import AdminApi
from tests.e2e.helpers import read_all
from tests.spark.shared import module_cluster_fixtures, options

pytestmark = pytest.mark.e2e


# One cluster for the module (tests/spark/shared.py): every test uses topics, keys and
# subscriptions of its own.
cluster, client = module_cluster_fixtures()


def read(spark, cluster, **extra):
    return spark.read.format("magnetar").options(**options(cluster), **extra).load()


def test_batch_round_trip_keeps_values_keys_properties_and_times(spark, cluster, client):
    rows = [(f"v{i}".encode(), f"k{i % 3}", {"i": str(i)}, dt.datetime(2026, 1, 1, 12, 0, i))
            for i in range(20)]
    df = spark.createDataFrame(rows, "value binary, __key string, "
                                     "__messageProperties map<string,string>, __eventTime timestamp")
    df.repartition(2).write.mode("append").format("magnetar").options(**options(cluster), topic="rt").save()

    got = read(spark, cluster, topic="rt").collect()
    assert sorted(bytes(r.value) for r in got) == sorted(v for v, *_ in rows)
    by_value = {bytes(r.value): r for r in got}
    for value, key, props, event in rows:
        r = by_value[value]
        assert (r["__key"], r["__messageProperties"], r["__eventTime"]) == (key, props, event)
        assert r["__topic"] == "persistent://public/default/rt"
        assert r["__publishTime"] is not None
    # One transaction: every row of the job sits in one committed entry.
    assert len({r["__messageId"].split(":")[1] for r in got}) == 1


def test_rows_go_to_their_topic_column_unless_the_topic_option_is_set(spark, cluster, client):
    df = spark.createDataFrame([(b"a1", "route-a"), (b"b1", "route-b"), (b"a2", "route-a")],
                               "value binary, __topic string")
    df.write.mode("append").format("magnetar").options(**options(cluster)).save()
    assert sorted(read_all(client, "route-a")) == [b"a1", b"a2"]
    assert read_all(client, "route-b") == [b"b1"]
    # As in Spark's Kafka sink the option overrides the column: a DataFrame read from one
    # topic and written with .option("topic", ...) never goes back to where it came from.
    read(spark, cluster, topic="route-a").write.mode("append").format("magnetar").options(
        **options(cluster), topic="route-copy").save()
    assert sorted(read_all(client, "route-copy")) == [b"a1", b"a2"]
    assert sorted(read_all(client, "route-a")) == [b"a1", b"a2"]


def test_batch_read_is_bounded_and_split_by_partition_and_range(spark, cluster, client):
    AdminApi(cluster.admin_url).request("PUT", "/admin/v2/persistent/public/default/split/partitions", 2)
    for i in range(2):
        p = client.create_producer(f"split-partition-{i}", batching_enabled=False)
        for j in range(6):
            p.send(f"p{i}-{j}".encode())  # one entry each: entry ids 0..5
    whole = read(spark, cluster, topic="split")
    assert whole.rdd.getNumPartitions() == 2  # one split per partition
    assert whole.count() == 12
    ranged = read(spark, cluster, topic="split", maxRecordsPerPartition="2",
                  startingOffsets='{"split": {"0": 1, "1": -2}}',
                  endingOffsets='{"split": {"0": 5, "1": 0}}')
    assert ranged.rdd.getNumPartitions() == 2  # entries 1-2 and 3-4 of partition 0
    assert sorted(bytes(r.value) for r in ranged.collect()) == [b"p0-1", b"p0-2", b"p0-3", b"p0-4"]
    assert {r["__messageId"].split(":")[0] for r in ranged.collect()} == {"0"}


def test_a_failing_task_leaves_nothing_of_the_write_visible(spark, cluster, client):
    from pyspark.sql.functions import col, udf

    @udf("binary")
    def explode_on_13(value):
        if value == b"13":
            raise RuntimeError("task fails midway")
        return value

    client.create_producer("atomic").send(b"before")
    df = spark.createDataFrame([(str(i).encode(),) for i in range(40)], "value binary").repartition(2)
    with pytest.raises(Exception, match="task fails midway"):
        (df.select(explode_on_13(col("value")).alias("value"))
         .write.mode("append").format("magnetar").options(**options(cluster), topic="atomic").save())
    # The other task's rows were sent into the job's transaction, which was aborted.
    assert read_all(client, "atomic") == [b"before"]
    assert [bytes(r.value) for r in read(spark, cluster, topic="atomic").collect()] == [b"before"]


def test_aborted_transactions_never_appear_in_rows(spark, cluster, client):
    producer = client.create_producer("mixed")
    producer.send(b"plain-1")
    aborted = client.new_transaction()
    for i in range(5):
        producer.send(f"aborted-{i}".encode(), txn=aborted)
    committed = client.new_transaction()
    producer.send(b"committed", txn=committed)
    aborted.abort()
    committed.commit()
    producer.send(b"plain-2")
    got = sorted(bytes(r.value) for r in read(spark, cluster, topic="mixed").collect())
    assert got == [b"committed", b"plain-1", b"plain-2"]


def test_bad_options_name_the_option_and_the_fix(spark, cluster):
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    errors = (PySparkException, Py4JJavaError, ValueError)
    with pytest.raises(errors, match="unknown option 'topci'.*did you mean 'topic'"):
        read(spark, cluster, topci="x").collect()
    with pytest.raises(errors, match="exactly one of 'topic', 'topics'"):
        read(spark, cluster).collect()
    with pytest.raises(errors, match="startingOffsets"):
        read(spark, cluster, topic="x", startingOffsets="first").collect()
    df = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(errors, match="option\\('topic'"):
        df.write.mode("append").format("magnetar").options(**options(cluster)).save()


def test_a_write_whose_transaction_ended_early_fails_naming_the_timeout(cluster, client):
    from pyspark.sql.types import BinaryType, StructField, StructType

    from magnetar.spark import MagnetarDataSource, MagnetarSparkError

    source = MagnetarDataSource(options(cluster) | {"topic": "late"})
    writer = source.writer(StructType([StructField("value", BinaryType())]), False)
    client.transaction_from_id(magnetar.TxnID(*writer.txn)).abort()  # as a timeout would
    with pytest.raises(MagnetarSparkError, match="could not commit.*transactionTimeoutMs"):
        writer.commit([])


def test_topics_and_topics_pattern_read_every_matching_topic(spark, cluster, client):
    for topic in ("pat-orders-eu", "pat-orders-us", "pat-other"):
        client.create_producer(topic).send(topic.encode())
    by_pattern = read(spark, cluster, topicsPattern="public/default/pat-orders-.*").collect()
    assert sorted(bytes(r.value) for r in by_pattern) == [b"pat-orders-eu", b"pat-orders-us"]
    by_list = read(spark, cluster, topics="pat-orders-eu,pat-other").collect()
    assert sorted(r["__topic"] for r in by_list) == ["persistent://public/default/pat-orders-eu",
                                                     "persistent://public/default/pat-other"]


AUTH_SECRET = "spark-test-secret-of-at-least-32-bytes"


def test_auth_token_reaches_the_brokers_and_the_admin_api(spark, cluster_factory):
    import jwt

    cluster = cluster_factory(env={"MAGNETAR_AUTH_ENABLED": "true",
                                   "MAGNETAR_AUTH_JWT_SECRET": AUTH_SECRET,
                                   "MAGNETAR_AUTH_SUPERUSER_ROLES": "admin"})

    token = jwt.encode({"sub": "admin"}, AUTH_SECRET, algorithm="HS256")
    df = spark.createDataFrame([(b"secret",)], "value binary")
    df.write.mode("append").format("magnetar").options(**options(cluster), topic="authed").option(
        "auth.token", token).save()
    got = read(spark, cluster, topic="authed", **{"auth.token": token}).collect()
    assert [bytes(r.value) for r in got] == [b"secret"]
    with pytest.raises(Exception, match="(?i)authenticat|401"):
        read(spark, cluster, topic="authed").collect()


def test_the_example_in_docs_spark_md_runs(spark, cluster, client, tmp_path):
    import pathlib
    import re

    client.create_producer("orders").send(b"hello", partition_key="k")
    text = (pathlib.Path(__file__).parents[2] / "docs" / "spark.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    code = (code.replace('"http://127.0.0.1:8080"', repr(",".join(cluster.broker_urls)))
            .replace('"http://127.0.0.1:8081"', repr(cluster.admin_url))
            .replace("/tmp/orders-upper.checkpoint", str(tmp_path / "checkpoint")))
    scope: dict = {}
    exec(code, scope)  # the session it builds is the tests' own (getOrCreate)
    query = scope["query"]
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert read_all(client, "orders-copy") == [b"hello"]
    assert read_all(client, "orders-upper") == [b"HELLO"]
