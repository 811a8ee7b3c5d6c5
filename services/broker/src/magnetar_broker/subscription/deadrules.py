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
from magnetar_protocol.errors import BadRequest

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


def copy_messages(batch: bytes, indices: list[int], real_topic: str, entry_id: int, partition: int,
                  extra: dict[str, str] | None = None, deliver_at: int = 0) -> tuple[bytes, int]:
    """The serialized MessageBatch of the copies of ``batch``'s messages ``indices`` (and
    how many): payload, keys, event time and properties kept, ``REAL_TOPIC`` and
    ``ORIGIN_MESSAGE_ID`` added (and ``extra``: a retry's count and delay); sequence ids
    are the new producer's, set by the caller's write.  ``deliver_at``: a retry's."""
    messages = pb.MessageBatch.FromString(batch).messages
    out = pb.MessageBatch()
    for index in indices:
        original = messages[index]
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
        copy.properties[ORIGIN_MESSAGE_ID] = origin_message_id(entry_id, partition, index, len(messages))
        copy.properties.update(extra or {})
    encoded: bytes = out.SerializeToString()
    return encoded, len(indices)


def numbered(batch: bytes, first_sequence_id: int) -> bytes:
    """``batch`` with its messages numbered from ``first_sequence_id`` (the copies'
    producer's own sequence)."""
    parsed = pb.MessageBatch.FromString(batch)
    for i, message in enumerate(parsed.messages):
        message.sequence_id = first_sequence_id + i
    encoded: bytes = parsed.SerializeToString()
    return encoded
