"""A Pulsar entry (MessageMetadata + payload) to and from Magnetar's ``MessageBatch``.

A Pulsar producer sends one entry per SEND: either a single message (the metadata holds
its key, properties and event time; ``num_messages_in_batch`` is absent) or a batch
(``num_messages_in_batch`` set; the payload, after decompression, is a sequence of
``[u32 size][SingleMessageMetadata][payload]``, one per message).  Compression applies to
the whole payload.

What maps to what (Pulsar -> Magnetar ``SingleMessage``):

==============================================  ===========================================
Pulsar                                          Magnetar
==============================================  ===========================================
message bytes                                   ``payload``
``properties`` (KeyValue list)                  ``properties`` (map: a repeated key keeps
                                                its last value)
``partition_key``                               ``partition_key``
``event_time`` (0 = unset)                      ``event_time`` (0 = unset)
``ordering_key``                                ``ordering_key``
``sequence_id`` (single; batch: per message,    ``sequence_id``
or the entry's first id + index when absent)
``MessageMetadata.producer_name``               the entry's producer (``DeliveredEntry``)
``MessageMetadata.publish_time`` (the           ``publish_time`` of each message (the
producer's clock)                               entry's own publish time is the broker's)
``null_value``                                  ``null_value``
``null_partition_key``                          ``null_partition_key``
``partition_key_b64_encoded``                   ``partition_key_b64_encoded`` (the key
                                                stays the base64 text, as on the wire)
``MessageMetadata.deliver_at_time``             ``deliver_at_time`` (carried, not enforced)
``MessageMetadata.schema_version`` (8 bytes)    ``schema_version`` of each message (a
                                                number; back to 8 bytes on the way out)
==============================================  ===========================================

Not kept: ``replicate_to``; the chunking and encryption fields are refused (they need the
whole message's context).

Pure: no I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from google.protobuf.message import DecodeError

from magnetar_protocol import magnetar_pb2 as mpb
from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.errors import BadRequest
from magnetar_protocol.pulsar.compression import CompressionError, compress, decompress
from magnetar_protocol.pulsar.frames import DEFAULT_MAX_MESSAGE_SIZE, invalid_text_field
from magnetar_protocol.schemainfo import parse_version, version_bytes

_U32 = struct.Struct(">I")


class BatchFormatError(CompressionError):
    """An entry whose batch layout is not what its metadata announces."""


def _key_values(properties) -> list[pb.KeyValue]:
    return [pb.KeyValue(key=k, value=v) for k, v in sorted(properties.items())]


@dataclass(frozen=True, slots=True)
class PulsarMessage:
    """One message of a Pulsar entry with everything a Pulsar client can set on it,
    including what ``SingleMessage`` cannot hold yet (``ordering_key``, ``null_value``)."""

    payload: bytes
    sequence_id: int
    properties: dict[str, str] = field(default_factory=dict)
    partition_key: str | None = None
    ordering_key: bytes | None = None
    event_time: int = 0
    null_value: bool = False
    null_partition_key: bool = False
    partition_key_b64_encoded: bool = False


def _entry_messages(metadata: pb.MessageMetadata, payload: bytes, max_size: int):
    """(payload, sequence id, per-message metadata) for each message of the entry.  The
    per-message metadata is the MessageMetadata itself for a single message, else that
    message's SingleMessageMetadata: both name the fields alike (properties,
    partition_key, ordering_key, event_time, null_value)."""
    _check_entry(metadata)
    data = decompress(metadata.compression, payload, metadata.uncompressed_size, max_size)
    if not metadata.HasField("num_messages_in_batch"):
        yield data, metadata.sequence_id, metadata
        return
    count = metadata.num_messages_in_batch
    if count < 1:
        raise BatchFormatError(f"a batch of {count} messages")
    offset = 0
    end = len(data)
    view = memoryview(data)
    for index in range(count):
        if offset + 4 > end:
            raise BatchFormatError(f"batch ends before message {index} of {count}")
        (meta_size,) = _U32.unpack_from(view, offset)
        offset += 4
        if offset + meta_size > end:
            raise BatchFormatError(f"message {index}'s metadata of {meta_size} bytes overruns the batch")
        single = pb.SingleMessageMetadata()
        try:
            single.ParseFromString(view[offset:offset + meta_size].tobytes())
        except DecodeError as exc:
            raise BatchFormatError(f"message {index}'s metadata does not parse: {exc}") from None
        if not single.IsInitialized():
            raise BatchFormatError(f"message {index}'s metadata lacks its payload size")
        offset += meta_size
        size = single.payload_size
        if size < 0 or offset + size > end:
            raise BatchFormatError(f"message {index}'s payload of {size} bytes overruns the batch")
        sequence_id = single.sequence_id if single.HasField("sequence_id") else metadata.sequence_id + index
        yield view[offset:offset + size].tobytes(), sequence_id, single
        offset += size
    if offset != end:
        raise BatchFormatError(f"{end - offset} bytes after the batch's {count} messages")


def _text_error(single, index: int) -> BatchFormatError:
    bad = invalid_text_field(single) or "text"
    return BatchFormatError(f"message {index}'s {bad} is not UTF-8 text")


def unpack_entry(metadata: pb.MessageMetadata, payload: bytes,
                 max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> list[PulsarMessage]:
    """The messages of one Pulsar entry, decompressed and unbatched, every field kept."""
    messages = []
    for index, (data, sequence_id, single) in enumerate(_entry_messages(metadata, payload, max_size)):
        if single is not metadata and invalid_text_field(single) is not None:
            raise _text_error(single, index)
        messages.append(PulsarMessage(
            payload=data,
            sequence_id=sequence_id,
            properties={kv.key: kv.value for kv in single.properties},
            partition_key=single.partition_key if single.HasField("partition_key") else None,
            ordering_key=single.ordering_key if single.HasField("ordering_key") else None,
            event_time=single.event_time,
            null_value=single.null_value,
            null_partition_key=single.null_partition_key,
            partition_key_b64_encoded=single.partition_key_b64_encoded,
        ))
    return messages


def to_message_batch(metadata: pb.MessageMetadata, payload: bytes,
                     max_size: int = DEFAULT_MAX_MESSAGE_SIZE) -> mpb.MessageBatch:
    """The Magnetar batch holding the messages of one Pulsar entry (see the table above
    for what is kept).  The listener's SEND path: one reused SingleMessageMetadata is
    parsed per message and each SingleMessage is built in one ``add`` call, with the
    optional fields set only when present: 0.3–0.4x the time of a generator and a new
    protobuf object per message, on batches of plain messages (docs/pulsar-protocol.md).
    The checks are ``_entry_messages``'s."""
    _check_entry(metadata)
    data = decompress(metadata.compression, payload, metadata.uncompressed_size, max_size)
    batch = mpb.MessageBatch()
    add = batch.messages.add
    publish_time = metadata.publish_time
    deliver_at = metadata.deliver_at_time
    if not metadata.HasField("num_messages_in_batch"):
        message = add(payload=data, sequence_id=metadata.sequence_id, publish_time=publish_time)
        copy_message_fields(message, metadata, 0, deliver_at)
        return _with_schema_version(batch, metadata)
    count = metadata.num_messages_in_batch
    if count < 1:
        raise BatchFormatError(f"a batch of {count} messages")
    single = pb.SingleMessageMetadata()
    parse = single.ParseFromString
    has = single.HasField
    unpack = _U32.unpack_from
    base = metadata.sequence_id
    offset = 0
    end = len(data)
    for index in range(count):
        if offset + 4 > end:
            raise BatchFormatError(f"batch ends before message {index} of {count}")
        (meta_size,) = unpack(data, offset)
        offset += 4
        meta_end = offset + meta_size
        if meta_end > end:
            raise BatchFormatError(f"message {index}'s metadata of {meta_size} bytes overruns the batch")
        try:
            parse(data[offset:meta_end])
        except DecodeError as exc:
            raise BatchFormatError(f"message {index}'s metadata does not parse: {exc}") from None
        if not has("payload_size"):
            raise BatchFormatError(f"message {index}'s metadata lacks its payload size")
        size = single.payload_size
        offset = meta_end + size
        if size < 0 or offset > end:
            raise BatchFormatError(f"message {index}'s payload of {size} bytes overruns the batch")
        if has("sequence_id"):
            sequence_id = single.sequence_id
            # The size of a metadata holding nothing but payload_size and sequence_id
            # (1-byte tags): a message with any other field is longer.
            plain = 2 + ((size.bit_length() + 6) // 7 or 1) + ((sequence_id.bit_length() + 6) // 7 or 1)
        else:
            sequence_id = base + index
            plain = 1 + ((size.bit_length() + 6) // 7 or 1)
        message = add(payload=data[meta_end:offset], sequence_id=sequence_id, publish_time=publish_time)
        if meta_size != plain or deliver_at:
            copy_message_fields(message, single, index, deliver_at)
    if offset != end:
        raise BatchFormatError(f"{end - offset} bytes after the batch's {count} messages")
    return _with_schema_version(batch, metadata)


def _with_schema_version(batch: mpb.MessageBatch, metadata: pb.MessageMetadata) -> mpb.MessageBatch:
    """The entry's schema version on each of its messages (a Magnetar batch has no entry
    metadata of its own)."""
    if metadata.HasField("schema_version"):
        try:
            version = parse_version(metadata.schema_version)
        except BadRequest as exc:
            raise BatchFormatError(f"the entry's schema_version: {exc}") from None
        for message in batch.messages:
            message.schema_version = version
    return batch


def _check_entry(metadata: pb.MessageMetadata) -> None:
    if metadata.encryption_keys or metadata.HasField("encryption_algo"):
        raise BatchFormatError("encrypted messages are not supported")
    if metadata.HasField("chunk_id") or metadata.HasField("num_chunks_from_msg"):
        raise BatchFormatError("chunked messages are not supported")
    if (bad := invalid_text_field(metadata)) is not None:
        raise BatchFormatError(f"the entry's {bad} is not UTF-8 text")


def copy_message_fields(message: mpb.SingleMessage, single, index: int, deliver_at: int) -> None:
    """Copy what a message may carry besides payload and sequence id (``single`` is the
    MessageMetadata of an unbatched entry, else the message's SingleMessageMetadata:
    both name these fields alike)."""
    if deliver_at:
        message.deliver_at_time = deliver_at
    if single.event_time:
        message.event_time = single.event_time
    if single.null_value:
        message.null_value = True
    if single.null_partition_key:
        message.null_partition_key = True
    if single.partition_key_b64_encoded:
        message.partition_key_b64_encoded = True
    try:
        # A proto2 string that is not UTF-8 reads as bytes; proto3 refuses it here.
        if single.HasField("partition_key"):
            message.partition_key = single.partition_key
        if single.HasField("ordering_key"):
            message.ordering_key = single.ordering_key
        if single.properties:
            properties = message.properties
            for kv in single.properties:
                properties[kv.key] = kv.value
    except ValueError:
        raise _text_error(single, index) from None


def to_pulsar_entry(batch: mpb.MessageBatch, *, producer_name: str, publish_time: int,
                    compression: int = pb.NONE,
                    batched: bool | None = None) -> tuple[pb.MessageMetadata, bytes]:
    """The metadata and payload of a MESSAGE frame carrying ``batch``.  One message goes
    out unbatched unless ``batched`` says otherwise; several always as a batch."""
    messages = batch.messages
    if not messages:
        raise ValueError("an entry holds at least one message")
    if batched is None:
        batched = len(messages) > 1
    if not batched and len(messages) > 1:
        raise ValueError(f"{len(messages)} messages need a batch")
    first = messages[0]
    metadata = pb.MessageMetadata(
        producer_name=producer_name,
        sequence_id=first.sequence_id,
        # A Pulsar producer's own publish time when it set one, else the broker's.
        publish_time=first.publish_time or publish_time,
        highest_sequence_id=messages[-1].sequence_id,
    )
    if first.deliver_at_time:
        metadata.deliver_at_time = first.deliver_at_time
    if first.HasField("schema_version"):   # one producer, one schema: the batch's
        metadata.schema_version = version_bytes(first.schema_version)
    if not batched:
        metadata.properties.extend(_key_values(first.properties))
        if first.HasField("partition_key"):
            metadata.partition_key = first.partition_key
        if first.event_time:
            metadata.event_time = first.event_time
        if first.HasField("ordering_key"):
            metadata.ordering_key = first.ordering_key
        _flags(metadata, first)
        data = first.payload
    else:
        metadata.num_messages_in_batch = len(messages)
        parts = []
        single = pb.SingleMessageMetadata()     # reused: building one per message costs 2x
        for message in messages:
            single.Clear()
            single.payload_size = len(message.payload)
            single.sequence_id = message.sequence_id
            add_property = single.properties.add
            for key, value in sorted(message.properties.items()):
                add_property(key=key, value=value)
            if message.HasField("partition_key"):
                single.partition_key = message.partition_key
            if message.event_time:
                single.event_time = message.event_time
            if message.HasField("ordering_key"):
                single.ordering_key = message.ordering_key
            _flags(single, message)
            single_bytes = single.SerializeToString()
            parts += (_U32.pack(len(single_bytes)), single_bytes, message.payload)
        data = b"".join(parts)
    if compression != pb.NONE:
        metadata.compression = compression
        metadata.uncompressed_size = len(data)
        data = compress(compression, data)
    return metadata, data


def _flags(target, message: mpb.SingleMessage) -> None:
    """The null and base64 flags, named alike in MessageMetadata and SingleMessageMetadata."""
    if message.null_value:
        target.null_value = True
    if message.null_partition_key:
        target.null_partition_key = True
    if message.partition_key_b64_encoded:
        target.partition_key_b64_encoded = True
