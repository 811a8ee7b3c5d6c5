"""Producers in process against real PostgreSQL: PIP-68 access modes (Exclusive,
WaitForExclusive in FIFO order, ExclusiveWithFencing), the topic epoch stored with the
lease and checked by every write, and PIP-6 deduplication that a new owner of the
partition judges from the database.  A second BrokerService on the same database plays
the broker that takes a partition over."""

from __future__ import annotations

import asyncio

import pytest

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import BadRequest, ProducerBusy, ProducerFenced, ProducerNotFound
from tests.component.conftest import payloads
from tests.waiting import async_wait_until

TOPIC = "persistent://public/default/producers"


async def _stored(pool) -> list[bytes]:
    rows = await pool.fetch("SELECT payload FROM entries ORDER BY entry_id")
    return [m.payload for r in rows for m in pb.MessageBatch.FromString(r[0]).messages]


async def _topic_epoch(pool) -> int:
    return await pool.fetchval("SELECT topic_epoch FROM topic_owners")


async def test_exclusive_refuses_others_while_it_holds_the_topic_and_shared_ones_refuse_it(broker, pool):
    first = await broker.producer(TOPIC, "first", pb.ACCESS_EXCLUSIVE)
    with pytest.raises(ProducerFenced, match="Exclusive access refused: the topic has an exclusive producer"):
        await broker.producer(TOPIC, "second", pb.ACCESS_EXCLUSIVE)
    with pytest.raises(ProducerBusy, match="the topic has an exclusive producer .'first'."):
        await broker.producer(TOPIC, "shared")
    await broker.send(first, b"one")
    stats = broker.service.topic_stats(await broker.partition(TOPIC))
    assert (stats["accessMode"], stats["exclusiveProducer"], stats["topicEpoch"]) == ("Exclusive", "first", 1)
    assert await _topic_epoch(pool) == 1  # stored before the producer was answered

    other = "persistent://public/default/producers-shared"
    shared = await broker.producer(other, "shared")
    with pytest.raises(ProducerFenced, match="the topic has shared producers"):
        await broker.producer(other, "late", pb.ACCESS_EXCLUSIVE)
    await broker.send(shared, b"still fine")
    with pytest.raises(BadRequest, match="topic epoch 5 was never issued"):
        await broker.create_producer(TOPIC, "first-again", pb.ACCESS_EXCLUSIVE, topic_epoch=5)


async def test_wait_for_exclusive_producers_wait_in_fifo_order_each_with_a_new_epoch(broker, pool):
    holder = await broker.producer(TOPIC, "holder", pb.ACCESS_EXCLUSIVE)
    plog = await broker.partition(TOPIC)
    w1 = asyncio.ensure_future(broker.create_producer(TOPIC, "w1", pb.ACCESS_WAIT_FOR_EXCLUSIVE, wait_ms=10_000))
    await async_wait_until(lambda: list(plog.access.waiters) == ["w1"], 5, "w1 queued")
    w2 = asyncio.ensure_future(broker.create_producer(TOPIC, "w2", pb.ACCESS_WAIT_FOR_EXCLUSIVE, wait_ms=10_000))
    await async_wait_until(lambda: list(plog.access.waiters) == ["w1", "w2"], 5, "w2 queued behind w1")
    # A create that does not wait is answered "waiting" and keeps its place.
    assert (await broker.create_producer(TOPIC, "w1", pb.ACCESS_WAIT_FOR_EXCLUSIVE)).waiting
    assert list(plog.access.waiters) == ["w1", "w2"] and not w1.done()

    await broker.service.close_producer(holder, broker.session)
    first = await w1
    assert first.producer is not None and first.producer.topic_epoch == 2
    await broker.send(first.producer.producer_id, b"from w1")
    assert not w2.done()  # w1 holds it now
    await broker.service.close_producer(first.producer.producer_id, broker.session)
    second = await w2
    assert second.producer is not None and second.producer.topic_epoch == 3
    await broker.send(second.producer.producer_id, b"from w2", first_seq=0)
    assert await _topic_epoch(pool) == 3
    assert await _stored(pool) == [b"from w1", b"from w2"]


async def test_exclusive_with_fencing_takes_over_and_the_fenced_producer_never_writes_again(broker, pool):
    old = await broker.producer(TOPIC, "old", pb.ACCESS_EXCLUSIVE)
    await broker.send(old, b"old")
    plog = await broker.partition(TOPIC)
    waiter = asyncio.ensure_future(broker.create_producer(TOPIC, "w", pb.ACCESS_WAIT_FOR_EXCLUSIVE, wait_ms=10_000))
    await async_wait_until(lambda: list(plog.access.waiters) == ["w"], 5, "the waiter queued")
    boss = await broker.producer(TOPIC, "boss", pb.ACCESS_EXCLUSIVE_WITH_FENCING)
    await broker.send(boss, b"boss")
    for seq in (1, 2):  # the next send and every send after
        with pytest.raises(ProducerFenced, match="was fenced"):
            await broker.send(old, b"zombie", first_seq=seq)
    with pytest.raises(ProducerFenced, match="fenced while waiting"):
        await waiter  # waiters are fenced too
    assert await _topic_epoch(pool) == 2
    # The old producer reconnecting with its epoch is refused: the topic moved past it.
    with pytest.raises(ProducerFenced, match="has topic epoch 1 but the topic is at 2"):
        await broker.create_producer(TOPIC, "old", pb.ACCESS_EXCLUSIVE, topic_epoch=1)
    assert await _stored(pool) == [b"old", b"boss"]


async def test_a_producer_whose_session_lapsed_is_gone_and_cannot_come_back_at_its_old_epoch(broker, pool):
    frozen_client = await broker.another_session("frozen")
    old = await frozen_client.producer(TOPIC, "leader", pb.ACCESS_EXCLUSIVE)
    await frozen_client.send(old, b"old-1")
    successor = asyncio.ensure_future(broker.create_producer(TOPIC, "next", pb.ACCESS_WAIT_FOR_EXCLUSIVE,
                                                             wait_ms=10_000))
    await broker.service.close_session(frozen_client.session)  # what the session's expiry does
    created = await successor
    assert created.producer is not None and created.producer.topic_epoch == 2
    await broker.send(created.producer.producer_id, b"new-1")
    with pytest.raises(ProducerNotFound):
        await frozen_client.send(old, b"old-2", first_seq=1)
    thawed = await broker.another_session("thawed")
    with pytest.raises(ProducerFenced, match="has topic epoch 1 but the topic is at 2"):
        await thawed.create_producer(TOPIC, "leader", pb.ACCESS_EXCLUSIVE, topic_epoch=1)
    assert await _stored(pool) == [b"old-1", b"new-1"]


async def test_a_write_finding_another_topic_epoch_in_the_database_stores_nothing(broker, pool):
    """Every write of an exclusive producer compares the topic epoch in its statement:
    one that finds it moved (another exclusive producer elsewhere) is refused and this
    broker stops serving the partition."""
    producer = await broker.producer(TOPIC, "x", pb.ACCESS_EXCLUSIVE)
    await broker.send(producer, b"before")
    await pool.execute("UPDATE topic_owners SET topic_epoch = topic_epoch + 1")
    with pytest.raises(ProducerFenced, match="the topic epoch of .* moved on"):
        await broker.send(producer, b"after", first_seq=1)
    assert TOPIC not in broker.service.ownership.logs
    assert await _stored(pool) == [b"before"]


async def test_an_exclusive_producer_keeps_its_epoch_on_the_partitions_next_owner(make_broker, pool):
    first, second = await make_broker(), await make_broker(broker_id="b-next")
    producer = await first.producer(TOPIC, "x", pb.ACCESS_EXCLUSIVE)
    await first.send(producer, b"before")
    await second.take_over(TOPIC)
    again = await second.create_producer(TOPIC, "x", pb.ACCESS_EXCLUSIVE, topic_epoch=1)  # the client's reconnect
    assert again.producer is not None and again.producer.topic_epoch == 1
    await second.send(again.producer.producer_id, b"after", first_seq=1)
    with pytest.raises(ProducerBusy):
        await second.producer(TOPIC, "shared")
    assert await _topic_epoch(pool) == 1
    assert await _stored(pool) == [b"before", b"after"]


async def test_dedup_state_is_judged_from_the_database_by_the_partitions_next_owner(make_broker, pool):
    first, second = await make_broker(), await make_broker(broker_id="b-next")
    producer = await first.producer(TOPIC, "writer")
    for seq in range(5):
        await first.send(producer, f"m{seq}".encode(), first_seq=seq)
    await second.take_over(TOPIC)
    created = await second.create_producer(TOPIC, "writer")
    assert created.last_sequence_id == 4
    assert created.producer is not None
    producer = created.producer.producer_id
    assert (await second.send(producer, b"dup", first_seq=3)).duplicate  # at or below the last id
    assert (await second.send(producer, b"dup", first_seq=4)).duplicate
    sent = await second.send(producer, b"m5", first_seq=5)
    assert (sent.entry_id, sent.duplicate) == (5, False)
    consumer = await second.subscribe(TOPIC, "s")
    assert payloads(await second.fetch(consumer)) == [f"m{i}".encode() for i in range(6)]
