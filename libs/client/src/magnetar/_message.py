"""Received messages, and the expansion of a delivered entry (a stored batch) into them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.protobuf.message import DecodeError

from magnetar._types import MessageId
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol import pulsar_api_pb2 as pulsar_pb
from magnetar_protocol.errors import BadRequest
from magnetar_protocol.pulsar import stored

if TYPE_CHECKING:
    from magnetar._values import ValueReader


class EntryInfo:
    """What the messages of one delivered entry share (one object per entry, not per
    message: receiving is per-message work)."""

    __slots__ = ("partition", "entry_id", "size", "topic", "publish_time", "producer",
                 "source", "generation", "values")

    def __init__(self, partition: int, entry_id: int, size: int, topic: str, publish_time: int,
                 producer: str, source: object = None, generation: int = 0,
                 values: ValueReader | None = None) -> None:
        self.partition = partition
        self.entry_id = entry_id
        self.size = size
        self.topic = topic
        self.publish_time = publish_time
        self.producer = producer
        self.source = source  # the partition consumer that fetched it ...
        self.generation = generation  # ... under which of its subscriptions
        self.values = values  # the consumer's schema (a _values.ValueReader); None: bytes


class Message:
    """A received message (as ``pulsar.Message``)."""

    __slots__ = ("_msg", "_info", "_index", "_redelivery", "_id", "_extra")

    def __init__(self, msg: pb.SingleMessage, info: EntryInfo, batch_index: int,
                 redelivery_count: int = 0) -> None:
        self._msg = msg
        self._info = info
        self._index = batch_index
        self._redelivery = redelivery_count
        self._id: MessageId | None = None  # made on first use: most messages never need one
        # Other (entry id, batch index) positions acknowledged with this message: the
        # earlier chunks of a chunked message, or the rest of an encrypted batch.
        self._extra: tuple[tuple[int, int], ...] = ()

    def data(self) -> bytes:
        """The payload."""
        return self._msg.payload

    def value(self) -> Any:
        """The value, decoded by the consumer's or reader's ``schema=`` (the payload
        when it has none)."""
        values = self._info.values
        if values is None:
            return self._msg.payload
        return values.value(self._msg)

    def schema_version(self) -> bytes:
        """The version of the topic's schema it was written with, as pulsar-client gives
        it (8 bytes, big-endian), b'' when written without a schema."""
        msg = self._msg
        return msg.schema_version.to_bytes(8, "big") if msg.HasField("schema_version") else b""

    def int_schema_version(self) -> int:
        """The same version as a number, -1 when written without a schema."""
        msg = self._msg
        return msg.schema_version if msg.HasField("schema_version") else -1

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

    def encryption_context(self) -> EncryptionContext | None:
        """How a Pulsar producer encrypted this message, None when it did not.  Magnetar
        never decrypts (nor does this client): ``data()`` is then the encrypted payload
        (compressed before it was encrypted, and for a batch the whole batch, as
        Pulsar's ``ConsumerCryptoFailureAction.CONSUME`` delivers it)."""
        if not self._msg.pulsar_metadata:
            return None
        metadata = pulsar_pb.MessageMetadata.FromString(self._msg.pulsar_metadata)
        if not stored.is_encrypted(metadata):
            return None
        return EncryptionContext(
            keys={k.key: k.value for k in metadata.encryption_keys},
            key_metadata={k.key: {kv.key: kv.value for kv in k.metadata} for k in metadata.encryption_keys},
            algorithm=metadata.encryption_algo, param=metadata.encryption_param,
            compression=pulsar_pb.CompressionType.Name(metadata.compression),
            uncompressed_size=metadata.uncompressed_size,
            batch_size=stored.entry_count(metadata) if metadata.HasField("num_messages_in_batch") else None,
            chunk=(metadata.chunk_id, metadata.num_chunks_from_msg) if stored.is_chunk(metadata) else None)

    def __repr__(self) -> str:
        return f"Message(id={self.message_id()}, {len(self._msg.payload)} bytes)"


@dataclass(frozen=True)
class EncryptionContext:
    """A Pulsar producer's encryption of a message (Pulsar's ``EncryptionContext``):
    the data key encrypted under each named public key (``keys``, with each key's
    metadata), the cipher (``algorithm``, "" = Pulsar's AES-GCM) and its IV
    (``param``), the compression applied before encrypting, and for a batch its size;
    for one chunk of a large message (chunks are encrypted one by one), (chunk id,
    chunk count)."""

    keys: dict[str, bytes]
    key_metadata: dict[str, dict[str, str]]
    algorithm: str
    param: bytes
    compression: str
    uncompressed_size: int
    batch_size: int | None
    chunk: tuple[int, int] | None


class ChunkPiece:
    """One delivered chunk of a large message, waiting for the others (_chunks.py)."""

    __slots__ = ("metadata", "payload", "info", "index", "redelivery")

    def __init__(self, metadata: pulsar_pb.MessageMetadata, payload: bytes, info: EntryInfo, index: int,
                 redelivery: int = 0) -> None:
        self.metadata = metadata
        self.payload = payload
        self.info = info
        self.index = index
        self.redelivery = redelivery

    @property
    def position(self) -> tuple[int, int]:
        return (self.info.entry_id, self.index)


class UndecodableEntry:
    """Stands in the receiver queue for a delivered entry whose batch does not decode
    (stored before brokers checked batches, or corrupted): never returned to the user,
    it moves a reader past the entry in order (docs/security.md)."""

    __slots__ = ("_info", "_index")

    def __init__(self, info: EntryInfo, last_index: int) -> None:
        self._info = info
        self._index = last_index


def expand(entry: pb.DeliveredEntry, partition: int, topic: str, generation: int = 0,
           source: object = None, values: ValueReader | None = None) -> list[Message | ChunkPiece]:
    """The messages a delivered entry carries: all of them (first delivery), or only the
    listed batch indices with their redelivery counts; a chunk of a large message comes
    as a ChunkPiece.  Raises DecodeError when the entry's batch does not decode."""
    messages = pb.MessageBatch.FromString(entry.batch).messages
    if stored.has_envelope(messages):
        try:
            return _expand_stored(messages, entry, partition, topic, generation, source, values)
        except BadRequest as exc:   # an envelope that does not open
            raise DecodeError(str(exc)) from None
    info = EntryInfo(partition, entry.entry_id, len(messages), topic, entry.publish_time,
                     entry.producer_name, source, generation, values)
    if not entry.indices:
        return [Message(m, info, i) for i, m in enumerate(messages)]
    n = len(messages)
    counts = entry.redelivery_counts
    out: list[Message | ChunkPiece] = []
    for k, i in enumerate(entry.indices):
        if i < n:  # an index past the batch is the broker's bug; never crash on it
            out.append(Message(messages[i], info, i, counts[k] if k < len(counts) else 0))
    return out


def _expand_stored(messages: Sequence[pb.SingleMessage], entry: pb.DeliveredEntry, partition: int,
                   topic: str, generation: int, source: object,
                   values: ValueReader | None = None) -> list[Message | ChunkPiece]:
    """``expand`` of a batch holding Pulsar entries stored as sent: one that can be
    opened gives its messages; an encrypted one is one message standing for all its
    batch indices (acking it acks them all); a chunk gives a ChunkPiece."""
    opened = [stored.open_message(m) for m in messages]
    total = sum(len(o.messages) for o in opened)
    info = EntryInfo(partition, entry.entry_id, total, topic, entry.publish_time, entry.producer_name,
                     source, generation, values)
    due = {i: (entry.redelivery_counts[k] if k < len(entry.redelivery_counts) else 0)
           for k, i in enumerate(entry.indices)} if entry.indices else None
    out: list[Message | ChunkPiece] = []
    first = 0
    for o in opened:
        span = range(first, first + len(o.messages))
        first += len(o.messages)
        mine = [i for i in span if due is None or i in due]
        if not mine:
            continue
        redelivery = max(due[i] for i in mine) if due else 0
        if o.opened:
            out += [Message(o.messages[i - span.start], info, i, due[i] if due else 0) for i in mine]
        elif o.metadata is not None and stored.is_chunk(o.metadata) and not stored.is_encrypted(o.metadata):
            out.append(ChunkPiece(o.metadata, o.messages[0].payload, info, span.start, redelivery))
        elif len(span) == total:
            out.append(Message(o.messages[0], info, -1, redelivery))   # the whole entry
        else:
            message = Message(o.messages[0], info, mine[0], redelivery)
            message._extra = tuple((entry.entry_id, i) for i in mine[1:])
            out.append(message)
    return out
