"""What a stored batch must be, and what a position in the log may name.  Pure: no I/O.

The broker stores a producer's batch as one entry and never re-encodes it, but every
consumer decodes it, so a batch that does not parse (or whose count disagrees with the
entry's ``num_messages``) would stop each of them at that entry.  The check is the C
parser's (upb) one pass over the bytes plus a look at the first and last message:
structure, count and sequence range; not the payloads.
"""

from __future__ import annotations

from typing import Protocol

from google.protobuf.message import DecodeError

from magnetar_protocol import magnetar_pb2 as pb


def batch_problem(batch: bytes, num_messages: int, lowest: int, highest: int) -> str | None:
    """Why ``batch`` may not be stored as an entry of ``num_messages`` messages with
    sequence ids ``lowest``..``highest``; None when it may."""
    try:
        messages = pb.MessageBatch.FromString(batch).messages
    except (DecodeError, RuntimeWarning) as exc:
        return f"batch is not a valid magnetar.v1.MessageBatch ({exc})"
    if len(messages) != num_messages:
        return f"batch holds {len(messages)} messages but num_messages is {num_messages}"
    if not messages:
        return "batch holds no message"
    first, last = messages[0].sequence_id, messages[-1].sequence_id
    # The client numbers every message; dedup (including a partial resend) trusts these.
    if first != lowest or last != highest:
        return (f"the batch's sequence ids run {first}..{last} but the request says "
                f"sequence_id={lowest}, highest_sequence_id={highest}")
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
