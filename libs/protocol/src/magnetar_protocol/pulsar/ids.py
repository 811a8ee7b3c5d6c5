"""Pulsar message ids and batch-index acks against Magnetar positions.  Pure.

Magnetar has no ledgers: every id goes out with ``ledger_id`` 0 and Magnetar's entry
id, partition and batch index.  The C++ client's ``MessageId.earliest`` is
(-1, -1) and ``latest`` (INT64_MAX, INT64_MAX), sent as unsigned 64-bit numbers.
A MESSAGE's or ACK's ``ack_set`` is a bitset of int64 words where a set bit i means
message i of the batch is *not* acknowledged (the complement of Magnetar's acked bits).
"""

from __future__ import annotations

from magnetar_protocol import magnetar_pb2 as mpb
from magnetar_protocol import pulsar_api_pb2 as pb

LEDGER = 0
U64 = (1 << 64) - 1
EARLIEST_LEDGER = U64           # -1 as uint64
LATEST_ENTRY = (1 << 63) - 1    # INT64_MAX
WHOLE = -1
DUPLICATE_ID = (U64, U64)       # what Pulsar answers a dropped duplicate with: (-1, -1)


def is_earliest(mid: pb.MessageIdData) -> bool:
    return mid.ledger_id == EARLIEST_LEDGER and mid.entry_id == U64


def is_latest(mid: pb.MessageIdData) -> bool:
    return mid.ledger_id == LATEST_ENTRY and mid.entry_id == LATEST_ENTRY


def message_id(entry_id: int, partition: int, batch_index: int = WHOLE,
               batch_size: int = 0) -> pb.MessageIdData:
    mid = pb.MessageIdData(ledger_id=LEDGER, entry_id=entry_id, partition=partition)
    if batch_index != WHOLE:
        mid.batch_index = batch_index
    if batch_size:
        mid.batch_size = batch_size
    return mid


def words_to_indices(words, size: int | None = None) -> list[int]:
    """The set bits of an int64-word bitset (lowest word first), as indices."""
    out = []
    for w, word in enumerate(words):
        word &= U64
        base = w * 64
        while word:
            low = word & -word
            index = base + low.bit_length() - 1
            if size is None or index < size:
                out.append(index)
            word ^= low
    return out


def indices_to_words(indices, size: int) -> list[int]:
    """An int64-word bitset with the given indices set (signed, as the wire's int64)."""
    words = [0] * ((size + 63) // 64)
    for index in indices:
        words[index // 64] |= 1 << (index % 64)
    return [w - (1 << 64) if w >= 1 << 63 else w for w in words]


def ack_positions(mid: pb.MessageIdData, cumulative: bool, size: int | None) -> list[mpb.Position]:
    """The Magnetar positions an ACK's message id acknowledges (``size``: the entry's
    message count when known).  Without ``ack_set``: the whole entry, or its batch index
    when one is named.  With it: individually every message whose bit is clear;
    cumulatively everything before the first still-unacked message."""
    entry = mid.entry_id
    if not mid.ack_set:
        index = mid.batch_index if mid.HasField("batch_index") and mid.batch_index >= 0 else WHOLE
        return [mpb.Position(entry_id=entry, batch_index=index)]
    if size is None:
        size = mid.batch_size if mid.HasField("batch_size") and mid.batch_size > 0 else 64 * len(mid.ack_set)
    unacked = set(words_to_indices(mid.ack_set, size))
    if cumulative:
        first_unacked = min(unacked) if unacked else size
        if first_unacked == size:
            return [mpb.Position(entry_id=entry, batch_index=WHOLE)]
        if first_unacked == 0:
            return [mpb.Position(entry_id=entry - 1, batch_index=WHOLE)] if entry > 0 else []
        return [mpb.Position(entry_id=entry, batch_index=first_unacked - 1)]
    acked = [i for i in range(size) if i not in unacked]
    if len(acked) == size:
        return [mpb.Position(entry_id=entry, batch_index=WHOLE)]
    return [mpb.Position(entry_id=entry, batch_index=i) for i in acked]
