"""Pulsar entries stored as their producer sent them, inside Magnetar's ``MessageBatch``.

Every Pulsar entry is stored as *one* ``SingleMessage`` whose ``pulsar_metadata`` holds
the entry's ``MessageMetadata`` exactly as sent and whose ``payload`` is the entry's
payload exactly as sent (compressed as it came): an *envelope*.  An envelope stands for
all the messages of its entry (``num_messages_in_batch``, else 1), so the broker's counts, batch indices and acks are
the entry's, as on a Pulsar broker; it copies what the metadata says of the whole entry
(sequence id, publish time, keys; for a single message its properties, event time and
flags too), so code that reads only ``SingleMessage`` fields (routing, delayed delivery)
sees them.

Readers: a Pulsar consumer gets the envelope back as the entry it was (metadata and
payload byte for byte); ``stored_messages`` gives the broker one ``SingleMessage`` per
batch index (an envelope it can open is opened: decompressed and translated; one it
cannot, an encrypted entry or one chunk of a large message, stays whole at its first
index, the others standing in with its keys); Magnetar's client opens what it can and
hands the rest over as is (encrypted messages) or reassembles it (chunks).

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import DecodeError

from magnetar_protocol import magnetar_pb2 as mpb
from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.pulsar.batches import BatchFormatError, copy_message_fields, to_message_batch, to_pulsar_entry
from magnetar_protocol.pulsar.frames import DEFAULT_MAX_MESSAGE_SIZE


def is_encrypted(metadata: pb.MessageMetadata) -> bool:
    return bool(metadata.encryption_keys) or metadata.HasField("encryption_algo")


def is_chunk(metadata: pb.MessageMetadata) -> bool:
    """One chunk of a message split by its producer (Pulsar's consumers treat a message
    as chunked when it has more than one chunk; a lone "chunk" is stored as sent too)."""
    return metadata.HasField("chunk_id") or metadata.HasField("num_chunks_from_msg") \
        or metadata.HasField("uuid")


def is_opaque(metadata: pb.MessageMetadata) -> bool:
    """An entry the broker cannot translate: it is stored as sent."""
    return is_encrypted(metadata) or is_chunk(metadata)


def entry_count(metadata: pb.MessageMetadata) -> int:
    """How many messages the entry holds (a batch, or one message)."""
    return metadata.num_messages_in_batch if metadata.HasField("num_messages_in_batch") else 1


def is_last_chunk_or_whole(metadata: pb.MessageMetadata) -> bool:
    """Pulsar judges a chunked message for dedup by its last chunk only: every chunk
    carries the message's sequence id (MessageDeduplication)."""
    if not metadata.HasField("chunk_id"):
        return True
    return metadata.chunk_id >= metadata.num_chunks_from_msg - 1


def envelope(raw_metadata: bytes, metadata: pb.MessageMetadata, payload: bytes) -> mpb.SingleMessage:
    """The ``SingleMessage`` storing one Pulsar entry as sent."""
    message = _head(raw_metadata, metadata)
    message.payload = payload
    return message


def _head(raw_metadata: bytes, metadata: pb.MessageMetadata) -> mpb.SingleMessage:
    """An envelope without its payload."""
    message = mpb.SingleMessage(pulsar_metadata=raw_metadata, sequence_id=metadata.sequence_id,
                                publish_time=metadata.publish_time)
    if not metadata.HasField("num_messages_in_batch"):
        # A single message: the metadata's fields are the message's (its text was
        # checked by the frame decoder).
        copy_message_fields(message, metadata, 0, metadata.deliver_at_time)
        return message
    # A batch's key is its first message's, as the producer set it: Key_Shared routes
    # an entry it cannot open by it, as Pulsar's broker does.
    if metadata.HasField("partition_key"):
        message.partition_key = metadata.partition_key
    if metadata.HasField("ordering_key"):
        message.ordering_key = metadata.ordering_key
    if metadata.deliver_at_time:
        message.deliver_at_time = metadata.deliver_at_time
    return message


def envelope_batch(raw_metadata: bytes, metadata: pb.MessageMetadata, payload: bytes) -> bytes:
    """A serialized ``MessageBatch`` holding one Pulsar entry as sent.  Assembled from
    bytes around the payload, copied once (the listener's hot path: building the
    protobuf objects copied it three times, 80 µs for 100 KB against 10): a field may
    come in any order in protobuf's encoding, so the payload goes after the rest."""
    head = _head(raw_metadata, metadata).SerializeToString()
    size = len(head) + 1 + _varint_size(len(payload)) + len(payload)
    return b"".join((b"\x0a", _varint(size), head, b"\x0a", _varint(len(payload)), payload))


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _varint_size(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)


def metadata_of(message: mpb.SingleMessage) -> pb.MessageMetadata:
    """The Pulsar metadata of an envelope; BatchFormatError when it does not parse."""
    metadata = pb.MessageMetadata()
    try:
        metadata.ParseFromString(message.pulsar_metadata)
    except DecodeError as exc:
        raise BatchFormatError(f"a stored Pulsar entry's metadata does not parse: {exc}") from None
    if not metadata.IsInitialized():
        raise BatchFormatError("a stored Pulsar entry's metadata lacks a required field")
    return metadata


def message_count(messages) -> int:
    """How many messages a stored batch's ``SingleMessage`` values stand for (an
    envelope for its whole entry).  BatchFormatError when an envelope's metadata does
    not parse."""
    count = 0
    for message in messages:
        count += entry_count(metadata_of(message)) if message.pulsar_metadata else 1
    return count


def has_envelope(messages) -> bool:
    return any(m.pulsar_metadata for m in messages)


@dataclass(frozen=True, slots=True)
class Opened:
    """What one stored ``SingleMessage`` stands for: the messages at its batch indices
    (``messages``), and for an envelope its metadata (``metadata``) and whether the
    messages are the entry's own (``opened``) or stand-ins (encrypted, a chunk)."""

    messages: list[mpb.SingleMessage]
    metadata: pb.MessageMetadata | None = None
    opened: bool = True


def open_message(message: mpb.SingleMessage, max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> Opened:
    """One stored ``SingleMessage``, opened: itself; an envelope's messages (translated
    as on write); or, for one that cannot be opened, the envelope at its first index and
    a stand-in holding its keys at each other index."""
    if not message.pulsar_metadata:
        return Opened([message])
    metadata = metadata_of(message)
    if not is_opaque(metadata):
        return Opened(list(to_message_batch(metadata, message.payload, max_size).messages), metadata)
    count = entry_count(metadata)
    stand_in = mpb.SingleMessage(sequence_id=message.sequence_id)
    if message.HasField("partition_key"):
        stand_in.partition_key = message.partition_key
    if message.HasField("ordering_key"):
        stand_in.ordering_key = message.ordering_key
    return Opened([message] + [stand_in] * (count - 1), metadata, opened=False)


def stored_messages(batch: bytes | mpb.MessageBatch,
                    max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> list[mpb.SingleMessage]:
    """One ``SingleMessage`` per batch index of a stored batch (see ``open_message``).
    DecodeError or BatchFormatError (a CompressionError) when it does not decode."""
    if isinstance(batch, (bytes, bytearray, memoryview)):
        batch = mpb.MessageBatch.FromString(bytes(batch))
    messages = batch.messages
    if not has_envelope(messages):
        return list(messages)
    out: list[mpb.SingleMessage] = []
    for message in messages:
        out += open_message(message, max_size).messages
    return out


@dataclass(frozen=True, slots=True)
class Part:
    """One MESSAGE frame's worth of a stored batch for a Pulsar consumer: its metadata
    (the stored bytes of an envelope, sent byte for byte), payload, and the batch
    indices it covers (``first`` .. ``first + count - 1``)."""

    metadata: pb.MessageMetadata | bytes
    payload: bytes
    first: int
    count: int


def pulsar_parts(batch: mpb.MessageBatch, *, producer_name: str, publish_time: int,
                 max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> list[Part]:
    """The MESSAGE frames that carry a stored batch to a Pulsar consumer: one, unless
    an envelope that cannot be opened (encrypted, a chunk) shares the batch with other
    messages (a transaction's commit joins its sends), which then go in frames of their
    own around it.  An envelope that can be opened shares a frame like any message."""
    messages = batch.messages
    if len(messages) == 1 and messages[0].pulsar_metadata:
        only = messages[0]
        # An entry stored as sent goes back as it came, whatever it holds.
        return [Part(only.pulsar_metadata, only.payload, 0, entry_count(metadata_of(only)))]
    if not has_envelope(messages):
        metadata, payload = to_pulsar_entry(batch, producer_name=producer_name, publish_time=publish_time)
        return [Part(metadata, payload, 0, len(messages))]
    parts: list[Part] = []
    plain: list[mpb.SingleMessage] = []
    index = 0

    def flush() -> None:
        nonlocal plain
        if plain:
            metadata, payload = to_pulsar_entry(mpb.MessageBatch(messages=plain), producer_name=producer_name,
                                                publish_time=publish_time)
            parts.append(Part(metadata, payload, index - len(plain), len(plain)))
            plain = []

    for message in messages:
        opened = open_message(message, max_size)
        if opened.opened:
            plain += opened.messages
            index += len(opened.messages)
            continue
        flush()
        parts.append(Part(message.pulsar_metadata, message.payload, index, len(opened.messages)))
        index += len(opened.messages)
    flush()
    return parts
