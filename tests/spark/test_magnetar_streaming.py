"""The ``magnetar`` data source's streaming read and exactly-once streaming write, on
local Spark against a real local Magnetar."""

from __future__ import annotations

import pickle

import pytest

import magnetar
import magnetar.spark
from tests.e2e.helpers import read_all
from tests.spark.shared import module_cluster_fixtures, options

pytestmark = pytest.mark.e2e


# One cluster for the module (tests/spark/shared.py): every test uses topics, keys and
# subscriptions of its own.
cluster, client = module_cluster_fixtures()

QUERY_TIMEOUT_S = 180


def produce(client, topic: str, values) -> None:
    producer = client.create_producer(topic, batching_enabled=False)  # one entry per message
    for v in values:
        producer.send(v.encode())
    producer.close()


def run_until_caught_up(query) -> None:
    """Wait for an availableNow query to finish; its failure raises here."""
    assert query.awaitTermination(QUERY_TIMEOUT_S), "the streaming query did not finish"
    if query.exception() is not None:
        raise query.exception()


def stream_to_parquet(spark, cluster, topic: str, out: str, checkpoint: str, **extra):
    df = spark.readStream.format("magnetar").options(**options(cluster), topic=topic, **extra).load()
    return (df.selectExpr("CAST(value AS STRING) AS v", "__messageId")
            .writeStream.format("parquet").option("path", out).option("checkpointLocation", checkpoint)
            .trigger(availableNow=True).start())


def test_streaming_read_resumes_from_its_checkpoint(spark, cluster, client, tmp_path):
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    produce(client, "s-in", [f"m{i}" for i in range(5)])
    query = stream_to_parquet(spark, cluster, "s-in", out, checkpoint,
                              startingOffsets="earliest", maxOffsetsPerTrigger="2")
    run_until_caught_up(query)
    assert sorted(r.v for r in spark.read.parquet(out).collect()) == [f"m{i}" for i in range(5)]
    # Trigger.AvailableNow keeps the rate limit: 5 entries in batches of at most 2.
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 5 and max(sizes) <= 2, sizes

    produce(client, "s-in", [f"m{i}" for i in range(5, 9)])
    # Restarted on the same checkpoint: only what came after the last batch is read
    # (startingOffsets applies to a new query only).
    query = stream_to_parquet(spark, cluster, "s-in", out, checkpoint, startingOffsets="earliest")
    run_until_caught_up(query)
    got = [r.v for r in spark.read.parquet(out).collect()]
    assert sorted(got) == sorted(f"m{i}" for i in range(9))  # each once


def test_max_offsets_per_trigger_caps_each_micro_batch(spark, cluster, client, tmp_path):
    produce(client, "s-rate", [f"r{i}" for i in range(7)])
    df = (spark.readStream.format("magnetar")
          .options(**options(cluster), topic="s-rate", startingOffsets="earliest",
                   maxOffsetsPerTrigger="3").load())
    sizes: list[int] = []
    query = (df.writeStream.foreachBatch(lambda batch, _id: sizes.append(batch.count()))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="0 seconds")
             .start())
    try:
        assert query.processAllAvailable() is None
    finally:
        query.stop()
    assert sum(sizes) == 7 and max(sizes) <= 3, sizes


def sink_query(spark, cluster, checkpoint: str):
    source = (spark.readStream.format("magnetar")
              .options(**options(cluster), topic="w-in", startingOffsets="earliest").load())
    # Two tasks per micro-batch, both sending into the batch's one transaction.
    return (source.selectExpr("value", "__key").repartition(2).writeStream.format("magnetar")
            .options(**options(cluster), topic="w-out").option("checkpointLocation", checkpoint)
            .trigger(processingTime="0 seconds").start())


def run_until_caught_up_and_stop(query) -> None:
    try:
        query.processAllAvailable()
    finally:
        query.stop()


def test_streaming_write_commits_a_replayed_batch_once(spark, cluster, client, tmp_path):
    checkpoint = tmp_path / "checkpoint"
    produce(client, "w-in", [f"a{i}" for i in range(4)])
    run_until_caught_up_and_stop(sink_query(spark, cluster, str(checkpoint)))
    assert sorted(read_all(client, "w-out")) == [f"a{i}".encode() for i in range(4)]
    reader = client.create_reader("w-out", magnetar.MessageId.earliest)
    entries = {reader.read_next(timeout_millis=10000).message_id().entry_id() for _ in range(4)}
    reader.close()
    assert len(entries) == 1  # one commit: the batch's rows of both tasks in one entry

    # The driver "crashed" after the sink committed batch 0 and before Spark recorded
    # it: without its commit-log entry Spark runs batch 0 again, same offsets, same id.
    commits = sorted((checkpoint / "commits").iterdir())
    assert [c.name for c in commits if not c.name.startswith(".")] == ["0"]
    for c in commits:
        c.unlink()
    produce(client, "w-in", ["b0"])
    run_until_caught_up_and_stop(sink_query(spark, cluster, str(checkpoint)))
    assert sorted(read_all(client, "w-out")) == sorted([f"a{i}".encode() for i in range(4)] + [b"b0"])


def test_the_sink_stays_exactly_once_on_brokers_that_commit_in_one_request(spark, cluster_factory, tmp_path):
    """The sink on brokers hosting the coordinators, which commit a small transaction in
    one request (issue 26, docs/transactions.md#one-request-transactions): a micro-batch's
    tasks attach to the driver's transaction (``transaction_from_id``) with sequence ids
    of their own, and the driver's commit sends its progress record and acks the input in
    it; none of them may keep its sends (another process commits), so each batch is still
    one transaction, its rows written once, a replayed batch not committed twice, the
    input's subscription moved with it."""
    hosted = cluster_factory(brokers=1, coordinator_in_broker=True)
    checkpoint = tmp_path / "checkpoint"
    with magnetar.Client(hosted.service_url) as c:

        def run() -> None:
            source = (spark.readStream.format("magnetar")
                      .options(**options(hosted), topic="h-in", startingOffsets="earliest").load())
            run_until_caught_up(
                source.selectExpr("value").repartition(2).writeStream.format("magnetar")
                .options(**options(hosted), topic="h-out", ackSubscription="copier")
                .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())

        produce(c, "h-in", [f"a{i}" for i in range(4)])
        run()
        assert sorted(read_all(c, "h-out")) == [f"a{i}".encode() for i in range(4)]
        for commit in (checkpoint / "commits").iterdir():  # batch 0 is replayed next
            commit.unlink()
        produce(c, "h-in", ["b0"])
        run()
        assert sorted(read_all(c, "h-out")) == sorted([f"a{i}".encode() for i in range(4)] + [b"b0"])
        produce(c, "h-in", ["later"])
        consumer = c.subscribe("h-in", "copier", initial_position=magnetar.InitialPosition.Earliest)
        assert consumer.receive(timeout_millis=10000).data() == b"later"
        consumer.close()


def test_a_query_on_a_new_checkpoint_with_the_same_key_starts_its_own_batch_ids(
        spark, cluster, client, tmp_path):
    def run(checkpoint: str, topic: str) -> None:
        source = (spark.readStream.format("magnetar")
                  .options(**options(cluster), topic=topic, startingOffsets="earliest").load())
        run_until_caught_up(
            source.select("value").writeStream.format("magnetar")
            .options(**options(cluster), topic="k-out", transactionKeyPrefix="shared-sink")
            .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())

    produce(client, "k-in-1", ["first"])
    run(str(tmp_path / "one"), "k-in-1")
    produce(client, "k-in-2", ["second"])
    run(str(tmp_path / "two"), "k-in-2")  # batch 0 again, of another query: not a replay
    assert sorted(read_all(client, "k-out")) == [b"first", b"second"]


def stream_writer(cluster, key: str, topic: str = "fence-out"):
    from pyspark.sql.types import BinaryType, StructField, StructType

    from magnetar.spark import MagnetarDataSource

    source = MagnetarDataSource({"service.url": ",".join(cluster.broker_urls), "topic": topic,
                                 "transactionKeyPrefix": key})
    return source.streamWriter(StructType([StructField("value", BinaryType())]), False)


def arrow(values: list[bytes]):
    """A task's input as Spark hands it to the writer: Arrow record batches."""
    import pyarrow as pa

    return iter([pa.RecordBatch.from_pydict({"value": pa.array(values, pa.binary())})])


def ship(writer):
    """What Spark does with a micro-batch's writer: pickle it for the tasks."""
    return pickle.loads(pickle.dumps(writer))


def test_a_newer_driver_fences_the_older_one(cluster, client):
    from magnetar.spark import MagnetarSparkError

    old = ship(stream_writer(cluster, "query-1"))
    old_done = old.write(arrow([b"old"]))
    new = ship(stream_writer(cluster, "query-1"))  # same key: the old transaction is aborted
    new_done = new.write(arrow([b"new"]))
    with pytest.raises(MagnetarSparkError, match="fenced"):
        stream_writer(cluster, "query-1").commit([old_done], 0)
    stream_writer(cluster, "query-1").commit([new_done], 0)
    assert read_all(client, "fence-out") == [b"new"]


def test_a_retried_task_is_stored_once(cluster, client):
    writer = ship(stream_writer(cluster, "query-2", "retry-out"))
    rows = [f"r{i}".encode() for i in range(5)]
    writer.write(arrow(rows[:3]))  # the first attempt dies after three rows ...
    done = writer.write(arrow(rows))  # ... the retry sends all of them again
    stream_writer(cluster, "query-2", "retry-out").commit([done], 0)
    assert read_all(client, "retry-out") == [f"r{i}".encode() for i in range(5)]
    assert magnetar.spark.last_committed_batch(client, stream_writer(cluster, "query-2").opts.progress_topic) == 0


def test_ack_subscription_moves_with_the_committed_output(spark, cluster, client, tmp_path):
    produce(client, "cp-in", [f"c{i}" for i in range(4)])
    source = (spark.readStream.format("magnetar")
              .options(**options(cluster), topic="cp-in", startingOffsets="earliest").load())
    query = (source.selectExpr("value").writeStream.format("magnetar")
             .options(**options(cluster), topic="cp-out", ackSubscription="copier")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    run_until_caught_up(query)
    assert sorted(read_all(client, "cp-out")) == [f"c{i}".encode() for i in range(4)]
    # Everything the committed batches read is acknowledged on the subscription: a
    # consumer of it gets only what came after.
    produce(client, "cp-in", ["later"])
    consumer = client.subscribe("cp-in", "copier", initial_position=magnetar.InitialPosition.Earliest)
    assert consumer.receive(timeout_millis=10000).data() == b"later"
    consumer.close()


def test_fail_on_data_loss_stops_a_query_whose_topic_was_recreated(spark, cluster, client, tmp_path):
    from magnetar.admin_cli._http import AdminApi

    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    produce(client, "lossy", [f"old{i}" for i in range(3)])
    run_until_caught_up(stream_to_parquet(spark, cluster, "lossy", out, checkpoint,
                                          startingOffsets="earliest"))
    AdminApi(cluster.admin_url).request("DELETE", "/admin/v2/persistent/public/default/lossy",
                                        query={"force": "true"})
    produce(client, "lossy", ["new0"])  # created again: 1 entry, the checkpoint says 3
    with pytest.raises(Exception, match="data lost.*failOnDataLoss"):
        run_until_caught_up(stream_to_parquet(spark, cluster, "lossy", out, checkpoint))
    run_until_caught_up(stream_to_parquet(spark, cluster, "lossy", out, checkpoint,
                                          failOnDataLoss="false"))
    assert sorted(r.v for r in spark.read.parquet(out).collect()) == ["new0", "old0", "old1", "old2"]


def test_the_commit_reads_only_the_newest_progress_entries(cluster, client):
    import json

    from magnetar.spark._options import write_options
    from magnetar.spark._writer import PROGRESS_TAIL_ENTRIES, _progress_tail, last_committed_batch

    opts = write_options(options(cluster) | {"topic": "o", "transactionKeyPrefix": "tail"},
                         streaming=True, has_topic_column=False)
    assert _progress_tail(opts) == 0  # no progress topic yet: read it all
    producer = client.create_producer(opts.progress_topic, batching_enabled=False)
    for batch in range(100):  # one entry per committed batch, as the sink writes them
        producer.send(json.dumps({"batchId": batch, "queryId": "q1"}).encode())
    first = _progress_tail(opts)
    assert first == 100 - PROGRESS_TAIL_ENTRIES
    assert last_committed_batch(client, opts.progress_topic, "q1", first) == 99
    assert last_committed_batch(client, opts.progress_topic, "q2", first) is None


def test_a_checkpoint_whose_entries_were_trimmed_fails_naming_them_or_skips_them(spark, cluster, client, tmp_path):
    from magnetar.admin_cli._http import AdminApi
    from tests.waiting import wait_until

    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    produce(client, "trimmed", [f"m{i}" for i in range(3)])
    run_until_caught_up(stream_to_parquet(spark, cluster, "trimmed", out, checkpoint,
                                          startingOffsets="earliest"))  # checkpoint: entry 3 next
    produce(client, "trimmed", [f"m{i}" for i in range(3, 10)])
    api = AdminApi(cluster.admin_url)
    path = "/admin/v2/persistent/public/default/trimmed"
    # Retention 0 and no subscription: everything but the newest entry is trimmed.
    api.request("POST", path + "/retention", {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0})
    wait_until(lambda: api.request("GET", path + "/internalStats")["firstEntry"] == "9:-1", 15,
               "entries 0..8 trimmed")
    with pytest.raises(Exception, match=r"entries 3\.\.8 of persistent://public/default/trimmed were deleted"):
        run_until_caught_up(stream_to_parquet(spark, cluster, "trimmed", out, checkpoint))
    run_until_caught_up(stream_to_parquet(spark, cluster, "trimmed", out, checkpoint, failOnDataLoss="false"))
    assert sorted(r.v for r in spark.read.parquet(out).collect()) == ["m0", "m1", "m2", "m9"]
