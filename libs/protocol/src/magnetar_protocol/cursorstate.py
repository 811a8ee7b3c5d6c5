"""A stored cursor's individual acknowledgements (``subscriptions.acked_state``, a
``CursorState``), as the broker and the admin both read them.  Pure: no I/O.

Pulsar's msgBacklog counts the messages after the mark-delete position less those
acknowledged individually beyond it; both the admin's stats and the broker's Prometheus
gauges count it so, with these two functions.
"""

from __future__ import annotations

from magnetar_protocol import magnetar_pb2 as pb

WHOLE = -1  # a mask covering every message of the entry, whatever its size


def decode_acks(state: bytes | None) -> dict[int, int]:
    """``acked_state`` -> {entry id: mask of acknowledged batch indexes, or WHOLE}."""
    return {e.entry_id: WHOLE if not e.acked_bitset else int.from_bytes(e.acked_bitset, "little")
            for e in pb.CursorState.FromString(bytes(state or b"")).entries}


def acked_beyond(mark_delete: int, acks: dict[int, int], counts: dict[int, int]) -> int:
    """Messages acknowledged individually after ``mark_delete``.  ``counts``: entry id ->
    its number of messages (an entry missing from it is no longer stored)."""
    return sum(counts[e] if m == WHOLE else min(m.bit_count(), counts[e])
               for e, m in acks.items() if e > mark_delete and e in counts)
