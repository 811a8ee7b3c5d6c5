"""Pulsar entries stored as sent (envelopes): what they count for, how the broker opens
them, and the frames that carry them back to a Pulsar consumer."""

from __future__ import annotations

import pytest

from magnetar_protocol import magnetar_pb2 as mpb
from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.pulsar import batches, stored
from magnetar_protocol.pulsar.batches import BatchFormatError


def _encrypted(count: int | None = None, key: str = "k") -> tuple[bytes, pb.MessageMetadata]:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=5, partition_key=key,
                                  encryption_algo="", encryption_param=b"iv" * 6,
                                  encryption_keys=[pb.EncryptionKeys(key="rsa", value=b"wrapped")])
    if count is not None:
        metadata.num_messages_in_batch = count
    return metadata.SerializeToString(), metadata


def _plain_batch(count: int) -> tuple[bytes, pb.MessageMetadata, bytes]:
    batch = mpb.MessageBatch(messages=[mpb.SingleMessage(payload=f"m{i}".encode(), sequence_id=3 + i,
                                                         partition_key=f"k{i}") for i in range(count)])
    metadata, payload = batches.to_pulsar_entry(batch, producer_name="p", publish_time=9, batched=True)
    return metadata.SerializeToString(), metadata, payload


def test_an_encrypted_batch_counts_for_its_messages_and_goes_back_byte_for_byte():
    raw, metadata = _encrypted(count=4)
    data = stored.envelope_batch(raw, metadata, b"ciphertext")
    batch = mpb.MessageBatch.FromString(data)
    assert len(batch.messages) == 1 and stored.message_count(batch.messages) == 4
    [part] = stored.pulsar_parts(batch, producer_name="ignored", publish_time=1)
    assert (part.metadata, part.payload, part.first, part.count) == (raw, b"ciphertext", 0, 4)
    # The broker sees one message per batch index: the envelope first, then stand-ins
    # holding its key (Key_Shared routes the whole entry by it).
    opened = stored.stored_messages(data)
    assert len(opened) == 4 and opened[0].pulsar_metadata == raw
    assert [m.partition_key for m in opened] == ["k"] * 4 and not opened[1].payload


def test_an_envelope_that_can_be_opened_reads_as_the_translation_would():
    raw, metadata, payload = _plain_batch(3)
    data = stored.envelope_batch(raw, metadata, payload)
    assert [(m.payload, m.sequence_id, m.partition_key) for m in stored.stored_messages(data)] == \
        [(b"m0", 3, "k0"), (b"m1", 4, "k1"), (b"m2", 5, "k2")]


def test_a_single_message_envelope_copies_the_message_fields():
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=2, event_time=3,
                                  partition_key="key", ordering_key=b"o", null_value=True, deliver_at_time=44,
                                  properties=[pb.KeyValue(key="a", value="b")], uuid="p-1", chunk_id=0,
                                  num_chunks_from_msg=2, total_chunk_msg_size=10)
    message = stored.envelope(metadata.SerializeToString(), metadata, b"half")
    assert (message.sequence_id, message.publish_time, message.event_time, message.partition_key,
            message.ordering_key, message.null_value, message.deliver_at_time, dict(message.properties)) == \
        (1, 2, 3, "key", b"o", True, 44, {"a": "b"})
    assert stored.is_chunk(metadata) and not stored.is_last_chunk_or_whole(metadata)
    metadata.chunk_id = 1
    assert stored.is_last_chunk_or_whole(metadata)


def test_a_commit_joining_an_encrypted_send_with_others_goes_in_frames_around_it():
    raw, metadata = _encrypted(count=2)
    plain = [mpb.SingleMessage(payload=b"a", sequence_id=1), mpb.SingleMessage(payload=b"b", sequence_id=2)]
    joined = mpb.MessageBatch(messages=[plain[0], stored.envelope(raw, metadata, b"secret"), plain[1]])
    parts = stored.pulsar_parts(joined, producer_name="p", publish_time=1)
    assert [(p.first, p.count) for p in parts] == [(0, 1), (1, 2), (3, 1)]
    assert parts[1].metadata == raw and parts[1].payload == b"secret"
    again = batches.unpack_entry(parts[2].metadata, parts[2].payload)
    assert [m.payload for m in again] == [b"b"]


def test_an_envelope_whose_metadata_does_not_parse_is_a_format_error():
    bad = mpb.SingleMessage(payload=b"x", pulsar_metadata=b"\xff\xff")
    with pytest.raises(BatchFormatError):
        stored.message_count([bad])
    with pytest.raises(BatchFormatError):
        stored.stored_messages(mpb.MessageBatch(messages=[bad]))


@pytest.mark.parametrize("size", [0, 1, 127, 128, 16_383, 16_384, 2_097_152])
def test_an_envelope_assembled_from_bytes_parses_as_the_protobuf_one(size):
    # envelope_batch writes the payload field and lengths itself (one copy on the hot
    # path); each varint length boundary must read back as protobuf's own encoding.
    raw, metadata, _ = _plain_batch(2)
    payload = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    data = stored.envelope_batch(raw, metadata, payload)
    assert mpb.MessageBatch.FromString(data) == mpb.MessageBatch(messages=[stored.envelope(raw, metadata, payload)])
