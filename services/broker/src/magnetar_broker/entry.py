"""A stored batch as the broker holds it in memory.  Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar_protocol.txnid import TxnID


@dataclass(frozen=True, slots=True)
class Entry:
    """One stored batch, or a commit marker whose payload is its transaction's batches
    joined (serialized MessageBatch values concatenate into one)."""

    entry_id: int
    producer_name: str
    num_messages: int
    publish_time: int
    payload: bytes | None  # None: a marker not expanded yet
    txn: TxnID | None = None
    # A marker committed by this broker: its batches, still in memory, joined on first
    # read rather than at commit (a commit's cost stays independent of its size).
    parts: tuple[bytes, ...] | None = None
    # The latest delivery time of its messages (ms; 0: none is delayed), as its producer
    # said; each message carries its own (SingleMessage.deliver_at_time).  A commit
    # marker's is 0: a subscription that honours delays decodes markers.
    deliver_at: int = 0
    # An entry of the compacted view (partition/compacted.py): the mask of its batch
    # indices in the view (the others were compacted away); None for the log's entries.
    kept: int | None = None

    def size(self) -> int:
        """Bytes held in memory."""
        if self.payload is not None:
            return len(self.payload)
        return sum(map(len, self.parts)) if self.parts else 0


@dataclass(frozen=True, slots=True)
class EntryMeta:
    """What trimming, TTL and eviction read of a stored entry (partition/trimming.py)."""

    entry_id: int
    publish_time_ms: int
    size: int  # bytes stored (payload; a commit marker's: its transaction's batches)
