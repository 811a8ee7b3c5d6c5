"""Received messages, and the expansion of a delivered entry (a stored batch) into them."""

from __future__ import annotations

from magnetar._types import MessageId
from magnetar_protocol import magnetar_pb2 as pb


class EntryInfo:
    """What the messages of one delivered entry share (one object per entry, not per
    message: receiving is per-message work)."""

    __slots__ = ("partition", "entry_id", "size", "topic", "publish_time", "producer",
                 "source", "generation")

    def __init__(self, partition: int, entry_id: int, size: int, topic: str, publish_time: int,
                 producer: str, source: object = None, generation: int = 0) -> None:
        self.partition = partition
        self.entry_id = entry_id
        self.size = size
        self.topic = topic
        self.publish_time = publish_time
        self.producer = producer
        self.source = source  # the partition consumer that fetched it ...
        self.generation = generation  # ... under which of its subscriptions


class Message:
    """A received message (as ``pulsar.Message``)."""

    __slots__ = ("_msg", "_info", "_index", "_redelivery", "_id")

    def __init__(self, msg: pb.SingleMessage, info: EntryInfo, batch_index: int,
                 redelivery_count: int = 0) -> None:
        self._msg = msg
        self._info = info
        self._index = batch_index
        self._redelivery = redelivery_count
        self._id: MessageId | None = None  # made on first use: most messages never need one

    def data(self) -> bytes:
        """The payload."""
        return self._msg.payload

    def value(self) -> bytes:
        """pulsar-client compatibility (no schemas): the payload."""
        return self._msg.payload

    def message_id(self) -> MessageId:
        """Where the message sits (partition, entry, batch index, batch size)."""
        if self._id is None:
            info = self._info
            self._id = MessageId(info.partition, info.entry_id, self._index, info.size)
        return self._id

    def partition_key(self) -> str:
        """The key it was routed by, '' when none."""
        return self._msg.partition_key

    def ordering_key(self) -> bytes:
        """A Pulsar producer's ordering key, b'' when none."""
        return self._msg.ordering_key

    def properties(self) -> dict[str, str]:
        """Its properties, as a new dict."""
        return dict(self._msg.properties)

    def publish_timestamp(self) -> int:
        """Milliseconds since the epoch when it was published: a Pulsar producer's own
        publish time, else when the broker stored it."""
        return self._msg.publish_time or self._info.publish_time

    def has_null_value(self) -> bool:
        """A Pulsar producer sent a null value (a tombstone), not an empty payload."""
        return self._msg.null_value

    def has_null_partition_key(self) -> bool:
        """A Pulsar producer set a null key, not an empty one."""
        return self._msg.null_partition_key

    def partition_key_b64_encoded(self) -> bool:
        """The key is base64 text of a bytes key (a Pulsar producer's ``setKeyBytes``)."""
        return self._msg.partition_key_b64_encoded

    def deliver_at_time(self) -> int:
        """A Pulsar producer's delayed-delivery time in ms since the epoch, 0 when unset
        (carried, not enforced: docs/pulsar-protocol.md)."""
        return self._msg.deliver_at_time

    def event_timestamp(self) -> int:
        """The producer's event time in ms since the epoch, 0 when unset."""
        return self._msg.event_time

    def redelivery_count(self) -> int:
        """How often it was delivered before (0 on first delivery)."""
        return self._redelivery

    def topic_name(self) -> str:
        """The full name of the topic (partition) it came from."""
        return self._info.topic

    def producer_name(self) -> str:
        """The name of the producer that sent it."""
        return self._info.producer

    def sequence_id(self) -> int:
        """Its producer sequence id."""
        return self._msg.sequence_id

    def __repr__(self) -> str:
        return f"Message(id={self.message_id()}, {len(self._msg.payload)} bytes)"


class UndecodableEntry:
    """Stands in the receiver queue for a delivered entry whose batch does not decode
    (stored before brokers checked batches, or corrupted): never returned to the user,
    it moves a reader past the entry in order (docs/security.md)."""

    __slots__ = ("_info", "_index")

    def __init__(self, info: EntryInfo, last_index: int) -> None:
        self._info = info
        self._index = last_index


def expand(entry: pb.DeliveredEntry, partition: int, topic: str, generation: int = 0,
           source: object = None) -> list[Message]:
    """The messages a delivered entry carries: all of them (first delivery), or only the
    listed batch indices with their redelivery counts.  Raises DecodeError when the
    entry's batch does not parse."""
    messages = pb.MessageBatch.FromString(entry.batch).messages
    info = EntryInfo(partition, entry.entry_id, len(messages), topic, entry.publish_time,
                     entry.producer_name, source, generation)
    if not entry.indices:
        return [Message(m, info, i) for i, m in enumerate(messages)]
    n = len(messages)
    counts = entry.redelivery_counts
    out = []
    for k, i in enumerate(entry.indices):
        if i < n:  # an index past the batch is the broker's bug; never crash on it
            out.append(Message(messages[i], info, i, counts[k] if k < len(counts) else 0))
    return out
