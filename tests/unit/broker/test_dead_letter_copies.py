"""Dead-letter copies and delivery times of Pulsar entries stored as sent (envelopes):
an envelope the broker can open is copied message by message, one it cannot (encrypted,
a chunk) whole as it is; an envelope's messages share its delivery time."""

from __future__ import annotations

from magnetar_broker.subscription.deadrules import (
    ORIGIN_MESSAGE_ID,
    REAL_TOPIC,
    copy_messages,
    numbered,
    whole_envelopes,
)
from magnetar_broker.subscription.delayed import message_times
from magnetar_protocol import magnetar_pb2 as mpb
from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.pulsar import batches, stored


def _pulsar_batch(count: int, deliver_at: int = 0) -> bytes:
    """A Pulsar producer's batch (properties on each message), compressed, as stored."""
    batch = mpb.MessageBatch(messages=[
        mpb.SingleMessage(payload=f"m{i}".encode(), sequence_id=3 + i, partition_key=f"k{i}",
                          properties={"p": str(i)}) for i in range(count)])
    metadata, payload = batches.to_pulsar_entry(batch, producer_name="p", publish_time=9, batched=True)
    if deliver_at:
        metadata.deliver_at_time = deliver_at
    return stored.envelope_batch(metadata.SerializeToString(), metadata, payload)


def _encrypted(count: int) -> tuple[bytes, bytes]:
    metadata = pb.MessageMetadata(producer_name="p", sequence_id=7, publish_time=5, partition_key="k",
                                  num_messages_in_batch=count, encryption_algo="", encryption_param=b"iv" * 6,
                                  encryption_keys=[pb.EncryptionKeys(key="rsa", value=b"wrapped")],
                                  properties=[pb.KeyValue(key="a", value="b")])
    raw = metadata.SerializeToString()
    return stored.envelope_batch(raw, metadata, b"ciphertext"), raw


def test_an_opened_envelope_is_copied_message_by_message_with_payload_and_properties():
    data, n = copy_messages(_pulsar_batch(3), [0, 2], "persistent://t/n/src", 12, 1)
    copies = mpb.MessageBatch.FromString(data).messages
    assert n == 2 and not any(m.pulsar_metadata for m in copies)
    assert [(m.payload, m.partition_key, m.properties["p"]) for m in copies] == [(b"m0", "k0", "0"),
                                                                                  (b"m2", "k2", "2")]
    assert [m.properties[ORIGIN_MESSAGE_ID] for m in copies] == ["0:12:1:0", "0:12:1:2"]
    assert {m.properties[REAL_TOPIC] for m in copies} == {"persistent://t/n/src"}


def test_an_encrypted_envelope_is_copied_whole_with_the_properties_added_to_its_metadata():
    data, raw = _encrypted(3)
    copied, n = copy_messages(data, [1, 2], "persistent://t/n/src", 4, 0)
    [copy] = mpb.MessageBatch.FromString(copied).messages
    assert n == 3 and copy.payload == b"ciphertext"
    metadata = stored.metadata_of(copy)
    assert {p.key: p.value for p in metadata.properties} == {
        "a": "b", REAL_TOPIC: "persistent://t/n/src", ORIGIN_MESSAGE_ID: "0:4:0:0"}
    assert list(metadata.encryption_keys) == list(pb.MessageMetadata.FromString(raw).encryption_keys)
    # The DLQ's producer numbers it: one sequence id per message it stands for.
    renumbered = mpb.MessageBatch.FromString(numbered(copied + _pulsar_copy(), 100)).messages
    assert [m.sequence_id for m in renumbered] == [100, 103]


def _pulsar_copy() -> bytes:
    return copy_messages(_pulsar_batch(2), [1], "t", 1, 0)[0]


def test_an_envelopes_messages_share_its_delivery_time():
    batch = mpb.MessageBatch.FromString(_pulsar_batch(3, deliver_at=777) + mpb.MessageBatch(
        messages=[mpb.SingleMessage(payload=b"x", deliver_at_time=5)]).SerializeToString())
    assert message_times(batch.messages) == [777, 777, 777, 5]


def test_a_move_widens_to_every_message_of_an_envelope_it_copies_whole():
    encrypted, _ = _encrypted(3)
    joined = _pulsar_batch(2) + encrypted          # a commit joining a plain batch and an encrypted one
    assert whole_envelopes(joined, [1]) == 0b00010  # an opened envelope: the message alone
    assert whole_envelopes(joined, [3]) == 0b11100  # the encrypted batch: all three
