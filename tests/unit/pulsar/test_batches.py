"""A Pulsar entry to and from Magnetar's MessageBatch: what maps, and what is refused."""

from __future__ import annotations

import random
import struct

import pytest

from magnetar_protocol import magnetar_pb2 as mpb
from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.pulsar import batches
from magnetar_protocol.pulsar.batches import BatchFormatError
from magnetar_protocol.pulsar.compression import CompressionError

CODECS = [pb.NONE, pb.LZ4, pb.ZLIB, pb.ZSTD, pb.SNAPPY]


def magnetar_batch(count: int) -> mpb.MessageBatch:
    return mpb.MessageBatch(messages=[
        mpb.SingleMessage(payload=bytes([i]) * (i * 10), sequence_id=40 + i,
                          properties={"i": str(i), "z": "last"} if i % 2 else {},
                          partition_key=f"k{i}" if i % 3 else None,
                          event_time=1_700_000_000_000 + i if i % 2 else 0)
        for i in range(count)])


@pytest.mark.parametrize("codec", CODECS, ids=pb.CompressionType.Name)
@pytest.mark.parametrize("count", [1, 2, 50])
def test_magnetar_batch_round_trips(codec, count):
    batch = magnetar_batch(count)
    metadata, payload = batches.to_pulsar_entry(batch, producer_name="p", publish_time=5,
                                                compression=codec)
    assert metadata.IsInitialized() and metadata.compression == codec
    assert metadata.HasField("num_messages_in_batch") == (count > 1)
    assert metadata.sequence_id == 40 and metadata.highest_sequence_id == 40 + count - 1
    back = batches.to_message_batch(metadata, payload)
    for message in batch.messages:   # the entry's publish time is each message's now
        message.publish_time = 5
    assert back == batch


def test_single_message_fields_travel_in_the_entry_metadata():
    message = mpb.SingleMessage(payload=b"one", partition_key="key", properties={"a": "1"},
                                sequence_id=9, event_time=77)
    metadata, payload = batches.to_pulsar_entry(mpb.MessageBatch(messages=[message]),
                                                producer_name="prod", publish_time=123)
    assert payload == b"one"
    assert (metadata.partition_key, metadata.event_time, metadata.sequence_id) == ("key", 77, 9)
    assert [(kv.key, kv.value) for kv in metadata.properties] == [("a", "1")]
    assert (metadata.producer_name, metadata.publish_time) == ("prod", 123)
    forced, _ = batches.to_pulsar_entry(mpb.MessageBatch(messages=[message]), producer_name="p",
                                        publish_time=1, batched=True)
    assert forced.num_messages_in_batch == 1


def test_null_value_and_the_ordering_key_survive_unpacking_and_the_magnetar_batch():
    single = pb.SingleMessageMetadata(payload_size=0, ordering_key=b"\x00ord", null_value=True,
                                      properties=[pb.KeyValue(key="k", value="1"),
                                                  pb.KeyValue(key="k", value="2")])
    raw = single.SerializeToString()
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=3, publish_time=1,
                                  num_messages_in_batch=1)
    (message,) = batches.unpack_entry(metadata, struct.pack(">I", len(raw)) + raw)
    assert (message.ordering_key, message.null_value, message.sequence_id) == (b"\x00ord", True, 3)
    assert message.properties == {"k": "2"}, "a repeated key keeps its last value"
    assert batches.to_message_batch(metadata, struct.pack(">I", len(raw)) + raw) == \
        mpb.MessageBatch(messages=[mpb.SingleMessage(sequence_id=3, properties={"k": "2"}, ordering_key=b"\x00ord",
                                                     null_value=True, publish_time=1)])


@pytest.mark.parametrize("batched", [False, True])
def test_every_pulsar_field_round_trips_through_the_magnetar_batch(batched):
    message = mpb.SingleMessage(payload=b"", sequence_id=4, partition_key="a2V5", partition_key_b64_encoded=True,
                                null_value=True, publish_time=1_600_000_000_000, deliver_at_time=1_900_000_000_000,
                                ordering_key=b"o", event_time=3, properties={"p": "1"})
    keyless = mpb.SingleMessage(payload=b"x", sequence_id=5, null_partition_key=True,
                                publish_time=1_600_000_000_000, deliver_at_time=1_900_000_000_000)
    batch = mpb.MessageBatch(messages=[message, keyless] if batched else [message])
    metadata, payload = batches.to_pulsar_entry(batch, producer_name="p", publish_time=99, compression=pb.LZ4)
    assert metadata.publish_time == 1_600_000_000_000 and metadata.deliver_at_time == 1_900_000_000_000
    assert batches.to_message_batch(metadata, payload) == batch
    # A Magnetar producer's message has no publish time of its own: the entry's is used.
    plain, _ = batches.to_pulsar_entry(mpb.MessageBatch(messages=[mpb.SingleMessage(payload=b"m")]),
                                       producer_name="p", publish_time=99)
    assert plain.publish_time == 99 and not plain.HasField("deliver_at_time")


def test_sequence_ids_default_to_the_entrys_first_plus_index():
    parts = b""
    for payload in (b"a", b"b", b"c"):
        raw = pb.SingleMessageMetadata(payload_size=1).SerializeToString()
        parts += struct.pack(">I", len(raw)) + raw + payload
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=10, publish_time=1,
                                  num_messages_in_batch=3)
    assert [m.sequence_id for m in batches.to_message_batch(metadata, parts).messages] == [10, 11, 12]


def _batch_payload(*sizes_and_payloads) -> bytes:
    out = b""
    for declared, payload in sizes_and_payloads:
        raw = pb.SingleMessageMetadata(payload_size=declared).SerializeToString()
        out += struct.pack(">I", len(raw)) + raw + payload
    return out


@pytest.mark.parametrize("count, payload, reason", [
    (3, _batch_payload((1, b"a"), (1, b"b")), "batch ends before message 2 of 3"),
    (1, _batch_payload((1, b"a"), (1, b"b")), "bytes after the batch's 1 messages"),
    (1, _batch_payload((9, b"a")), "payload of 9 bytes overruns"),
    (1, _batch_payload((-1, b"")), "payload of -1 bytes overruns"),
    (1, struct.pack(">I", 500) + b"xx", "metadata of 500 bytes overruns"),
    (1, struct.pack(">I", 2) + b"\xff\xff", "does not parse"),
    (1, struct.pack(">I", 0), "lacks its payload size"),
    (0, b"", "a batch of 0 messages"),
])
def test_malformed_batches_are_refused_with_a_reason(count, payload, reason):
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1,
                                  num_messages_in_batch=count)
    with pytest.raises(BatchFormatError, match=reason):
        batches.to_message_batch(metadata, payload)


@pytest.mark.parametrize("field, value", [("encryption_algo", "RSA"), ("chunk_id", 0),
                                          ("num_chunks_from_msg", 2)])
def test_encrypted_and_chunked_entries_are_refused(field, value):
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1, **{field: value})
    with pytest.raises(BatchFormatError, match="not supported"):
        batches.to_message_batch(metadata, b"x")


def test_an_empty_magnetar_batch_has_no_pulsar_entry():
    with pytest.raises(ValueError):
        batches.to_pulsar_entry(mpb.MessageBatch(), producer_name="p", publish_time=1)


def test_random_batch_payloads_only_ever_raise_batch_or_compression_errors():
    rng = random.Random(3)
    good = batches.to_pulsar_entry(magnetar_batch(4), producer_name="p", publish_time=1)[1]
    refused = 0
    for _ in range(2000):
        data = bytearray(good)
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        metadata = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1,
                                      num_messages_in_batch=rng.choice([3, 4, 5]),
                                      compression=rng.choice(CODECS), uncompressed_size=len(data))
        try:
            batches.to_message_batch(metadata, bytes(data))
        except CompressionError:    # BatchFormatError is one
            refused += 1
    assert refused > 1000


def test_keys_that_are_not_utf8_are_refused():
    raw = pb.SingleMessageMetadata(payload_size=0, partition_key="PLACEHOLDER").SerializeToString()
    raw = raw.replace(b"PLACEHOLDER", b"\xff" * 11)
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1,
                                  num_messages_in_batch=1)
    with pytest.raises(BatchFormatError, match="message 0's partition_key is not UTF-8"):
        batches.to_message_batch(metadata, struct.pack(">I", len(raw)) + raw)
