"""Chunked messages in Magnetar's client: the producer's cut and the consumer's
reassembly, incomplete messages expiring or making room, out-of-order chunks."""

from __future__ import annotations

from magnetar._chunks import Assembler, chunk_metadata, cut
from magnetar._message import ChunkPiece, EntryInfo
from magnetar_protocol import pulsar_api_pb2 as pb


def pieces(payload: bytes, seq: int, room: int, first_entry: int = 0, generation: int = 0,
           fields: dict | None = None) -> list[ChunkPiece]:
    """The chunks of ``payload``, ``room`` bytes of it each."""
    metadata = chunk_metadata("p", seq, 1, len(payload), fields)
    parts = cut(payload, metadata, metadata.ByteSize() + room)
    out = []
    for i in range(len(parts) // 2):
        info = EntryInfo(-1, first_entry + i, 1, "t", 1, "p", None, generation)
        out.append(ChunkPiece(pb.MessageMetadata.FromString(parts[2 * i]), parts[2 * i + 1], info, 0))
    return out


def test_chunks_are_cut_at_the_limit_less_the_metadata_and_put_back_together():
    payload = bytes(range(256)) * 40   # 10,240 bytes
    chunks = pieces(payload, 5, 1000, fields={"properties": {"a": "b"}, "partition_key": "k"})
    assert len(chunks) == 11 and [len(c.payload) for c in chunks] == [1000] * 10 + [240]
    assert {c.metadata.uuid for c in chunks} == {"p-5"}
    assembler = Assembler()
    outcomes = [assembler.add(c, now_ms=0) for c in chunks]
    assert all(o.message is None for o in outcomes[:-1])
    whole = outcomes[-1].message
    assert (whole.data(), whole.properties(), whole.partition_key(), whole.sequence_id()) == \
        (payload, {"a": "b"}, "k", 5)
    # At the last chunk's place; acknowledging it acknowledges every chunk.
    assert whole.message_id().entry_id() == 10 and whole._extra == tuple((e, 0) for e in range(10))
    assert len(assembler) == 0


def test_an_incomplete_message_expires_and_its_chunks_are_acknowledged():
    assembler = Assembler(expire_ms=500)
    first, second, _ = pieces(b"x" * 30, 1, 10)  # three chunks
    assembler.add(first, now_ms=1000)
    assembler.add(second, now_ms=1200)
    assert assembler.expire(now_ms=1500).ack == ()
    assert assembler.expire(now_ms=1501).ack == ((0, 0), (1, 0))
    assert len(assembler) == 0


def test_the_oldest_incomplete_message_makes_room_acked_only_when_asked():
    for auto_ack in (False, True):
        assembler = Assembler(max_pending=2, auto_ack_oldest=auto_ack)
        a, b, c = (pieces(b"y" * 30, seq, 10, first_entry=10 * seq)[0] for seq in (1, 2, 3))
        assembler.add(a, 0)
        assembler.add(b, 0)
        outcome = assembler.add(c, 0)
        assert (outcome.ack, outcome.dropped) == (((10, 0),), ()) if auto_ack else ((), ((10, 0),))
        assert len(assembler) == 2


def test_a_chunk_out_of_order_drops_its_message():
    assembler = Assembler()
    first, second, third = pieces(b"z" * 30, 1, 10)
    assembler.add(first, 0)
    outcome = assembler.add(third, 0)
    assert outcome.message is None and outcome.dropped == ((0, 0), (2, 0))
    assert assembler.add(second, 0).dropped == ((1, 0),)   # of no message being gathered
    # A new subscription (seek, reconnect) starts over.
    again = pieces(b"z" * 30, 1, 10, generation=1)
    assembler.add(first, 0)
    assert [assembler.add(c, 0).message is not None for c in again] == [False, False, True]
