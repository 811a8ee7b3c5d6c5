"""A partition in process against real PostgreSQL: sends through admission, the dedup
state and the writer; reads from the cache and, once evicted, from the database; the
one subscription registry."""

from __future__ import annotations

import asyncio

import pytest

from magnetar_broker.partition.sends import Batch, Sent
from magnetar_broker.subscription.subscription import durable
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import MessageTooBig, TopicTerminated
from tests.component.conftest import batch

TOPIC = "persistent://public/default/component"


async def test_sends_are_deduplicated_whole_and_in_part_and_survive_a_reload(broker, pool):
    producer = await broker.producer(TOPIC, "p")
    first = await broker.send(producer, b"a", b"b", first_seq=0)
    assert (first.entry_id, first.last_sequence_id, first.duplicate) == (0, 1, False)
    again = await broker.send(producer, b"a", b"b", first_seq=0)  # a retry of the same batch
    assert again.duplicate and again.last_sequence_id == 1
    straddling = await broker.send(producer, b"b", b"c", first_seq=1)  # only "c" is new
    assert (straddling.entry_id, straddling.last_sequence_id) == (1, 2)
    rows = await pool.fetch("SELECT entry_id, num_messages FROM entries ORDER BY entry_id")
    assert [tuple(r) for r in rows] == [(0, 2), (1, 1)]
    assert await pool.fetchval("SELECT last_sequence_id FROM producer_sequences") == 2

    # A broker that loads the partition afresh (the lease lost and taken back) judges
    # from the database: the same batch is still a duplicate.
    plog = await broker.partition(TOPIC)
    plog.lose("test: reload")
    reloaded = await broker.producer(TOPIC, "p2")
    assert (await broker.partition(TOPIC)).next_entry_id == 2
    assert (await broker.partition(TOPIC)).dedup_state.last_pushed("p") == -1  # nothing loaded yet
    producer = await broker.producer(TOPIC, "p")
    assert reloaded != producer
    assert (await broker.send(producer, b"c", first_seq=2)).duplicate


async def test_reads_come_from_the_cache_then_from_the_database(broker):
    producer = await broker.producer(TOPIC, "p")
    plog = await broker.partition(TOPIC)
    plog.cache.max_bytes = 2  # room for the newest entry only
    for i in range(3):
        await broker.send(producer, f"m{i}".encode(), first_seq=i)
    assert [e.entry_id for e in plog.cache.entries] == [2]
    got = await plog.read(0, 10)  # the first two from the database, in one query
    assert [(e.entry_id, e.num_messages) for e in got] == [(0, 1), (1, 1), (2, 1)]
    assert [pb.MessageBatch.FromString(e.payload).messages[0].payload for e in got] == [b"m0", b"m1", b"m2"]
    assert await plog.message_counts([0, 2, 7]) == {0: 1, 2: 1}


async def test_the_one_size_rule_and_termination_refuse_before_anything_is_written(broker, pool):
    producer = await broker.producer(TOPIC, "p")
    plog = await broker.partition(TOPIC)
    plog.admission.max_message_size = 10
    with pytest.raises(MessageTooBig, match="exceeds the maximum message size of 10 bytes"):
        await broker.send(producer, b"x" * (70 * 1024))
    assert await plog.terminate(0.1) == -1
    with pytest.raises(TopicTerminated):
        await broker.send(producer, b"late")
    assert await pool.fetchval("SELECT count(*) FROM entries") == 0


async def test_a_durable_subscription_is_opened_once_however_many_ask_at_once(broker, pool):
    plog = await broker.partition(TOPIC)
    opened = await asyncio.gather(*(durable(plog, "s") for _ in range(8)))
    assert all(sub is opened[0] for sub in opened)
    assert plog.subscriptions.get("s") is opened[0]
    assert await pool.fetchval("SELECT count(*) FROM subscriptions") == 1


async def test_idle_producer_names_are_forgotten_in_memory_through_the_dedup_state(broker, pool):
    producer = await broker.producer(TOPIC, "gone")
    await broker.send(producer, b"a", first_seq=5)
    await broker.service.close_producer(producer, broker.session)
    await pool.execute("UPDATE producer_sequences SET updated_at = now() - interval '2 days'")
    await broker.service.expire_idle_producers()
    plog = await broker.partition(TOPIC)
    assert plog.dedup_state.last_pushed("gone") == -1
    assert await plog.dedup_state.last_persisted("gone") == -1  # a new producer starts afresh


async def test_publish_answers_each_batch_or_its_error_without_a_wire_in_between(broker):
    """The domain send (both front ends answer from it): a refused batch is the exception
    itself, not an error code to decode again."""
    producer = await broker.producer(TOPIC, "p")
    plog = await broker.partition(TOPIC)
    plog.admission.max_message_size = 10
    good = Batch(producer, batch(b"ok")[0], num_messages=1, sequence_id=0, highest_sequence_id=0)
    big = Batch(producer, batch(b"x" * (70 * 1024), first_seq=1)[0], num_messages=1, sequence_id=1,
                highest_sequence_id=1)
    first, second = await broker.service.publish(broker.session, [good, big])
    assert isinstance(first, Sent) and first.entry_id == 0
    assert isinstance(second, MessageTooBig)
