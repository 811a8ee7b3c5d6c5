"""The one transaction-id type of every Magnetar package: client, broker, coordinator,
registry and admin.  Pure: no I/O.  A NamedTuple, so it hashes and compares as the ``(most, least)``
pair it is; ``str()`` is ``"(most,least)"``, as the admin API prints it (Pulsar's form).
The most significant bits are the coordinator id (TCID) that issued it."""

from __future__ import annotations

import re
from typing import NamedTuple

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import BadRequest

_TEXT = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*\)")
MAX_BITS = (1 << 63) - 1  # stored in BIGINT columns


class TxnID(NamedTuple):
    most_bits: int
    least_bits: int

    def __str__(self) -> str:
        return f"({self.most_bits},{self.least_bits})"

    def to_wire(self) -> pb.TxnId:
        """As a ``magnetar.v1.TxnId``."""
        return pb.TxnId(most_bits=self.most_bits, least_bits=self.least_bits)

    @classmethod
    def from_wire(cls, txn: pb.TxnId) -> "TxnID":
        return cls(txn.most_bits, txn.least_bits)

    @classmethod
    def parse(cls, text: str) -> "TxnID":
        """``"(most,least)"`` back into an id; BadRequest when it is not one."""
        match = _TEXT.fullmatch(text.strip())
        if match is None:
            raise BadRequest(f"{text!r} is not a transaction id: write it (most,least), e.g. (0,42)")
        most, least = int(match[1]), int(match[2])
        if most > MAX_BITS or least > MAX_BITS:
            raise BadRequest(f"transaction id {text!r} is out of range: each part is below 2^63")
        return cls(most, least)
