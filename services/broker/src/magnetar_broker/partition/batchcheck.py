"""What a stored batch must be, and what a position in the log may name.  Pure: no I/O.

The broker stores a producer's batch as one entry and never re-encodes it, but every
consumer decodes it, so a batch that does not parse (or whose count disagrees with the
entry's ``num_messages``) would stop each of them at that entry.  The check is the C
parser's (upb) one pass over the bytes plus a look at the first and last message:
structure, count and sequence range; not the payloads.  A Pulsar entry stored as sent
(an envelope: magnetar_protocol.pulsar.stored) counts for its entry's messages, read
from its metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from google.protobuf.message import DecodeError

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.pulsar import stored
from magnetar_protocol.pulsar.batches import BatchFormatError


@dataclass(frozen=True, slots=True)
class BatchShape:
    """What admission needs to know of a valid batch beyond its count."""

    # Holds a Pulsar entry stored as sent (magnetar_protocol.pulsar.stored): it cannot
    # be split, so a send partly stored already is judged whole, as Pulsar judges it.
    indivisible: bool = False
    # A chunk before its message's last: dedup lets it through and records nothing,
    # since every chunk carries the message's sequence id (Pulsar's rule).
    judged: bool = True


PLAIN = BatchShape()
# SingleMessage.pulsar_metadata's tag (field 20, length-delimited) as serialized.
ENVELOPE_TAG = bytes([20 << 3 | 2, 1])


class BatchProblem(ValueError):
    """Why a batch may not be stored."""


def checked_batch(batch: bytes, num_messages: int, lowest: int, highest: int) -> BatchShape:
    """The shape of ``batch``, to be stored as an entry of ``num_messages`` messages with
    sequence ids ``lowest``..``highest``; BatchProblem when it may not be."""
    try:
        messages = pb.MessageBatch.FromString(batch).messages
    except (DecodeError, RuntimeWarning) as exc:
        raise BatchProblem(f"batch is not a valid magnetar.v1.MessageBatch ({exc})") from None
    shape = PLAIN
    count = len(messages)
    last_highest = messages[-1].sequence_id if messages else 0
    # An envelope is a send's first message (one travels alone); elsewhere only where
    # its field's tag is in the bytes at all, found in C: no Python loop per message.
    if count and (messages[0].pulsar_metadata or (count > 1 and ENVELOPE_TAG in batch)):
        shape, count, last_highest = _envelopes(messages)
    if count != num_messages:
        raise BatchProblem(f"batch holds {count} messages but num_messages is {num_messages}")
    if not messages:
        raise BatchProblem("batch holds no message")
    first = messages[0].sequence_id
    # The client numbers every message; dedup (including a partial resend) trusts these.
    if first != lowest or last_highest != highest:
        raise BatchProblem(f"the batch's sequence ids run {first}..{last_highest} but the request says "
                           f"sequence_id={lowest}, highest_sequence_id={highest}")
    return shape


def _envelopes(messages: Sequence[pb.SingleMessage]) -> tuple[BatchShape, int, int]:
    """(shape, message count, highest sequence id) of a batch holding envelopes."""
    count = 0
    judged = True
    highest = 0
    for message in messages:
        if not message.pulsar_metadata:
            count += 1
            highest = message.sequence_id
            continue
        try:
            metadata = stored.metadata_of(message)
        except BatchFormatError as exc:
            raise BatchProblem(str(exc)) from None
        if metadata.sequence_id != message.sequence_id:
            raise BatchProblem(f"a stored Pulsar entry says sequence id {metadata.sequence_id} "
                               f"but its message {message.sequence_id}")
        n = stored.entry_count(metadata)
        if n < 1:
            raise BatchProblem(f"a stored Pulsar entry of {n} messages")
        count += n
        highest = max(metadata.highest_sequence_id, metadata.sequence_id + n - 1)
        if not stored.is_last_chunk_or_whole(metadata):
            if len(messages) > 1:
                raise BatchProblem("a chunk of a message travels alone in its batch")
            judged = False
    return BatchShape(indivisible=True, judged=judged), count, highest


def batch_problem(batch: bytes, num_messages: int, lowest: int, highest: int) -> str | None:
    """Why ``batch`` may not be stored as an entry of ``num_messages`` messages with
    sequence ids ``lowest``..``highest``; None when it may."""
    try:
        checked_batch(batch, num_messages, lowest, highest)
    except BatchProblem as exc:
        return str(exc)
    return None


def schema_problem(batch: bytes, payload_check: Callable[[bytes], str | None]) -> str | None:
    """Why a batch (one checked_batch passed) does not match its topic's schema, naming
    the message (schemaValidationEnforced: payloadcheck.py); tombstones (null values)
    are not checked.  A Pulsar entry stored as sent is opened (decompressed) to check
    its messages; one the broker cannot open (encrypted, one chunk of a message) is let
    through, as its payloads are not the schema's bytes.  A second parse of the batch:
    only producers under enforcement pay it."""
    index = 0
    for message in pb.MessageBatch.FromString(batch).messages:
        if message.pulsar_metadata:
            try:
                opened = stored.open_message(message)
            except BatchFormatError as exc:
                return f"message {index}: {exc}"
            if not opened.opened:
                index += len(opened.messages)
                continue
            messages: Sequence[pb.SingleMessage] = opened.messages
        else:
            messages = (message,)
        for one in messages:
            if not one.null_value and (problem := payload_check(one.payload)) is not None:
                return f"message {index} (sequence id {one.sequence_id}) does not match the topic's schema: {problem}"
            index += 1
    return None


WHOLE = -1  # batch_index meaning "the whole entry"


class PositionLike(Protocol):
    """A position in the log, whichever wire named it (a command's Position, protobuf's)."""

    @property
    def entry_id(self) -> int: ...
    @property
    def batch_index(self) -> int: ...  # WHOLE: the whole entry


def batch_index_problem(entry_id: int, batch_index: int, num_messages: int | None,
                        max_batch_messages: int) -> str | None:
    """Why ``batch_index`` names no message of entry ``entry_id`` (None when it does).
    -1 is the whole entry.  An index becomes a bit of a mask (acks, seeks, deliveries),
    whose every later operation costs its size, so it is bounded by the entry's real
    message count; by the broker's batch limit when the entry is gone (trimmed), as no
    entry it stored holds more."""
    if batch_index == WHOLE:
        return None
    if batch_index < 0:
        return f"batch_index {batch_index} of entry {entry_id} is negative (-1 means the whole entry)"
    limit = num_messages if num_messages is not None else max_batch_messages
    if batch_index >= limit:
        held = f"holds {num_messages} message(s)" if num_messages is not None else \
            f"is gone and no entry holds more than {max_batch_messages} messages"
        return f"batch_index {batch_index} is past entry {entry_id}, which {held}"
    return None
