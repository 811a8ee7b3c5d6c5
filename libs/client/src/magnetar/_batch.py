"""Batching and sequence ids, the producer's hot path.  No I/O, no event loop (not pure:
a batch notes its start on the monotonic clock).

Rules (docs/protocol.md):
- a message without a user-given sequence id takes the partition's next one; a given id
  moves the counter past it;
- a batch's sequence ids strictly increase: a given id not above the open batch's highest
  seals that batch and starts a new one;
- a batch is sealed when it holds ``max_messages`` messages or the next message would
  take it past ``max_bytes`` (a larger message travels alone); with batching disabled
  every message is its own batch;
- transactional messages are batched per transaction, never with other messages.

A message is kept as its payload, sequence id and callback (plus a small dict of
optional fields when it has any); the ``magnetar.v1.MessageBatch`` is built once, when
the batch is sealed, which costs less than a protobuf object per message.
"""

from __future__ import annotations

import time
from datetime import timedelta

from magnetar_protocol import magnetar_pb2 as pb


def delivery_time(deliver_at=None, deliver_after=None) -> int | None:
    """A delayed message's delivery time in ms since the epoch (pulsar-client's
    ``deliver_at``, ms, or ``deliver_after``, a timedelta from now), None for none.  A
    negative time or delay is a ValueError; so is giving both."""
    if deliver_at is None and deliver_after is None:
        return None
    if deliver_at is not None and deliver_after is not None:
        raise ValueError("give deliver_at or deliver_after, not both")
    if deliver_after is not None:
        if not isinstance(deliver_after, timedelta):
            raise TypeError(f"deliver_after must be a datetime.timedelta, not {type(deliver_after).__name__}")
        if deliver_after < timedelta(0):
            raise ValueError(f"deliver_after must not be negative, got {deliver_after}")
        return int(time.time() * 1000 + deliver_after.total_seconds() * 1000)
    if isinstance(deliver_at, bool) or not isinstance(deliver_at, int) or deliver_at < 0:
        raise ValueError(f"deliver_at must be ms since the epoch (an int >= 0), got {deliver_at!r}")
    return deliver_at


def message_fields(properties=None, partition_key=None, event_timestamp=None,
                   ordering_key=None, deliver_at: int | None = None) -> dict | None:
    """Validated optional ``SingleMessage`` fields, or None when there are none
    (``deliver_at``: from ``delivery_time``)."""
    fields: dict = {}
    if properties:
        fields["properties"] = {str(k): str(v) for k, v in properties.items()}
    if partition_key is not None:
        if not isinstance(partition_key, str):
            raise TypeError(f"partition_key must be a str, not {type(partition_key).__name__}")
        fields["partition_key"] = partition_key
    if event_timestamp:
        if not isinstance(event_timestamp, int) or event_timestamp < 0:
            raise ValueError(f"event_timestamp must be ms since the epoch, got {event_timestamp!r}")
        fields["event_time"] = event_timestamp
    if ordering_key is not None:
        # Pulsar's ordering key: Key_Shared dispatches by it before the partition key.
        if isinstance(ordering_key, str):
            ordering_key = ordering_key.encode()
        if not isinstance(ordering_key, bytes):
            raise TypeError(f"ordering_key must be bytes or str, not {type(ordering_key).__name__}")
        fields["ordering_key"] = ordering_key
    if deliver_at:
        fields["deliver_at_time"] = deliver_at
    return fields or None


class Batch:
    """Messages bound for one send: parallel lists, plus the encoded bytes once sealed."""

    __slots__ = ("payloads", "seqs", "callbacks", "fields", "size", "lowest", "highest", "txn",
                 "created", "data", "deliver_at", "chunk_part", "kept", "schema_version")

    def __init__(self, txn, lowest: int, created: float) -> None:
        self.payloads: list[bytes] = []
        self.seqs: list[int] = []
        self.callbacks: list = []
        self.fields: dict[int, dict] | None = None  # index -> optional SingleMessage fields
        self.size = 0
        self.lowest = lowest
        self.highest = -1
        self.txn = txn
        self.created = created
        self.data = b""
        self.deliver_at = 0  # the latest delivery time of its messages (the broker's index hint)
        self.schema_version: int | None = None  # the producer's schema's, set when sealed
        # A chunk before its message's last: its settling releases no slot and runs no
        # user callback (the last chunk's does, for the message).
        self.chunk_part = False
        # Kept by a one-request transaction (its callbacks answered, its slots given back):
        # sent with the commit, or later through the pipeline if the transaction spills.
        self.kept = False

    def __len__(self) -> int:
        return len(self.payloads)

    def renumber(self, first: int) -> None:
        """Give the messages the sequence ids ``first``, ``first + 1``, ... and encode the
        batch again (a kept batch sent later through the pipeline: its ids must follow
        everything that went before it there)."""
        self.seqs = list(range(first, first + len(self.payloads)))
        self.lowest, self.highest = first, first + len(self.payloads) - 1
        self.data = self.encode()

    def encode(self) -> bytes:
        """The serialized ``MessageBatch``, one ``SingleMessage`` per message (each with
        the producer's ``schema_version`` when it has a schema)."""
        batch = pb.MessageBatch()
        add = batch.messages.add
        if self.fields is None:
            for payload, seq in zip(self.payloads, self.seqs):
                add(payload=payload, sequence_id=seq)
        else:
            extra = self.fields
            for i, (payload, seq) in enumerate(zip(self.payloads, self.seqs)):
                more = extra.get(i)
                if more is None:
                    add(payload=payload, sequence_id=seq)
                else:
                    add(payload=payload, sequence_id=seq, **more)
        if self.schema_version is not None:
            for message in batch.messages:
                message.schema_version = self.schema_version
        return batch.SerializeToString()


class Batcher:
    """One partition's open batches and sequence counter.  Subclasses react to
    ``_opened`` (arm the publish-delay timer) and ``_sealed`` (queue for sending)."""

    def __init__(self, max_messages: int, max_bytes: int, batching: bool = True) -> None:
        self.max_messages = max(1, max_messages) if batching else 1
        self.max_bytes = max(1, max_bytes)
        self.next_seq = 0
        self.schema_version: int | None = None  # the producer's schema's, on every message
        self.current: Batch | None = None
        self.txn_batches: dict = {}  # transaction -> its open batch

    def add(self, payload: bytes, callback, fields: dict | None = None, seq: int | None = None,
            txn=None) -> Batch:
        """Put one message in its batch (sealing as the rules say); the batch it went to."""
        if seq is None:
            seq = self.next_seq
            self.next_seq = seq + 1
        elif seq >= self.next_seq:
            self.next_seq = seq + 1
        batch = self.current if txn is None else self.txn_batches.get(txn)
        size = len(payload)
        if batch is None:
            batch = self._open(txn, seq)
        elif seq <= batch.highest or batch.size + size > self.max_bytes:
            self.seal(batch)
            batch = self._open(txn, seq)
        batch.payloads.append(payload)
        batch.seqs.append(seq)
        batch.callbacks.append(callback)
        if fields is not None:
            if batch.fields is None:
                batch.fields = {}
            batch.fields[len(batch.payloads) - 1] = fields
            batch.deliver_at = max(batch.deliver_at, fields.get("deliver_at_time", 0))
        batch.size += size
        batch.highest = seq
        if len(batch.payloads) >= self.max_messages:
            self.seal(batch)
        return batch

    def _open(self, txn, seq: int) -> Batch:
        batch = Batch(txn, seq, time.monotonic())
        if txn is None:
            self.current = batch
        else:
            self.txn_batches[txn] = batch
        self._opened(batch)
        return batch

    def seal(self, batch: Batch) -> None:
        """Close ``batch`` to new messages, encode it and hand it to ``_sealed``."""
        if batch is self.current:
            self.current = None
        elif self.txn_batches.get(batch.txn) is batch:
            del self.txn_batches[batch.txn]
        else:
            return  # already sealed
        batch.schema_version = self.schema_version
        batch.data = batch.encode()
        self._sealed(batch)

    def seal_all(self) -> None:
        if self.current is not None:
            self.seal(self.current)
        for batch in list(self.txn_batches.values()):
            self.seal(batch)

    def has_open(self) -> bool:
        return self.current is not None or bool(self.txn_batches)

    def _opened(self, batch: Batch) -> None:
        """Hook: a batch was opened."""

    def _sealed(self, batch: Batch) -> None:
        """Hook: a batch is ready to send."""
