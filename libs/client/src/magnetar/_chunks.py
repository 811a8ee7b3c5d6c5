"""Chunked messages (Pulsar's format, both ways): cutting a large payload into chunks on
the producer, and putting them back together on the consumer.  Pure: no I/O (the
clock comes in as an argument).

A message larger than the broker's limit goes as several entries, each one chunk: a
Pulsar ``MessageMetadata`` with ``uuid`` (``<producer>-<sequence id>``), ``chunk_id``,
``num_chunks_from_msg`` and ``total_chunk_msg_size``, every chunk carrying the
message's sequence id, properties and keys, stored as sent
(``magnetar_protocol.pulsar.stored``), so a Pulsar consumer reassembles what Magnetar's
producer sent and the reverse.  The consumer keeps each incomplete message until its
last chunk arrives, at most ``max_pending`` of them (the oldest makes room: acked with
``auto_ack_oldest``, else left unacknowledged, as Pulsar's consumer does), and for at
most ``expire_ms`` (then its chunks are acknowledged and dropped: Pulsar's
``expireTimeOfIncompleteChunkedMessage``).  A chunk out of order (one of an
unknown message, or not the next of its message) drops what was gathered for it.
Acknowledging the message acknowledges every chunk.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from magnetar._message import ChunkPiece, Message
from magnetar_protocol import magnetar_pb2 as mpb
from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.pulsar.batches import to_message_batch

CHUNK_FIELDS = ("uuid", "chunk_id", "num_chunks_from_msg", "total_chunk_msg_size")

Position = tuple[int, int]   # (entry id, batch index) of one chunk
# The largest message reassembled from compressed chunks: bounds what a forged
# uncompressed size could make the consumer allocate.
MAX_WHOLE_MESSAGE = 1 << 30


# ---------------------------------------------------------------- producing


def chunk_metadata(producer_name: str, sequence_id: int, publish_time: int, size: int,
                   fields: dict | None) -> pb.MessageMetadata:
    """The metadata every chunk of one message shares (without its chunk fields yet)."""
    metadata = pb.MessageMetadata(producer_name=producer_name, sequence_id=sequence_id,
                                  publish_time=publish_time, uncompressed_size=size)
    if fields:
        for key, value in sorted(fields.get("properties", {}).items()):
            metadata.properties.add(key=key, value=value)
        if "partition_key" in fields:
            metadata.partition_key = fields["partition_key"]
        if "ordering_key" in fields:
            metadata.ordering_key = fields["ordering_key"]
        if fields.get("event_time"):
            metadata.event_time = fields["event_time"]
        if fields.get("deliver_at_time"):
            metadata.deliver_at_time = fields["deliver_at_time"]
    return metadata


def cut(payload: bytes, metadata: pb.MessageMetadata, max_message_size: int) -> list[bytes]:
    """Each chunk's metadata bytes and payload, alternating (``metadata`` is the shared
    one).  A chunk holds ``max_message_size`` minus the shared metadata's size, as
    Pulsar's producer cuts (its chunk fields come on top, which the broker allows)."""
    room = max_message_size - metadata.ByteSize()
    if room <= 0:
        raise ValueError(f"the message's metadata alone ({metadata.ByteSize()} bytes) "
                         f"exceeds the maximum message size of {max_message_size} bytes")
    count = max(1, -(-len(payload) // room))
    metadata.uuid = f"{metadata.producer_name}-{metadata.sequence_id}"
    metadata.num_chunks_from_msg = count
    metadata.total_chunk_msg_size = len(payload)
    out = []
    for chunk_id in range(count):
        metadata.chunk_id = chunk_id
        out += (metadata.SerializeToString(), payload[chunk_id * room:(chunk_id + 1) * room])
    return out


# ---------------------------------------------------------------- consuming


@dataclass
class _Pending:
    total: int
    received_ms: int
    pieces: list[ChunkPiece] = field(default_factory=list)

    def positions(self) -> list[Position]:
        return [p.position for p in self.pieces]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one chunk (or the passing of time) led to: a whole message, chunks to
    acknowledge (expired, or dropped to make room with ``auto_ack_oldest``) and
    chunks dropped without an ack (they come again when redelivered)."""

    message: Message | None = None
    ack: tuple[Position, ...] = ()
    dropped: tuple[Position, ...] = ()


NOTHING = Outcome()


class Assembler:
    """The incomplete chunked messages of one partition consumer's subscription."""

    def __init__(self, max_pending: int = 10, expire_ms: int = 60_000,
                 auto_ack_oldest: bool = False) -> None:
        self.max_pending = max_pending
        self.expire_ms = expire_ms
        self.auto_ack_oldest = auto_ack_oldest
        self.pending: OrderedDict[str, _Pending] = OrderedDict()
        self.generation = 0

    def add(self, piece: ChunkPiece, now_ms: int) -> Outcome:
        """Take one chunk: the whole message when it was the last."""
        if piece.info.generation != self.generation:
            # A new subscription (reconnect, seek): what was gathered comes again.
            self.pending.clear()
            self.generation = piece.info.generation
        metadata = piece.metadata
        uuid, chunk_id = metadata.uuid, metadata.chunk_id
        pending = self.pending.get(uuid)
        ack: list[Position] = []
        dropped: list[Position] = []
        if chunk_id == 0 and pending is None:
            while self.max_pending > 0 and len(self.pending) >= self.max_pending:
                _, oldest = self.pending.popitem(last=False)
                (ack if self.auto_ack_oldest else dropped).extend(oldest.positions())
            pending = self.pending[uuid] = _Pending(metadata.num_chunks_from_msg, now_ms)
        if pending is None or chunk_id != len(pending.pieces) or chunk_id >= pending.total:
            # Not the next chunk of a message being gathered: drop what it belongs to
            # (Pulsar's consumer does too); redelivery brings the chunks again.
            if pending is not None:
                dropped += self.pending.pop(uuid).positions()
            dropped.append(piece.position)
            return Outcome(None, tuple(ack), tuple(dropped))
        pending.pieces.append(piece)
        if len(pending.pieces) < pending.total:
            return Outcome(None, tuple(ack), tuple(dropped)) if ack or dropped else NOTHING
        del self.pending[uuid]
        return Outcome(whole(pending.pieces), tuple(ack), tuple(dropped))

    def expire(self, now_ms: int) -> Outcome:
        """Drop (and acknowledge) what waited longer than ``expire_ms``."""
        if self.expire_ms <= 0:
            return NOTHING
        ack: list[Position] = []
        for uuid in [u for u, p in self.pending.items() if now_ms - p.received_ms > self.expire_ms]:
            ack += self.pending.pop(uuid).positions()
        return Outcome(ack=tuple(ack)) if ack else NOTHING

    def __len__(self) -> int:
        return len(self.pending)


def whole(pieces: list[ChunkPiece]) -> Message:
    """The message the chunks make: its metadata without the chunk fields over the
    joined payloads (decompressed as the metadata says), at the last chunk's place;
    acknowledging it acknowledges every chunk."""
    metadata = pb.MessageMetadata()
    metadata.CopyFrom(pieces[-1].metadata)
    for name in CHUNK_FIELDS:
        metadata.ClearField(name)
    data = b"".join(p.payload for p in pieces)
    limit = max(len(data), min(metadata.uncompressed_size, MAX_WHOLE_MESSAGE))
    single: mpb.SingleMessage = to_message_batch(metadata, data, limit).messages[0]
    last = pieces[-1]
    message = Message(single, last.info, last.index, max(p.redelivery for p in pieces))
    message._extra = tuple(p.position for p in pieces[:-1])
    return message
