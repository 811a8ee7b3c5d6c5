"""Dispatch in process against real PostgreSQL: the four subscription types (who gets
which message), acknowledgements (individual, cumulative, batch index) and what of them
survives a reload, negative acks and redelivery counts, a consumer that leaves with
messages unacknowledged, seeks by position and by time, and readers.  Each was tested
before only through a cluster of processes (docs/development.md, "Where broker
behaviour is tested")."""

from __future__ import annotations

import time

import pytest

from magnetar_broker.subscription.dispatch import HashRing, key_hash
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import BadRequest, ConsumerBusy, NotAllowedError
from tests.component.conftest import at, counts, payloads
from tests.waiting import async_wait_until

TOPIC = "persistent://public/default/dispatch"


async def _send_each(broker, producer: int, *messages: bytes, first_seq: int = 0) -> list[int]:
    """One entry per message; their entry ids."""
    return [(await broker.send(producer, m, first_seq=first_seq + i)).entry_id for i, m in enumerate(messages)]


async def _reload(broker, topic: str = TOPIC) -> None:
    """The partition lost and loaded again (its consumers gone): what follows comes from
    the database, not from memory."""
    (await broker.partition(topic)).lose("test: reload")
    await broker.partition(topic)


# ---------------------------------------------------------------- the four types

async def test_exclusive_refuses_a_second_consumer_and_another_type_until_the_first_leaves(broker):
    first = await broker.subscribe(TOPIC, "only")
    with pytest.raises(ConsumerBusy, match="already has a consumer"):
        await broker.subscribe(TOPIC, "only")
    with pytest.raises(ConsumerBusy, match="is Exclusive, not Shared"):
        await broker.subscribe(TOPIC, "only", sub_type=pb.SUB_SHARED)
    await broker.close(first)
    await broker.subscribe(TOPIC, "only", sub_type=pb.SUB_SHARED)  # nobody left: any type


async def test_failover_delivers_to_the_active_consumer_and_its_unacked_messages_move_on_a_switch(broker):
    producer = await broker.producer(TOPIC, "p")
    b = await broker.subscribe(TOPIC, "f", pb.SUB_FAILOVER, consumer_name="b")
    a = await broker.subscribe(TOPIC, "f", pb.SUB_FAILOVER, consumer_name="a")
    told: dict[str, list[bool]] = {"a": [], "b": []}
    for name, consumer_id in (("a", a), ("b", b)):
        broker.service.consumers[consumer_id].on_active_change = told[name].append
    await _send_each(broker, producer, b"one", b"two")

    assert await broker.receive(b) == []  # "a" sorts first (priority, then name): active
    assert await broker.receive(a) == [b"one", b"two"]
    await broker.ack(a, 0)

    # A consumer of a better priority level joins: it becomes active and gets what the
    # old active one had not acknowledged, counted as redelivered.
    z = await broker.subscribe(TOPIC, "f", pb.SUB_FAILOVER, consumer_name="z", priority=-1)
    assert await broker.receive(a) == []
    got = await broker.fetch(z)
    assert (payloads(got), counts(got)) == ([b"two"], [1])
    assert told == {"a": [False], "b": [False]}  # told of the change when it happened

    await broker.close(z)  # "a" is active again and gets "two" back
    got = await broker.fetch(a)
    assert (payloads(got), counts(got)) == ([b"two"], [2])
    assert told == {"a": [False, True], "b": [False, False]}


async def test_shared_consumers_take_turns_by_their_permits_and_never_get_the_same_message(broker):
    producer = await broker.producer(TOPIC, "p")
    a = await broker.subscribe(TOPIC, "work", pb.SUB_SHARED)
    b = await broker.subscribe(TOPIC, "work", pb.SUB_SHARED)
    await _send_each(broker, producer, *(f"m{i}".encode() for i in range(6)))
    assert await broker.receive(a, 2) == [b"m0", b"m1"]
    assert await broker.receive(b, 2) == [b"m2", b"m3"]
    assert await broker.receive(a, 2) == [b"m4", b"m5"]
    assert await broker.receive(b, 2) == []  # a holds the rest unacknowledged

    # A big batch is split by permits: a consumer takes its share, not the whole entry.
    await broker.send(producer, *(f"big{i}".encode() for i in range(10)), first_seq=6)
    first = await broker.fetch(b, 3)
    assert (payloads(first), list(first[0].indices)) == ([b"big0", b"big1", b"big2"], [0, 1, 2])
    assert await broker.receive(a, 4) == [b"big3", b"big4", b"big5", b"big6"]
    assert await broker.receive(b, 10) == [b"big7", b"big8", b"big9"]
    with pytest.raises(NotAllowedError, match="cumulative ack is not allowed on Shared"):
        await broker.ack(a, 5, cumulative=True)


async def test_key_shared_sends_each_key_to_one_consumer_in_order_by_ordering_key_first(broker):
    names = {await broker.subscribe(TOPIC, "k", pb.SUB_KEY_SHARED, consumer_name=n): n for n in ("c0", "c1")}
    producer = await broker.producer(TOPIC, "p")
    # Keys whose owner the broker's ring (its consumers' ids and names) says, three each.
    ring = HashRing(names.items())
    keys: dict[str, list[str]] = {"c0": [], "c1": []}
    for i in range(1000):
        mine = keys[names[ring.owner(key_hash(f"key-{i}"))]]
        if len(mine) < 3:
            mine.append(f"key-{i}")
    assert all(len(k) == 3 for k in keys.values())
    order = keys["c0"] + keys["c1"]
    # Two batches whose messages belong to both consumers, and a message whose ordering
    # key (c0's) wins over its partition key (c1's), as in Pulsar.
    for first_seq in (0, 6):
        await broker.send_messages(producer, [pb.SingleMessage(payload=f"{k}:{first_seq + i}".encode(), partition_key=k)
                                              for i, k in enumerate(order)], first_seq=first_seq)
    await broker.send_messages(producer, [pb.SingleMessage(payload=b"ordered", ordering_key=keys["c0"][0].encode(),
                                                           partition_key=keys["c1"][0])], first_seq=12)

    got = {name: await broker.receive(consumer) for consumer, name in names.items()}
    for name, messages in got.items():
        other = "c1" if name == "c0" else "c0"
        seen = [m.decode().split(":")[0] for m in messages if m != b"ordered"]
        assert set(seen) == set(keys[name]) and not set(seen) & set(keys[other])
        for key in keys[name]:  # each key's messages in the order sent
            assert [m for m in messages if m.startswith(key.encode() + b":")] == \
                [f"{key}:{order.index(key)}".encode(), f"{key}:{6 + order.index(key)}".encode()]
    assert b"ordered" in got["c0"] and b"ordered" not in got["c1"]


# ---------------------------------------------------------------- acknowledgements

async def test_individual_cumulative_and_batch_index_acks_are_stored_and_survive_a_reload(broker, pool):
    producer = await broker.producer(TOPIC, "p")
    consumer = await broker.subscribe(TOPIC, "s")
    await _send_each(broker, producer, b"e0", b"e1", b"e2", b"e3")
    await broker.send(producer, b"b0", b"b1", b"b2", first_seq=4)  # entry 4: a batch of three
    assert len(await broker.fetch(consumer)) == 5
    await broker.ack(consumer, 1, cumulative=True)         # 0 and 1
    await broker.ack(consumer, 3)                          # 3 alone
    await broker.ack(consumer, at(4, 1))                   # the batch's middle message
    assert await pool.fetchval("SELECT mark_delete_entry FROM subscriptions WHERE subscription = 's'") == 1
    with pytest.raises(BadRequest, match="batch_index [37] is past entry"):
        await broker.ack(consumer, at(4, 3))               # names no message of the batch
    with pytest.raises(BadRequest, match="the topic ends at entry 4"):
        await broker.ack(consumer, 5)

    await _reload(broker)
    consumer = await broker.subscribe(TOPIC, "s")
    again = await broker.fetch(consumer)
    assert [(e.entry_id, list(e.indices)) for e in again] == [(2, []), (4, [0, 2])]
    assert payloads(again) == [b"e2", b"b0", b"b2"]
    await broker.ack(consumer, at(4, 0))
    await broker.ack(consumer, at(4, 2))  # the last of the batch: the entry is done
    await broker.ack(consumer, 2)
    assert await pool.fetchval("SELECT mark_delete_entry FROM subscriptions WHERE subscription = 's'") == 4


# ---------------------------------------------------------------- redelivery

async def test_negative_acks_redeliver_with_a_count_per_message(broker):
    producer = await broker.producer(TOPIC, "p")
    consumer = await broker.subscribe(TOPIC, "s", pb.SUB_SHARED)
    await _send_each(broker, producer, b"m0", b"m1")
    await broker.send(producer, b"b0", b"b1", b"b2", first_seq=2)
    first = await broker.fetch(consumer)
    assert counts(first) == [0] * 5
    await broker.nack(consumer, 0)
    await broker.nack(consumer, at(2, 1))  # one message of the batch
    again = await broker.fetch(consumer)
    assert (payloads(again), counts(again)) == ([b"m0", b"b1"], [1, 1])
    await broker.nack(consumer, 0)
    got = await broker.fetch(consumer)
    assert (payloads(got), counts(got)) == ([b"m0"], [2])
    await broker.nack(consumer)  # none listed: everything it holds
    got = await broker.fetch(consumer)
    assert (payloads(got), counts(got)) == ([b"m0", b"m1", b"b0", b"b1", b"b2"], [3, 1, 1, 2, 1])


async def test_a_consumer_that_leaves_with_unacked_messages_hands_them_to_the_others(broker):
    producer = await broker.producer(TOPIC, "p")
    other_client = await broker.another_session()
    leaving = await broker.subscribe(TOPIC, "s", pb.SUB_SHARED)
    staying = await broker.subscribe(TOPIC, "s", pb.SUB_SHARED)
    by_session = await other_client.subscribe(TOPIC, "s", pb.SUB_SHARED)
    await _send_each(broker, producer, b"m0", b"m1", b"m2", b"m3")
    assert await broker.receive(leaving, 3) == [b"m0", b"m1", b"m2"]
    await broker.ack(leaving, 1)
    assert await other_client.receive(by_session, 1) == [b"m3"]

    await broker.close(leaving)
    got = await broker.fetch(staying)
    assert (payloads(got), counts(got)) == ([b"m0", b"m2"], [1, 1])
    await broker.service.close_session(other_client.session)  # its consumers go with it
    got = await broker.fetch(staying)
    assert (payloads(got), counts(got)) == ([b"m3"], [1])


# ---------------------------------------------------------------- seeks

async def test_a_seek_by_position_moves_the_stored_cursor_back_and_forth(broker, pool):
    producer = await broker.producer(TOPIC, "p")
    consumer = await broker.subscribe(TOPIC, "s")
    await _send_each(broker, producer, b"m0", b"m1", b"m2")
    await broker.send(producer, b"b0", b"b1", b"b2", first_seq=3)
    assert len(await broker.receive(consumer)) == 6
    await broker.ack(consumer, 3, cumulative=True)

    await broker.seek(consumer, at(1))  # back: delivered again from m1
    assert await pool.fetchval("SELECT mark_delete_entry FROM subscriptions") == 0
    assert await broker.receive(consumer) == [b"m1", b"m2", b"b0", b"b1", b"b2"]
    await broker.seek(consumer, at(3, 1))  # into the batch: from its second message
    assert await broker.receive(consumer) == [b"b1", b"b2"]
    await broker.seek(consumer, at(99))  # past the end: after the last entry
    assert await broker.receive(consumer) == []
    await _reload(broker)
    consumer = await broker.subscribe(TOPIC, "s")
    assert await broker.receive(consumer) == []  # the stored cursor is the sought one


async def test_a_seek_by_time_delivers_from_the_first_entry_published_at_or_after_it(broker):
    producer = await broker.producer(TOPIC, "p")
    consumer = await broker.subscribe(TOPIC, "s")
    before = await _send_each(broker, producer, b"old0", b"old1")
    last_old = (await (await broker.partition(TOPIC)).read_one(before[-1])).publish_time
    # The clock passes the last old entry's millisecond, so the next entry is younger.
    await async_wait_until(lambda: int(time.time() * 1000) > last_old, 1, "the clock moving on")
    since = int(time.time() * 1000)
    await _send_each(broker, producer, b"new0", b"new1", first_seq=2)
    assert len(await broker.receive(consumer)) == 4
    await broker.seek(consumer, publish_time=since)
    assert await broker.receive(consumer) == [b"new0", b"new1"]
    await broker.seek(consumer, publish_time=0)
    assert await broker.receive(consumer) == [b"old0", b"old1", b"new0", b"new1"]
    await broker.seek(consumer, publish_time=since + 3_600_000)  # after everything
    assert await broker.receive(consumer) == []


# ---------------------------------------------------------------- readers

async def test_readers_start_where_asked_and_leave_no_subscription_behind(broker, pool):
    producer = await broker.producer(TOPIC, "p")
    await _send_each(broker, producer, b"m0", b"m1")
    await broker.send(producer, b"b0", b"b1", b"b2", first_seq=2)  # entry 2
    latest = await broker.reader(TOPIC)
    after_m0 = await broker.reader(TOPIC, at(0))
    from_m1 = await broker.reader(TOPIC, at(1), inclusive=True)
    from_b1 = await broker.reader(TOPIC, at(2, 1), inclusive=True)
    after_b1 = await broker.reader(TOPIC, at(2, 1))
    assert await broker.receive(latest) == []
    assert await broker.receive(after_m0) == [b"m1", b"b0", b"b1", b"b2"]
    assert await broker.receive(from_m1) == [b"m1", b"b0", b"b1", b"b2"]
    assert await broker.receive(from_b1) == [b"b1", b"b2"]
    assert await broker.receive(after_b1) == [b"b2"]
    await broker.send(producer, b"m3", first_seq=5)
    assert await broker.receive(latest) == [b"m3"]
    with pytest.raises(BadRequest, match="batch_index [37] is past entry"):
        await broker.reader(TOPIC, at(2, 7))

    plog = await broker.partition(TOPIC)
    readers = [broker.service.consumers[c].subscription for c in (latest, after_m0)]
    assert all(not sub.durable and plog.subscriptions.get(sub.name) is sub for sub in readers)
    assert await pool.fetchval("SELECT count(*) FROM subscriptions") == 0  # nothing stored
    await broker.close(latest)
    assert plog.subscriptions.get(readers[0].name) is None  # gone with its consumer
