"""What survives topic compaction.  Pure: no I/O.

Pulsar's rule (its default, publishing-order compactor), over the messages below the
compaction horizon in log order -- the previous compacted view's, then the log's:
- a message's key is its partition key; the latest message of each key survives;
- a tombstone (a null value, or an empty payload) removes its key: neither it nor any
  earlier message of the key survives;
- a message without a key does not survive (Pulsar 3.2's ``topicCompactionRetainNullKey``
  default; ``retain_null_key`` keeps them all);
- an encrypted message survives as it is, never compacted (its key may not say which
  messages it holds: an encrypted batch's keys are encrypted); nor does it hide an
  earlier message of its key;
- a chunked message counts once, at its last chunk (its chunks carry its key), and
  its chunks survive together or not at all; the chunks of a message whose last chunk
  is not below the horizon yet survive, so a reader can still put it together.
Only committed messages are in the log (an aborted transaction's never are; an open
one's are not there yet), so only they are compacted.

A run is two passes (as Pulsar's two-phase compactor): ``Survivors.note`` every message
in order, then ask ``survives`` of each again, so only positions, not payloads, are held
between the passes.  ``candidates`` reads what the rule needs of a stored batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.pulsar import stored

Position = tuple[int, int]   # (entry id, batch index)


@dataclass(frozen=True, slots=True)
class Candidate:
    """What compaction reads of one message (one batch index) of a stored entry."""

    key: str | None              # the partition key; None: none
    tombstone: bool = False      # a null value or an empty payload
    encrypted: bool = False      # kept as it is
    chunk: tuple[str, int, int] | None = None   # (uuid, chunk id, chunk count) of a chunk


def candidates(batch: bytes) -> list[Candidate]:
    """One Candidate per batch index of a stored batch (DecodeError, BatchFormatError
    when it does not decode)."""
    out: list[Candidate] = []
    for message in pb.MessageBatch.FromString(batch).messages:
        opened = stored.open_message(message)
        metadata = opened.metadata
        if opened.opened:
            out += [_plain(m) for m in opened.messages]
        elif metadata is not None and stored.is_encrypted(metadata):
            key = message.partition_key if message.HasField("partition_key") else None
            out += [Candidate(key, encrypted=True)] * len(opened.messages)
        else:   # a chunk (a single message: never batched)
            assert metadata is not None
            key = message.partition_key if message.HasField("partition_key") else None
            out.append(Candidate(key, chunk=(metadata.uuid, metadata.chunk_id, metadata.num_chunks_from_msg)))
    return out


def _plain(m: pb.SingleMessage) -> Candidate:
    key = m.partition_key if m.HasField("partition_key") and not m.null_partition_key else None
    return Candidate(key, tombstone=m.null_value or not m.payload)


@dataclass
class Survivors:
    """One compaction run's two passes."""

    retain_null_key: bool = False
    latest: dict[str, Position] = field(default_factory=dict)   # key -> its latest message
    # A chunked message noted whole (its last chunk seen): uuid -> (key, last chunk's position)
    chunked: dict[str, tuple[str | None, Position]] = field(default_factory=dict)
    noted: int = 0

    # ---------------------------------------------------------------- first pass

    def note(self, position: Position, c: Candidate) -> None:
        """Take one message, in log order."""
        self.noted += 1
        if c.encrypted:
            return
        if c.chunk is not None:
            uuid, chunk_id, count = c.chunk
            if chunk_id < count - 1:
                return
            self.chunked[uuid] = (c.key, position)   # the message, at its last chunk
        elif c.tombstone and c.key is not None:
            self.latest.pop(c.key, None)
            return
        if c.key is not None:
            self.latest[c.key] = position

    # ---------------------------------------------------------------- second pass

    def survives(self, position: Position, c: Candidate) -> bool:
        """Whether the message at ``position`` is in the compacted view."""
        if c.encrypted:
            return True
        if c.chunk is not None:
            whole = self.chunked.get(c.chunk[0])
            if whole is None:
                return True   # not complete below the horizon: kept for its last chunk
            key, last = whole
            if key is None:
                return self.retain_null_key
            return self.latest.get(key) == last
        if c.key is None:
            return self.retain_null_key
        if c.tombstone:
            return False
        return self.latest.get(c.key) == position

    def kept(self, entry_id: int, entry: list[Candidate]) -> list[int]:
        """The batch indices of an entry that survive."""
        return [i for i, c in enumerate(entry) if self.survives((entry_id, i), c)]


BLANK = pb.SingleMessage()


def compact_batch(batch: bytes, kept: list[int]) -> bytes:
    """The batch of an entry in the compacted view: its messages at ``kept`` as they
    were, every other one emptied, so batch indices keep their meaning (an envelope is
    kept whole when all its messages are, else opened to be emptied message by
    message; one that cannot be opened is only ever kept whole)."""
    keep = set(kept)
    out = pb.MessageBatch()
    index = 0
    for message in pb.MessageBatch.FromString(batch).messages:
        if not message.pulsar_metadata:
            out.messages.append(message if index in keep else BLANK)
            index += 1
            continue
        opened = stored.open_message(message)
        span = range(index, index + len(opened.messages))
        index += len(opened.messages)
        if not any(i in keep for i in span) and len(span) == 1:
            out.messages.append(BLANK)
        elif all(i in keep for i in span) or not opened.opened:
            out.messages.append(message)
        else:
            out.messages.extend(m if i in keep else BLANK for i, m in zip(span, opened.messages))
    return out.SerializeToString()
