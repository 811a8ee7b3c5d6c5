"""Received messages."""

from __future__ import annotations

from magnetar_protocol import magnetar_pb2 as pb

from magnetar._types import MessageId


class Message:
    __slots__ = ("_msg", "_id", "_topic", "_publish_time", "_redelivery", "_producer", "_source", "_generation")

    def __init__(self, msg: pb.SingleMessage, message_id: MessageId, topic: str, publish_time: int,
                 redelivery_count: int, producer_name: str):
        self._msg = msg
        self._id = message_id
        self._topic = topic
        self._publish_time = publish_time
        self._redelivery = redelivery_count
        self._producer = producer_name
        self._source = None  # the partition consumer that fetched it, and in which connection
        self._generation = 0

    def data(self) -> bytes:
        return self._msg.payload

    def value(self) -> bytes:
        return self._msg.payload

    def message_id(self) -> MessageId:
        return self._id

    def partition_key(self) -> str:
        return self._msg.partition_key

    def properties(self) -> dict[str, str]:
        return dict(self._msg.properties)

    def publish_timestamp(self) -> int:
        return self._publish_time

    def event_timestamp(self) -> int:
        return self._msg.event_time

    def redelivery_count(self) -> int:
        return self._redelivery

    def topic_name(self) -> str:
        return self._topic

    def producer_name(self) -> str:
        return self._producer

    def sequence_id(self) -> int:
        return self._msg.sequence_id

    def __repr__(self) -> str:
        return f"Message(id={self._id}, {len(self._msg.payload)} bytes)"


def expand(entry: pb.DeliveredEntry, partition: int, topic: str) -> list[Message]:
    """The messages a delivered entry carries: all of them, or the listed indices."""
    batch = pb.MessageBatch.FromString(entry.batch).messages
    n = len(batch)
    if entry.indices:
        counts = list(entry.redelivery_counts) or [0] * len(entry.indices)
        pairs = zip(entry.indices, counts)
    else:
        pairs = ((i, 0) for i in range(n))
    return [Message(batch[i], MessageId(partition, entry.entry_id, i, n), topic, entry.publish_time,
                    count, entry.producer_name) for i, count in pairs if i < n]
