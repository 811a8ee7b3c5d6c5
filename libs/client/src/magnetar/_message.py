"""Received messages, and the expansion of a delivered entry (a stored batch) into them."""

from __future__ import annotations

from magnetar_protocol import magnetar_pb2 as pb

from magnetar._types import MessageId


class Message:
    """A received message (as ``pulsar.Message``)."""

    __slots__ = ("_msg", "_partition", "_entry", "_index", "_size", "_id", "_topic",
                 "_publish_time", "_redelivery", "_producer", "_gen")

    def __init__(self, msg: pb.SingleMessage, partition: int, entry_id: int, batch_index: int,
                 batch_size: int, topic: str, publish_time: int, redelivery_count: int,
                 producer_name: str, generation: int = 0) -> None:
        self._msg = msg
        self._partition = partition
        self._entry = entry_id
        self._index = batch_index
        self._size = batch_size
        self._id: MessageId | None = None  # made on first use: most messages never need one
        self._topic = topic
        self._publish_time = publish_time
        self._redelivery = redelivery_count
        self._producer = producer_name
        self._gen = generation  # which subscription of its partition consumer delivered it

    def data(self) -> bytes:
        return self._msg.payload

    def value(self) -> bytes:
        """pulsar-client compatibility (no schemas): the payload."""
        return self._msg.payload

    def message_id(self) -> MessageId:
        if self._id is None:
            self._id = MessageId(self._partition, self._entry, self._index, self._size)
        return self._id

    def partition_key(self) -> str:
        return self._msg.partition_key

    def properties(self) -> dict[str, str]:
        return dict(self._msg.properties)

    def publish_timestamp(self) -> int:
        """Milliseconds since the epoch when the broker stored the message."""
        return self._publish_time

    def event_timestamp(self) -> int:
        """The producer's event time in ms since the epoch, 0 when unset."""
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
        return f"Message(id={self.message_id()}, {len(self._msg.payload)} bytes)"


def expand(entry: pb.DeliveredEntry, partition: int, topic: str,
           generation: int = 0) -> list[Message]:
    """The messages a delivered entry carries: all of them (first delivery), or only the
    listed batch indices with their redelivery counts."""
    messages = pb.MessageBatch.FromString(entry.batch).messages
    n = len(messages)
    eid = entry.entry_id
    published = entry.publish_time
    producer = entry.producer_name
    if not entry.indices:
        return [Message(m, partition, eid, i, n, topic, published, 0, producer, generation)
                for i, m in enumerate(messages)]
    counts = entry.redelivery_counts
    out = []
    for k, i in enumerate(entry.indices):
        if i < n:  # an index past the batch is the broker's bug; never crash on it
            count = counts[k] if k < len(counts) else 0
            out.append(Message(messages[i], partition, eid, i, n, topic, published, count,
                               producer, generation))
    return out
