"""Dead-letter and retry topics: the policy, the topics' default names, which messages a
policy dooms, and the copy a move writes.  Pure: no I/O.

Pulsar's rules (its client's DeadLetterPolicy and RetryLetterTopic), applied by the
broker: a message redelivered more than ``max_redeliver_count`` times goes to the
dead-letter topic instead of out again, so it is delivered ``max_redeliver_count + 1``
times at most; the copy keeps the original's payload, key, ordering key, event time and
properties, plus ``REAL_TOPIC`` (where it came from) and ``ORIGIN_MESSAGE_ID``.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol import pulsar_api_pb2 as pulsar_pb
from magnetar_protocol.errors import BadRequest
from magnetar_protocol.pulsar import stored

# Pulsar's property names (RetryMessageUtil).
REAL_TOPIC = "REAL_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RECONSUMETIMES = "RECONSUMETIMES"
DELAY_TIME = "DELAY_TIME"
RETRY_TOPIC = "RETRY_TOPIC"
DLQ_SUFFIX = "-DLQ"
RETRY_SUFFIX = "-RETRY"


@dataclass(frozen=True, slots=True)
class DeadLetterPolicy:
    max_redeliver_count: int
    dead_letter_topic: str = ""          # "": <topic>-<subscription>-DLQ
    initial_subscription_name: str = ""  # "": none is created
    retry_letter_topic: str = ""         # "": <topic>-<subscription>-RETRY

    def __post_init__(self) -> None:
        if self.max_redeliver_count < 1:
            raise BadRequest(f"max_redeliver_count must be greater than 0, got {self.max_redeliver_count}")

    @classmethod
    def from_wire(cls, wire: pb.DeadLetterPolicy) -> DeadLetterPolicy:
        return cls(wire.max_redeliver_count, wire.dead_letter_topic, wire.initial_subscription_name,
                   wire.retry_letter_topic)

    def dlq_topic(self, topic: str, subscription: str) -> str:
        """The dead-letter topic of ``topic`` (a partitioned topic's base name: one DLQ for
        all its partitions, as Pulsar's Java client names it)."""
        return self.dead_letter_topic or f"{topic}-{subscription}{DLQ_SUFFIX}"

    def retry_topic(self, topic: str, subscription: str) -> str:
        return self.retry_letter_topic or f"{topic}-{subscription}{RETRY_SUFFIX}"

    def as_json(self) -> dict[str, object]:
        """Pulsar's DeadLetterPolicy field names."""
        return {"maxRedeliverCount": self.max_redeliver_count,
                "deadLetterTopic": self.dead_letter_topic or None,
                "initialSubscriptionName": self.initial_subscription_name or None,
                "retryLetterTopic": self.retry_letter_topic or None}


def doomed_mask(indices: list[int], counts: list[int], max_redeliver_count: int) -> int:
    """Of a redelivery's messages (their batch indices and redelivery counts), the mask
    of those past the policy's limit."""
    mask = 0
    for index, count in zip(indices, counts):
        if count > max_redeliver_count:
            mask |= 1 << index
    return mask


def origin_message_id(entry_id: int, partition: int, batch_index: int, batch_size: int) -> str:
    """Pulsar's (Java client's) message id text, ledger 0: ``0:entry:partition``, with
    ``:batchIndex`` for a message of a batch of more than one."""
    text = f"0:{entry_id}:{partition}"
    return f"{text}:{batch_index}" if batch_size > 1 else text


def whole_envelopes(batch: bytes, indices: list[int]) -> int:
    """The mask of ``indices`` widened to every batch index of each envelope the broker
    cannot open (encrypted, a chunk) that one of them falls in: such an envelope is
    copied whole, so the move acknowledges all its messages (each stays in exactly one
    place)."""
    mask = 0
    for i in indices:
        mask |= 1 << i
    index = 0
    for message in pb.MessageBatch.FromString(batch).messages:
        count = stored.entry_count(stored.metadata_of(message)) if message.pulsar_metadata else 1
        span = ((1 << count) - 1) << index
        if count > 1 and mask & span and stored.is_opaque(stored.metadata_of(message)):
            mask |= span
        index += count
    return mask


def copy_messages(batch: bytes, indices: list[int], real_topic: str, entry_id: int, partition: int,
                  extra: dict[str, str] | None = None, deliver_at: int = 0) -> tuple[bytes, int]:
    """The serialized MessageBatch of the copies of ``batch``'s messages ``indices`` (and
    how many messages they are): payload, keys, event time and properties kept,
    ``REAL_TOPIC`` and ``ORIGIN_MESSAGE_ID`` added (and ``extra``: a retry's count and
    delay); sequence ids are the new producer's, set by the caller's write.
    ``deliver_at``: a retry's.

    A Pulsar entry stored as sent (an envelope) is opened as Magnetar's readers open it
    (``stored.open_message``): its messages are copied one by one like any other.  One
    the broker cannot open (encrypted, or one chunk of a large message) is copied as it
    is, whole, as Pulsar's client moves a message it cannot decrypt: its payload byte
    for byte, its metadata with the two properties added (Pulsar's properties are not
    encrypted); the move takes all its messages (``whole_envelopes``)."""
    out = pb.MessageBatch()
    index = 0
    wanted = set(indices)
    messages = pb.MessageBatch.FromString(batch).messages
    size = stored.message_count(messages)   # the entry's, for ORIGIN_MESSAGE_ID's batch index
    for message in messages:
        opened = stored.open_message(message)
        span = range(index, index + len(opened.messages))
        index = span.stop
        if not opened.opened:
            assert opened.metadata is not None
            if wanted.intersection(span):
                _copy_envelope(out, message, opened.metadata, real_topic,
                               origin_message_id(entry_id, partition, span.start, size), extra, deliver_at)
            continue
        for i in span:
            if i not in wanted:
                continue
            original = opened.messages[i - span.start]
            copy = out.messages.add(payload=original.payload, event_time=original.event_time,
                                    null_value=original.null_value,
                                    partition_key_b64_encoded=original.partition_key_b64_encoded,
                                    null_partition_key=original.null_partition_key, deliver_at_time=deliver_at)
            if original.HasField("partition_key"):
                copy.partition_key = original.partition_key
            if original.HasField("ordering_key"):
                copy.ordering_key = original.ordering_key
            copy.properties.update(original.properties)
            copy.properties[REAL_TOPIC] = real_topic
            copy.properties[ORIGIN_MESSAGE_ID] = origin_message_id(entry_id, partition, i, size)
            copy.properties.update(extra or {})
    encoded: bytes = out.SerializeToString()
    return encoded, stored.message_count(out.messages)


def _copy_envelope(out: pb.MessageBatch, envelope: pb.SingleMessage, metadata: pulsar_pb.MessageMetadata,
                   real_topic: str, origin: str, extra: dict[str, str] | None, deliver_at: int) -> None:
    added = {REAL_TOPIC: real_topic, ORIGIN_MESSAGE_ID: origin, **(extra or {})}
    kept = [p for p in metadata.properties if p.key not in added]
    del metadata.properties[:]
    metadata.properties.extend(kept)
    for key, value in added.items():
        metadata.properties.add(key=key, value=value)
    if deliver_at:
        metadata.deliver_at_time = deliver_at
    copy = out.messages.add()
    copy.CopyFrom(envelope)
    copy.pulsar_metadata = metadata.SerializeToString()
    copy.properties.update(added)
    if deliver_at:
        copy.deliver_at_time = deliver_at


def numbered(batch: bytes, first_sequence_id: int) -> bytes:
    """``batch`` with its messages numbered from ``first_sequence_id`` (the copies'
    producer's own sequence; an envelope takes one number per message it stands for)."""
    parsed = pb.MessageBatch.FromString(batch)
    sequence = first_sequence_id
    for message in parsed.messages:
        message.sequence_id = sequence
        sequence += stored.entry_count(stored.metadata_of(message)) if message.pulsar_metadata else 1
    encoded: bytes = parsed.SerializeToString()
    return encoded
