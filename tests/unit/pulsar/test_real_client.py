"""The real `pulsar-client` wheel (3.13) against a stub broker built on our frames module:
what the wheel sends decodes through batches.py into the right MessageBatch, and what
our encoder builds from a MessageBatch the wheel's consumer receives intact.

No database and no Magnetar service: the stub (tests/unit/pulsar/stub_broker.py) answers
discovery with itself and records every frame.  Every client call has a timeout and
every wait on the stub a deadline.
"""

from __future__ import annotations

import logging
import socket
import struct
import time

import pulsar
import pytest

from magnetar_protocol import magnetar_pb2 as mpb
from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.pulsar import batches, frames

from .stub_broker import StubBroker

TOPIC = "persistent://public/default/codec"
TIMEOUT_MS = 10_000
COMPRESSIONS = {
    "LZ4": (pulsar.CompressionType.LZ4, pb.LZ4),
    "ZLIB": (pulsar.CompressionType.ZLib, pb.ZLIB),
    "ZSTD": (pulsar.CompressionType.ZSTD, pb.ZSTD),
    "SNAPPY": (pulsar.CompressionType.SNAPPY, pb.SNAPPY),
}


@pytest.fixture
def broker():
    with StubBroker() as stub:
        yield stub


@pytest.fixture
def client(broker):
    c = pulsar.Client(broker.url, operation_timeout_seconds=10, connection_timeout_ms=5000,
                      logger=logging.getLogger("pulsar-client"))
    yield c
    c.close()


def _message(i: int) -> dict:
    """The i-th test message: every field a producer can set, distinct per message."""
    return dict(
        content=f"payload {i} ".encode() + bytes(range(i % 7)) * 20,   # compressible, binary
        properties={"index": str(i), "kind": "codec-test"},
        partition_key=f"key-{i % 3}",
        ordering_key=f"order-{i % 2}",
        event_timestamp=1_700_000_000_000 + i,
        sequence_id=100 + i,
    )


def _assert_decoded(sends, expected: list[dict]) -> None:
    """The recorded SEND frames, through batches.py, are exactly the expected messages."""
    decoded = [m for frame in sends for m in batches.unpack_entry(frame.metadata, frame.payload)]
    assert [m.ordering_key for m in decoded] == [e["ordering_key"].encode() for e in expected]
    magnetar = mpb.MessageBatch()
    for frame in sends:
        magnetar.MergeFrom(batches.to_message_batch(frame.metadata, frame.payload))
    # Each message keeps its entry's publish time, the wheel's clock.
    publish = [frame.metadata.publish_time for frame in sends
               for _ in range(frame.metadata.num_messages_in_batch if frame.metadata.HasField(
                   "num_messages_in_batch") else 1)]
    assert [m.publish_time for m in magnetar.messages] == publish and all(publish)
    for m in magnetar.messages:
        m.ClearField("publish_time")
    assert magnetar == mpb.MessageBatch(messages=[
        mpb.SingleMessage(payload=e["content"], properties=e["properties"],
                          partition_key=e["partition_key"], event_time=e["event_timestamp"],
                          sequence_id=e["sequence_id"], ordering_key=e["ordering_key"].encode())
        for e in expected])


def test_unbatched_sends_decode_into_magnetar_messages(broker, client):
    producer = client.create_producer(TOPIC, producer_name="unbatched", send_timeout_millis=TIMEOUT_MS)
    expected = [_message(i) for i in range(3)]
    for fields in expected:
        producer.send(**fields)
    producer.close()
    sends = broker.wait_for(lambda r: len(r.sends) >= 3 and r.sends, "3 SEND frames")
    assert [f.command.send.sequence_id for f in sends] == [100, 101, 102]
    assert all(not f.metadata.HasField("num_messages_in_batch") for f in sends)
    assert {f.metadata.producer_name for f in sends} == {"unbatched"}
    _assert_decoded(sends, expected)


@pytest.mark.parametrize("compression", [None, *COMPRESSIONS])
def test_batched_sends_decode_into_one_magnetar_batch(broker, client, compression):
    wheel_type, wire_type = COMPRESSIONS.get(compression, (pulsar.CompressionType.NONE, pb.NONE))
    producer = client.create_producer(
        TOPIC, producer_name=f"batched-{compression}", send_timeout_millis=TIMEOUT_MS,
        batching_enabled=True, batching_max_messages=5, batching_max_publish_delay_ms=60_000,
        compression_type=wheel_type)
    expected = [_message(i) for i in range(5)]
    for fields in expected:
        producer.send_async(callback=lambda result, msg_id: None, **fields)
    producer.flush()
    producer.close()
    sends = broker.wait_for(lambda r: r.sends, "a SEND frame")
    assert len(sends) == 1, "5 messages, batching_max_messages=5: one batch"
    send = sends[0]
    assert send.command.send.num_messages == 5
    assert send.command.send.sequence_id == 100
    # The wheel leaves highest_sequence_id unset when a batch's ids are consecutive: the
    # listener's dedup must read it as sequence_id + num_messages - 1.
    assert not send.command.send.HasField("highest_sequence_id")
    assert send.metadata.num_messages_in_batch == 5
    assert send.metadata.compression == wire_type
    if wire_type != pb.NONE:
        assert len(send.payload) < send.metadata.uncompressed_size, "the wheel did compress"
    _assert_decoded(sends, expected)


@pytest.mark.parametrize("compression", list(COMPRESSIONS))
def test_unbatched_compressed_send_decodes(broker, client, compression):
    wheel_type, wire_type = COMPRESSIONS[compression]
    producer = client.create_producer(TOPIC, producer_name=f"single-{compression}",
                                      send_timeout_millis=TIMEOUT_MS, compression_type=wheel_type)
    expected = [_message(6)]
    producer.send(**expected[0])
    producer.close()
    sends = broker.wait_for(lambda r: r.sends, "a SEND frame")
    assert sends[0].metadata.compression == wire_type
    _assert_decoded(sends, expected)


def _magnetar_batch(first: int, count: int) -> mpb.MessageBatch:
    return mpb.MessageBatch(messages=[
        mpb.SingleMessage(payload=f"magnetar {i} ".encode() * 8, properties={"n": str(i)},
                          partition_key=f"k{i}", event_time=1_600_000_000_000 + i, sequence_id=i,
                          ordering_key=f"o{i}".encode())
        for i in range(first, first + count)])


def test_consumer_receives_entries_encoded_from_magnetar_batches(broker, client):
    entries = [
        (_magnetar_batch(0, 1), pb.NONE),      # one message: sent unbatched
        (_magnetar_batch(1, 3), pb.NONE),      # a batch
        (_magnetar_batch(4, 2), pb.LZ4),
        (_magnetar_batch(6, 2), pb.ZLIB),
        (_magnetar_batch(8, 2), pb.ZSTD),
        (_magnetar_batch(10, 2), pb.SNAPPY),
    ]
    entry_ids = set()
    for batch, compression in entries:
        metadata, payload = batches.to_pulsar_entry(
            batch, producer_name="magnetar", publish_time=1_650_000_000_000, compression=compression)
        entry_ids.add(broker.queue("sub", metadata, payload))
    consumer = client.subscribe(TOPIC, "sub", consumer_type=pulsar.ConsumerType.Exclusive)
    expected = [m for batch, _ in entries for m in batch.messages]
    received = []
    for _ in expected:
        message = consumer.receive(timeout_millis=TIMEOUT_MS)
        received.append(message)
        consumer.acknowledge(message)
    assert [m.data() for m in received] == [e.payload for e in expected]
    assert [m.properties() for m in received] == [dict(e.properties) for e in expected]
    assert [m.partition_key() for m in received] == [e.partition_key for e in expected]
    assert [m.event_timestamp() for m in received] == [e.event_time for e in expected]
    assert [m.ordering_key().encode() for m in received] == [e.ordering_key for e in expected]
    assert {m.publish_timestamp() for m in received} == {1_650_000_000_000}
    # Acks are grouped by the client: wait until every entry is acknowledged.
    broker.wait_for(
        lambda r: {mid.entry_id for ack in r.acks for mid in ack.message_id} >= entry_ids,
        f"ACK frames for entries {sorted(entry_ids)}")
    consumer.close()
    assert not broker.recorded.errors


def test_the_wheel_connects_with_protocol_20_and_broker_entry_metadata_support(broker, client):
    client.create_producer(TOPIC, send_timeout_millis=TIMEOUT_MS).close()
    connect = broker.wait_for(
        lambda r: next((f.body for f in r.frames if f.type == pb.BaseCommand.CONNECT), None),
        "a CONNECT frame")
    assert connect.client_version.startswith("Pulsar-CPP-")
    assert connect.protocol_version == 20 and connect.auth_method_name == "none"
    assert connect.feature_flags.supports_broker_entry_metadata


def test_a_bad_frame_on_one_connection_is_answered_while_the_wheel_keeps_producing(broker, client):
    producer = client.create_producer(TOPIC, producer_name="steady", send_timeout_millis=TIMEOUT_MS)
    producer.send(b"before")
    host, port = broker.url.removeprefix("pulsar://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(struct.pack(">I", 0xFFFFFF00) + b"garbage")
        decoder = frames.FrameDecoder()
        deadline = time.monotonic() + 10
        while (frame := decoder.next_frame()) is None:
            assert time.monotonic() < deadline, "no ERROR frame for the oversize frame"
            decoder.feed(raw.recv(4096))
        assert frame.type == pb.BaseCommand.ERROR
        assert "exceeds the limit" in frame.body.message
        assert raw.recv(4096) == b"", "the stub closes the connection it cannot resync"
    producer.send(b"after")
    sends = broker.wait_for(lambda r: len(r.sends) >= 2 and r.sends, "both SEND frames")
    assert [f.payload for f in sends] == [b"before", b"after"]
    assert broker.recorded.errors == ["FrameTooLarge: frame of 4294967044 bytes exceeds the limit of 5253120"]


def test_token_authentication_arrives_in_connect(broker):
    token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJl"
    authenticated = pulsar.Client(broker.url, authentication=pulsar.AuthenticationToken(token),
                                  operation_timeout_seconds=10, logger=logging.getLogger("pulsar-client"))
    try:
        authenticated.create_producer(TOPIC, send_timeout_millis=TIMEOUT_MS).close()
    finally:
        authenticated.close()
    connect = broker.wait_for(
        lambda r: next((f.body for f in r.frames if f.type == pb.BaseCommand.CONNECT), None),
        "a CONNECT frame")
    assert (connect.auth_method_name, connect.auth_data) == ("token", token.encode())


@pytest.mark.parametrize("compression", ["LZ4", "ZSTD"])
def test_entries_stored_as_they_came_reach_a_consumer_with_every_field(broker, client, compression):
    """The storage choice of docs/pulsar-protocol.md: a producer's entry kept as sent
    (metadata bytes + payload) and framed into MESSAGE as is keeps what MessageBatch
    cannot hold yet: ordering key, the producer's publish time."""
    producer = client.create_producer(
        TOPIC, producer_name="as-is", send_timeout_millis=TIMEOUT_MS, batching_enabled=True,
        batching_max_messages=4, batching_max_publish_delay_ms=60_000,
        compression_type=COMPRESSIONS[compression][0])
    expected = [_message(i) for i in range(4)]
    for fields in expected:
        producer.send_async(callback=lambda result, msg_id: None, **fields)
    producer.flush()
    producer.close()
    (send,) = broker.wait_for(lambda r: r.sends, "a SEND frame")
    broker.queue("as-is", send.raw_metadata, send.payload)
    consumer = client.subscribe(TOPIC, "as-is")
    received = [consumer.receive(timeout_millis=TIMEOUT_MS) for _ in expected]
    consumer.close()
    assert [m.data() for m in received] == [e["content"] for e in expected]
    assert [m.properties() for m in received] == [e["properties"] for e in expected]
    assert [m.partition_key() for m in received] == [e["partition_key"] for e in expected]
    assert [m.ordering_key() for m in received] == [e["ordering_key"] for e in expected]
    assert [m.event_timestamp() for m in received] == [e["event_timestamp"] for e in expected]
    assert {m.publish_timestamp() for m in received} == {send.metadata.publish_time}


def test_batch_index_ack_arrives_as_an_ack_set_of_the_still_unacked(broker, client):
    entry_id = broker.queue("indexed", *batches.to_pulsar_entry(
        _magnetar_batch(0, 4), producer_name="magnetar", publish_time=1))
    consumer = client.subscribe(TOPIC, "indexed", batch_index_ack_enabled=True)
    received = [consumer.receive(timeout_millis=TIMEOUT_MS) for _ in range(4)]
    consumer.acknowledge(received[1])
    (ack,) = broker.wait_for(lambda r: r.acks, "an ACK frame")
    consumer.close()
    assert ack.ack_type == pb.CommandAck.Individual
    (message_id,) = ack.message_id
    assert message_id.entry_id == entry_id
    # Bit i set = message i of the batch still unacknowledged: only index 1 was acked.
    assert list(message_id.ack_set) == [0b1101]
