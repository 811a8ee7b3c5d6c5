"""A send to a partition and its answer, whatever the wire it came over (the front ends
translate their requests into ``Batch`` and answer from ``Sent``).  Pure: plain values."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar_protocol.txnid import TxnID


@dataclass(frozen=True, slots=True)
class Batch:
    """One producer batch: the messages of a serialized MessageBatch, stored as one entry."""

    producer_id: int
    payload: bytes          # a serialized magnetar.v1.MessageBatch
    num_messages: int
    sequence_id: int        # the lowest sequence id in the batch
    highest_sequence_id: int
    txn: TxnID | None = None  # sent in a transaction: buffered until it ends
    session_id: str = ""      # the session its producer was created in ("": not named)
    deliver_at: int = 0       # the latest delivery time of its messages, ms (0: none delayed)


@dataclass(frozen=True, slots=True)
class Sent:
    """A batch stored (or found stored already: ``duplicate``)."""

    entry_id: int = 0   # its entry; a transactional send's place in its transaction
    last_sequence_id: int = -1
    duplicate: bool = False
    partition: int = -1
