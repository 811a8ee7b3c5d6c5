"""Issue #27 end to end, on one shared cluster: the ack timeout (every subscription type,
a transactional ack pending, the asyncio API), the negative-ack backoff, dead-letter
topics moved on the broker, and delayed delivery.  Each test has topics of its own."""

from __future__ import annotations

import asyncio

import pytest

import magnetar
import magnetar.asyncio as magnetar_aio

pytestmark = [pytest.mark.e2e, pytest.mark.shared_cluster]

EARLIEST = magnetar.InitialPosition.Earliest
TYPES = [magnetar.ConsumerType.Exclusive, magnetar.ConsumerType.Shared, magnetar.ConsumerType.Failover,
         magnetar.ConsumerType.KeyShared]


def receive_all(consumer, count: int, timeout_ms: int = 10_000) -> list:
    return [consumer.receive(timeout_millis=timeout_ms) for _ in range(count)]


@pytest.mark.parametrize("consumer_type", TYPES, ids=lambda t: t.name)
def test_the_ack_timeout_redelivers_what_was_not_acknowledged_with_a_count(client, consumer_type):
    topic = f"ack-timeout-{consumer_type.name}"
    consumer = client.subscribe(topic, "s", consumer_type=consumer_type, initial_position=EARLIEST,
                                unacked_messages_timeout_ms=1000, tick_duration_ms=100)
    producer = client.create_producer(topic, batching_enabled=False)
    for payload in (b"acked", b"forgotten"):
        producer.send(payload, partition_key="k")
    first = {m.data(): m for m in receive_all(consumer, 2)}
    assert {m.redelivery_count() for m in first.values()} == {0}
    consumer.acknowledge(first[b"acked"])
    again = consumer.receive(timeout_millis=10_000)  # after about a second, with no call
    assert (again.data(), again.redelivery_count()) == (b"forgotten", 1)
    assert again.message_id() == first[b"forgotten"].message_id()
    consumer.acknowledge(again)
    with pytest.raises(magnetar.Timeout):  # acknowledged in time: nothing comes back
        consumer.receive(timeout_millis=2500)


def test_a_message_pending_in_a_transaction_is_left_alone_by_the_ack_timeout(client):
    topic = "ack-timeout-txn"
    consumer = client.subscribe(topic, "s", consumer_type=magnetar.ConsumerType.Shared,
                                initial_position=EARLIEST, unacked_messages_timeout_ms=1000,
                                tick_duration_ms=100)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"in-txn")
    producer.send(b"witness")
    got = {m.data(): m for m in receive_all(consumer, 2)}
    txn = client.new_transaction()
    consumer.acknowledge(got[b"in-txn"], txn=txn)
    # Both were received together, so the one left unacknowledged comes back at the tick
    # the other would have, had the ack timeout still held it.
    witness = consumer.receive(timeout_millis=10_000)
    assert witness.data() == b"witness"
    consumer.acknowledge(witness)
    with pytest.raises(magnetar.Timeout):
        consumer.receive(timeout_millis=1500)
    txn.abort()  # its ack undone: the broker sends the message again, counted
    back = consumer.receive(timeout_millis=10_000)
    assert (back.data(), back.redelivery_count()) == (b"in-txn", 1)


def test_the_ack_timeout_of_the_asyncio_api(cluster):
    async def run() -> tuple[bytes, int]:
        async with magnetar_aio.Client(",".join(cluster.broker_urls)) as client:
            consumer = await client.subscribe("ack-timeout-aio", "s", initial_position=EARLIEST,
                                              unacked_messages_timeout_ms=1000, tick_duration_ms=200)
            producer = await client.create_producer("ack-timeout-aio")
            await producer.send(b"late")
            first = await consumer.receive(timeout_millis=10_000)
            assert first.redelivery_count() == 0
            again = await consumer.receive(timeout_millis=10_000)
            await consumer.acknowledge(again)
            return again.data(), again.redelivery_count()

    assert asyncio.run(run()) == (b"late", 1)


def test_bad_ack_timeout_settings_are_refused_before_any_request(client):
    for bad in [dict(unacked_messages_timeout_ms=999), dict(unacked_messages_timeout_ms=-5),
                dict(unacked_messages_timeout_ms=5000, tick_duration_ms=10)]:
        with pytest.raises(ValueError):
            client.subscribe("ack-timeout-bad", "s", **bad)
    with pytest.raises(TypeError):
        client.subscribe("ack-timeout-bad", "s", negative_ack_redelivery_backoff=100)


def test_the_nack_backoff_grows_with_the_redelivery_count(client):
    """Two messages nacked at once: the one with more redeliveries behind it waits longer,
    so the fresh one comes back first, although it was nacked second."""
    topic = "nack-backoff"
    backoff = magnetar.MultiplierRedeliveryBackoff(min_delay_ms=100, max_delay_ms=5000, multiplier=4)
    consumer = client.subscribe(topic, "s", consumer_type=magnetar.ConsumerType.Shared, initial_position=EARLIEST,
                                negative_ack_redelivery_delay_ms=60_000,  # the backoff replaces it
                                negative_ack_redelivery_backoff=backoff)
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"old")
    msg = consumer.receive(timeout_millis=10_000)
    for count in range(1, 4):  # 100, 400, 1600 ms
        consumer.negative_acknowledge(msg)
        msg = consumer.receive(timeout_millis=10_000)
        assert (msg.data(), msg.redelivery_count()) == (b"old", count)
    producer.send(b"new")
    fresh = consumer.receive(timeout_millis=10_000)
    consumer.negative_acknowledge(msg)    # count 3: 4^3 x 100 ms = 5 s (capped)
    consumer.negative_acknowledge(fresh)  # count 0: 100 ms
    order = [m.data() for m in receive_all(consumer, 2)]
    assert order == [b"new", b"old"]
