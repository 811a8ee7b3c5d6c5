"""magnetar.spark's pure rules: offsets (parsing, resolving, data loss, rate limit,
splits) and option checking."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from magnetar.spark._offsets import (  # noqa: E402
    MagnetarOffsetError,
    OffsetSpec,
    Split,
    check_data_loss,
    from_spark,
    parse_offsets,
    plan_splits,
    rate_limit,
    resolve,
    to_spark,
)
from magnetar.spark._options import (  # noqa: E402
    MagnetarOptionError,
    read_options,
    transaction_key_for,
    write_options,
)

T = "persistent://public/default/orders"
P0, P1 = f"{T}-partition-0", f"{T}-partition-1"
SERVICE = {"service.url": "http://b:8080"}


def test_offsets_json_is_kafkas_shape_and_round_trips():
    spec = parse_offsets('{"orders": {"0": 12, "1": -2}, "plain": {"-1": 3}}', "startingOffsets")
    assert spec.per_partition == {P0: 12, P1: -2, "persistent://public/default/plain": 3}
    assert from_spark(to_spark({P0: 12, P1: 7})) == {P0: 12, P1: 7}
    assert to_spark({P1: 7, P0: 12}) == {T: {"0": 12, "1": 7}}
    assert parse_offsets(" Earliest ", "x").earliest and parse_offsets("latest", "x").latest


@pytest.mark.parametrize("text", ["first", '{"orders": 3}', '{"orders": {"0": -3}}',
                                  '{"orders": {"0": "1"}}', '{"bad topic": {"0": 1}}'])
def test_bad_offsets_say_what_is_expected(text):
    with pytest.raises(ValueError, match="startingOffsets.*'earliest', 'latest' or JSON"):
        parse_offsets(text, "startingOffsets")


def test_resolve_fills_unnamed_partitions_and_refuses_past_the_end():
    latest = {P0: 10, P1: 4}
    assert resolve(OffsetSpec(earliest=True), latest, -1, "s") == {P0: 0, P1: 0}
    assert resolve(OffsetSpec(latest=True), latest, -2, "s") == latest
    assert resolve(OffsetSpec(per_partition={P0: 3}), latest, -2, "s") == {P0: 3, P1: 0}
    assert resolve(OffsetSpec(per_partition={P0: -1}), latest, -2, "s") == {P0: 10, P1: 0}
    with pytest.raises(MagnetarOffsetError, match="entry 11 .* past its end"):
        resolve(OffsetSpec(per_partition={P0: 11}), latest, -2, "startingOffsets")
    with pytest.raises(MagnetarOffsetError, match="do not exist"):
        resolve(OffsetSpec(per_partition={"persistent://public/default/x": 1}), latest, -2, "s")


def test_data_loss_raises_with_the_fix_or_is_skipped_when_allowed():
    with pytest.raises(MagnetarOffsetError, match="no longer exists.*failOnDataLoss"):
        check_data_loss({P0: 3, P1: 2}, {P0: 5}, fail=True)
    with pytest.raises(MagnetarOffsetError, match="fewer than the offset 9"):
        check_data_loss({P0: 9}, {P0: 5}, fail=True)
    assert check_data_loss({P0: 9, P1: 2}, {P0: 5}, fail=False) == {P0: 0}
    # A partition added since: read from its start.
    assert check_data_loss({P0: 3}, {P0: 5, P1: 2}, fail=True) == {P0: 3, P1: 0}


def test_rate_limit_shares_the_budget_fairly_and_always_progresses():
    assert rate_limit({P0: 0, P1: 0}, {P0: 100, P1: 100}, None) == {P0: 100, P1: 100}
    assert rate_limit({P0: 0, P1: 0}, {P0: 100, P1: 100}, 10) == {P0: 5, P1: 5}
    # What a short partition cannot take goes to the other.
    assert rate_limit({P0: 0, P1: 0}, {P0: 2, P1: 100}, 10) == {P0: 2, P1: 8}
    # A budget smaller than the partitions with backlog still moves.
    end = rate_limit({P0: 0, P1: 0}, {P0: 5, P1: 5}, 1)
    assert sum(end.values()) == 1
    assert rate_limit({P0: 5}, {P0: 5, P1: 3}, 2) == {P0: 5, P1: 2}


def test_splits_cut_large_ranges_and_honour_min_partitions():
    assert plan_splits({P0: 2, P1: 4}, {P0: 5, P1: 4}) == [Split(P0, 2, 5)]
    pieces = plan_splits({P0: 0}, {P0: 5}, max_per_split=2)
    assert len(pieces) == 3 and all(s.end - s.start <= 2 for s in pieces)
    assert [(s.start, s.end) for s in pieces][0][0] == 0 and pieces[-1].end == 5
    assert all(a.end == b.start for a, b in zip(pieces, pieces[1:]))  # contiguous, no overlap
    splits = plan_splits({P0: 0, P1: 0}, {P0: 30, P1: 10}, min_partitions=4)
    assert len(splits) >= 4
    assert sum(s.end - s.start for s in splits) == 40
    assert plan_splits({P0: 0}, {P0: 1}, min_partitions=8) == [Split(P0, 0, 1)]


def test_unknown_options_name_the_nearest_known_one():
    with pytest.raises(MagnetarOptionError, match="unknown option 'startingoffset'.*'startingOffsets'"):
        read_options(SERVICE | {"topic": "t", "startingoffset": "earliest"}, streaming=True)
    with pytest.raises(MagnetarOptionError, match="'service.url' is required"):
        read_options({"topic": "t"}, streaming=False)


@pytest.mark.parametrize("opts, streaming, message", [
    ({}, False, "exactly one of 'topic'"),
    ({"topic": "a", "topics": "b"}, False, "exactly one.*got topic, topics"),
    ({"topic": "a,b"}, False, "use 'topics'"),
    ({"topic": "a", "endingOffsets": "latest"}, True, "'endingOffsets' is for batch"),
    ({"topic": "a", "endingOffsets": "earliest"}, False, "cannot be 'earliest'"),
    ({"topic": "a", "maxOffsetsPerTrigger": "5"}, False, "for streaming reads"),
    ({"topic": "a", "maxOffsetsPerTrigger": "lots"}, True, "must be an integer"),
    ({"topic": "a", "maxOffsetsPerTrigger": "0"}, True, "at least 1"),
    ({"topic": "a", "failOnDataLoss": "maybe"}, True, "true or false"),
    ({"topicsPattern": "public/default/(unclosed"}, True, "not a regular expression"),
    ({"topic": "bad name!"}, False, "option 'topic'"),
])
def test_invalid_read_options_are_refused_with_the_reason(opts, streaming, message):
    with pytest.raises(MagnetarOptionError, match=message):
        read_options(SERVICE | opts, streaming)


def test_read_defaults_follow_the_kafka_connector():
    batch = read_options(SERVICE | {"topics": "a, b,a"}, streaming=False)
    assert batch.topics == ("persistent://public/default/a", "persistent://public/default/b")
    assert batch.starting.earliest and batch.ending.latest and batch.fail_on_data_loss
    stream = read_options(SERVICE | {"topicsPattern": "t1/ns/ord.*", "maxOffsetsPerTrigger": "7"}, True)
    assert stream.starting.latest and stream.max_offsets_per_trigger == 7
    assert stream.pattern.matches("persistent://t1/ns/orders-partition-3")
    assert not stream.pattern.matches("persistent://t1/other/orders")


def test_write_options_need_a_destination_and_streams_a_key():
    with pytest.raises(MagnetarOptionError, match="option\\('topic'.*'__topic'"):
        write_options(SERVICE, streaming=False, has_topic_column=False)
    assert write_options(SERVICE, streaming=False, has_topic_column=True).topic is None
    with pytest.raises(MagnetarOptionError, match="checkpointLocation"):
        write_options(SERVICE | {"topic": "o"}, streaming=True, has_topic_column=False)
    with pytest.raises(MagnetarOptionError, match="may not contain '&'"):
        write_options(SERVICE | {"topic": "o", "transactionKeyPrefix": "a&b"}, True, False)
    opts = write_options(SERVICE | {"topic": "o", "checkpointLocation": "/ck/q1/"}, True, False)
    assert opts.transaction_key == transaction_key_for(None, "/ck/q1")  # same query, same key
    assert opts.transaction_key != transaction_key_for(None, "/ck/q2")
    assert opts.progress_topic.startswith("persistent://public/default/__magnetar-spark-sink-")


def test_the_sources_offsets_are_found_in_a_checkpoint_offsets_file():
    from magnetar.spark._offsets import checkpointed_source_offsets

    text = ('v1\n{"batchWatermarkMs":0,"conf":{"a":"b"}}\n{"persistent://public/default/orders": '
            '{"0": 16, "1": 3}}\n-\n{"logOffset": 4}\n')
    assert checkpointed_source_offsets(text) == {P0: 16, P1: 3}


def test_ack_subscription_needs_a_local_checkpoint_of_a_stream():
    base = SERVICE | {"topic": "o", "ackSubscription": "s"}
    with pytest.raises(MagnetarOptionError, match="local path"):
        write_options(base | {"checkpointLocation": "s3a://bucket/ck"}, True, False)
    with pytest.raises(MagnetarOptionError, match="streaming writes"):
        write_options(base | {"checkpointLocation": "/ck"}, False, False)
    assert write_options(base | {"checkpointLocation": "file:///tmp/ck"}, True, False).checkpoint_dir == "/tmp/ck"


def test_the_documented_schema_is_the_one_read():
    from magnetar.spark import SCHEMA, SCHEMA_STRUCT

    ddl = "struct<" + ",".join(f.replace(" ", ":", 1) for f in SCHEMA.split(", ")) + ">"
    assert SCHEMA_STRUCT.simpleString() == ddl


@pytest.mark.parametrize("name, value", [("service.url", "127.0.0.1:8080"),
                                         ("service.url", "http://a:8080,b:8080"),
                                         ("admin.url", "localhost")])
def test_urls_must_be_http(name, value):
    with pytest.raises(MagnetarOptionError, match=f"'{name}' must be http"):
        read_options(SERVICE | {"topic": "t", name: value}, streaming=False)


def test_options_spark_itself_passes_are_accepted():
    # A streaming query started with .queryName("...") hands that name to the sink.
    opts = write_options(SERVICE | {"topic": "o", "queryName": "enrich", "checkpointLocation": "/c"},
                         streaming=True, has_topic_column=False)
    assert opts.topic.endswith("/o")


def test_listener_name_reaches_the_connection_and_a_malformed_one_is_refused():
    options = read_options(SERVICE | {"topic": "t", "listener.name": "external"}, streaming=False)
    assert options.connection.listener_name == "external"
    assert read_options(SERVICE | {"topic": "t"}, streaming=False).connection.listener_name is None
    with pytest.raises(MagnetarOptionError, match="listener.name"):
        read_options(SERVICE | {"topic": "t", "listener.name": "ex ternal"}, streaming=False)


def test_tls_options_reach_the_client_and_the_admin_api(tmp_path):
    from magnetar.spark._broker import _admin_api, client
    from magnetar_runtime.local.certs import issue, make_ca

    ca = make_ca(tmp_path)
    cert = issue(ca, tmp_path, "job")
    options = read_options(SERVICE | {"topic": "t", "admin.url": "https://a:8081",
                                      "tls.trustCertsFilePath": str(ca.cert_file),
                                      "tls.certificateFilePath": str(cert.cert_file),
                                      "tls.privateKeyFilePath": str(cert.key_file)}, streaming=False)
    conn = options.connection
    assert conn.tls() == {"tls_trust_certs_file_path": str(ca.cert_file),
                          "tls_certificate_file_path": str(cert.cert_file),
                          "tls_private_key_file_path": str(cert.key_file)}
    c = client(conn)
    try:
        ssl = c._client.core.transport._ssl
        assert ssl is not None and ssl.check_hostname  # the CA and the name are checked
    finally:
        c.close()
    assert _admin_api(conn).ssl is not None
    assert read_options(SERVICE | {"topic": "t"}, streaming=False).connection.tls() == {}


def test_an_offset_trimmed_by_retention_fails_naming_the_range_or_moves_to_the_first_kept():
    # P0 holds entries 7..9 (0..6 trimmed); the checkpoint says 3.
    with pytest.raises(MagnetarOffsetError, match=r"entries 3\.\.6 of .* were deleted \(trimmed"):
        check_data_loss({P0: 3}, {P0: 10}, fail=True, earliest={P0: 7})
    assert check_data_loss({P0: 3}, {P0: 10}, fail=False, earliest={P0: 7}) == {P0: 7}
    assert check_data_loss({P0: 8}, {P0: 10}, fail=True, earliest={P0: 7}) == {P0: 8}  # nothing lost
    assert check_data_loss({}, {P0: 10}, fail=True, earliest={P0: 7}) == {P0: 7}  # a new partition
    assert resolve(OffsetSpec(earliest=True), {P0: 10}, -1, "s", {P0: 7}) == {P0: 7}
