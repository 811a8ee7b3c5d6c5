"""A subscription's acknowledgement state.  Pure: no I/O.

Everything at or below ``mark_delete`` (an entry id) is acknowledged.  Beyond it,
``acked`` maps an entry id to a bitmask of acknowledged batch indices; an entry whose
mask covers all its messages is complete.  Whenever the entry after ``mark_delete``
completes, ``mark_delete`` moves forward, so ``acked`` stays small for consumers that
acknowledge roughly in order.
"""

from __future__ import annotations

from magnetar_broker.partition.batchcheck import WHOLE as WHOLE  # re-exported: a cursor's "whole entry"
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.cursorstate import decode_acks


def full_mask(num_messages: int) -> int:
    return (1 << num_messages) - 1


class Cursor:
    __slots__ = ("mark_delete", "acked", "_sizes")

    def __init__(self, mark_delete: int = -1, acked: dict[int, int] | None = None,
                 complete: set[int] | None = None):
        self.mark_delete = mark_delete
        self.acked: dict[int, int] = dict(acked or {})
        # Entry sizes we know of; an entry in `complete` with no size is fully acked.
        self._sizes: dict[int, int] = {}
        for entry_id in complete or ():
            self.acked[entry_id] = -1  # -1: every bit set, whatever the size

    def copy(self) -> "Cursor":
        twin = Cursor(self.mark_delete, self.acked)
        twin._sizes = dict(self._sizes)
        return twin

    # ---------------------------------------------------------------- queries

    def is_acked(self, entry_id: int, index: int) -> bool:
        if entry_id <= self.mark_delete:
            return True
        mask = self.acked.get(entry_id, 0)
        return mask == -1 or bool(mask >> index & 1) if index >= 0 else mask == -1

    def size_of(self, entry_id: int) -> int | None:
        """The entry's number of messages when this cursor has been told it."""
        return self._sizes.get(entry_id)

    def unacked_mask(self, entry_id: int, num_messages: int) -> int:
        """Bitmask of the entry's messages not yet acknowledged (0 = nothing left)."""
        if entry_id <= self.mark_delete:
            return 0
        mask = self.acked.get(entry_id, 0)
        if mask == -1:
            return 0
        return full_mask(num_messages) & ~mask

    # ---------------------------------------------------------------- changes

    def note_size(self, entry_id: int, num_messages: int) -> None:
        if entry_id > self.mark_delete:
            self._sizes[entry_id] = num_messages
            self._settle(entry_id)

    def ack(self, entry_id: int, index: int, num_messages: int | None = None) -> None:
        """Acknowledge one message (``index``) or the whole entry (``WHOLE``)."""
        if entry_id <= self.mark_delete:
            return
        if num_messages is not None:
            self._sizes[entry_id] = num_messages
        if index == WHOLE:
            self.acked[entry_id] = -1
        else:
            mask = self.acked.get(entry_id, 0)
            if mask != -1:
                self.acked[entry_id] = mask | (1 << index)
        self._settle(entry_id)
        self._advance()

    def ack_first(self, entry_id: int, count: int, num_messages: int | None = None) -> None:
        """Acknowledge the entry's messages 0..count-1 (one mask operation, however many)."""
        if entry_id <= self.mark_delete or count <= 0:
            return
        if num_messages is not None:
            self._sizes[entry_id] = num_messages
        mask = self.acked.get(entry_id, 0)
        if mask != -1:
            self.acked[entry_id] = mask | full_mask(count)
        self._settle(entry_id)
        self._advance()

    def ack_cumulative(self, entry_id: int, index: int, num_messages: int | None = None) -> None:
        """Acknowledge everything up to and including (entry_id, index)."""
        if entry_id <= self.mark_delete:
            return
        for e in [e for e in self.acked if e < entry_id]:
            del self.acked[e]
        for e in [e for e in self._sizes if e < entry_id]:
            del self._sizes[e]
        self.mark_delete = entry_id - 1
        if index == WHOLE:
            self.mark_delete = entry_id
            self.acked.pop(entry_id, None)
            self._sizes.pop(entry_id, None)
        else:
            if num_messages is not None:
                self._sizes[entry_id] = num_messages
            mask = self.acked.get(entry_id, 0)
            if mask != -1:
                self.acked[entry_id] = mask | full_mask(index + 1)
            self._settle(entry_id)
        self._advance()

    def reset(self, mark_delete: int, acked: dict[int, int] | None = None) -> None:
        self.mark_delete = mark_delete
        self.acked = dict(acked or {})
        self._sizes.clear()

    def _settle(self, entry_id: int) -> None:
        size = self._sizes.get(entry_id)
        mask = self.acked.get(entry_id)
        if size is not None and mask is not None and mask != -1 and mask & full_mask(size) == full_mask(size):
            self.acked[entry_id] = -1

    def _advance(self) -> None:
        while self.acked.get(self.mark_delete + 1) == -1:
            self.mark_delete += 1
            del self.acked[self.mark_delete]
            self._sizes.pop(self.mark_delete, None)

    # ---------------------------------------------------------------- storage

    def encode(self) -> bytes:
        state = pb.CursorState()
        for entry_id in sorted(self.acked):
            mask = self.acked[entry_id]
            bits = b"" if mask == -1 else mask.to_bytes((mask.bit_length() + 7) // 8 or 1, "little")
            state.entries.add(entry_id=entry_id, acked_bitset=bits)
        encoded: bytes = state.SerializeToString()
        return encoded

    @classmethod
    def decode(cls, mark_delete: int, data: bytes) -> "Cursor":
        cursor = cls(mark_delete, decode_acks(data))
        cursor._advance()
        return cursor
