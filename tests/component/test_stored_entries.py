"""Pulsar entries stored as sent (encrypted entries, chunks of a large message) through
admission, dedup and dispatch, against real PostgreSQL."""

from __future__ import annotations

from magnetar_broker.partition.sends import Batch, Sent
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol import pulsar_api_pb2 as pulsar_pb
from magnetar_protocol.pulsar import stored

TOPIC = "persistent://public/default/stored-entries"


def chunk(chunk_id: int, seq: int, chunks: int = 3) -> Batch:
    metadata = pulsar_pb.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1, uuid=f"p-{seq}",
                                         chunk_id=chunk_id, num_chunks_from_msg=chunks, total_chunk_msg_size=30)
    return Batch(producer_id=0, payload=stored.envelope_batch(metadata.SerializeToString(), metadata, b"c" * 10),
                 num_messages=1, sequence_id=seq, highest_sequence_id=seq)


async def publish(broker, producer: int, *batches: Batch) -> list[Sent]:
    results = await broker.service.publish(broker.session, [
        Batch(producer_id=producer, payload=b.payload, num_messages=b.num_messages, sequence_id=b.sequence_id,
              highest_sequence_id=b.highest_sequence_id) for b in batches])
    for r in results:
        if isinstance(r, Exception):
            raise r
    return list(results)


async def test_chunks_share_a_sequence_id_and_only_the_last_is_judged_for_dedup(broker, pool):
    producer = await broker.producer(TOPIC, "p")
    sent = await publish(broker, producer, chunk(0, 0), chunk(1, 0), chunk(2, 0))
    assert [s.duplicate for s in sent] == [False, False, False]
    assert [s.entry_id for s in sent] == [0, 1, 2]
    assert await pool.fetchval("SELECT last_sequence_id FROM producer_sequences") == 0
    # A producer that resends the whole message after a lost answer: its chunks are
    # stored again (Pulsar's broker does too; the consumer keeps one copy), but the
    # message, judged by its last chunk, is a duplicate.
    again = await publish(broker, producer, chunk(0, 0), chunk(1, 0), chunk(2, 0))
    assert [s.duplicate for s in again] == [False, False, True]
    # The next message's chunks are not taken for duplicates of the previous one.
    nxt = await publish(broker, producer, chunk(0, 1, chunks=2), chunk(1, 1, chunks=2))
    assert [s.duplicate for s in nxt] == [False, False]
    assert await pool.fetchval("SELECT last_sequence_id FROM producer_sequences") == 1


async def test_an_encrypted_batch_is_one_entry_of_its_messages_and_indivisible_for_dedup(broker):
    producer = await broker.producer(TOPIC, "p")
    metadata = pulsar_pb.MessageMetadata(producer_name="p", sequence_id=5, publish_time=1, num_messages_in_batch=3,
                                         partition_key="k",
                                         encryption_keys=[pulsar_pb.EncryptionKeys(key="rsa", value=b"w")])
    raw = metadata.SerializeToString()
    payload = stored.envelope_batch(raw, metadata, b"sealed")
    [first] = await publish(broker, producer, Batch(0, payload, 3, 5, 7))
    assert (first.entry_id, first.last_sequence_id) == (0, 7)
    # Overlapping what is stored cannot be split: judged whole, as Pulsar does.
    metadata.sequence_id, metadata.num_messages_in_batch = 6, 3
    raw2 = metadata.SerializeToString()
    [overlap] = await publish(broker, producer, Batch(0, stored.envelope_batch(raw2, metadata, b"x"), 3, 6, 8))
    assert overlap.duplicate
    # Delivered as the entry it was, counted as its three messages, acked by index.
    consumer = await broker.subscribe(TOPIC, "s", sub_type=pb.SUB_KEY_SHARED)
    [entry] = await broker.fetch(consumer)
    assert entry.num_messages == 3 and not entry.indices
    assert pb.MessageBatch.FromString(entry.batch).messages[0].pulsar_metadata == raw
