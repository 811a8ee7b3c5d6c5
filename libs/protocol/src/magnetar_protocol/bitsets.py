"""Batch-index bitsets (``CursorState.acked_bitset``, delivery masks) as Python ints.
Pure: no I/O.

Walking a mask bit by bit (``mask >> i & 1`` for each i) costs a copy of the whole int
per step, so a mask with a high bit (an index of 2^27 once made one 16 MB) took minutes.
``set_bits`` scans the bytes for non-zero ones in C and only looks inside those: linear
in the mask's size, and in practice in the number of bits set.
"""

from __future__ import annotations

import re

_NONZERO = re.compile(rb"[^\x00]")
_BITS_OF_BYTE = tuple(tuple(i for i in range(8) if b >> i & 1) for b in range(256))


def set_bits(mask: int) -> list[int]:
    """The indexes of the set bits of a non-negative ``mask``, lowest first."""
    if mask <= 0:
        return []
    data = mask.to_bytes((mask.bit_length() + 7) // 8, "little")
    out: list[int] = []
    for match in _NONZERO.finditer(data):
        at = match.start()
        base = at * 8
        out.extend(base + i for i in _BITS_OF_BYTE[data[at]])
    return out
