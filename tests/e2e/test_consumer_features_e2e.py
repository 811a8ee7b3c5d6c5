"""Issue #27 end to end, on one shared cluster: the ack timeout (every subscription type,
a transactional ack pending, the asyncio API), the negative-ack backoff, dead-letter
topics moved on the broker, and delayed delivery.  Each test has topics of its own."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
from datetime import timedelta

import pulsar
import pytest

import magnetar
import magnetar.asyncio as magnetar_aio
from magnetar.admin_cli import run as admin_cli
from tests.e2e.helpers import admin
from tests.waiting import wait_until

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


def test_the_broker_moves_a_message_past_the_dead_letter_limit(client):
    topic = "persistent://public/default/dlq-client"
    policy = magnetar.ConsumerDeadLetterPolicy(max_redeliver_count=2, initial_subscription_name="triage")
    consumer = client.subscribe(topic, "s", consumer_type=magnetar.ConsumerType.Shared, initial_position=EARLIEST,
                                negative_ack_redelivery_delay_ms=100, dead_letter_policy=policy)
    producer = client.create_producer(topic, batching_enabled=False)
    sent = producer.send(b"poison", properties={"order": "7"}, partition_key="customer-1")
    producer.send(b"fine")
    counts = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=3000)
        except magnetar.Timeout:
            break
        if msg.data() == b"fine":
            consumer.acknowledge(msg)
            continue
        counts.append(msg.redelivery_count())
        consumer.negative_acknowledge(msg)
    assert counts == [0, 1, 2]  # max_redeliver_count redeliveries, then moved
    # The initial subscription existed before the copy was written: it reads it.
    triage = client.subscribe(f"{topic}-s-DLQ", "triage")
    copy = triage.receive(timeout_millis=10_000)
    assert copy.data() == b"poison" and copy.partition_key() == "customer-1"
    assert copy.properties() == {"order": "7", "REAL_TOPIC": topic,
                                 "ORIGIN_MESSAGE_ID": f"0:{sent.entry_id()}:-1"}
    triage.acknowledge(copy)


def test_reconsume_later_goes_through_the_retry_topic_then_to_the_dead_letter_topic(client):
    topic = "persistent://public/default/retry-flow"
    policy = magnetar.ConsumerDeadLetterPolicy(max_redeliver_count=2, initial_subscription_name="triage")

    def subscribe():
        return client.subscribe(topic, "s", consumer_type=magnetar.ConsumerType.Shared,
                                initial_position=EARLIEST, dead_letter_policy=policy, enable_retry=True)

    consumer = subscribe()
    producer = client.create_producer(topic, batching_enabled=False)
    sent = producer.send(b"later", properties={"order": "7"}, partition_key="customer-1")
    msg = consumer.receive(timeout_millis=10_000)
    origin = {"order": "7", "REAL_TOPIC": topic, "ORIGIN_MESSAGE_ID": f"0:{sent.entry_id()}:-1"}
    for times in (1, 2):
        consumer.reconsume_later(msg, timedelta(milliseconds=300))
        msg = consumer.receive(timeout_millis=10_000)  # from the retry topic, merged in
        assert (msg.topic_name(), msg.data(), msg.partition_key()) == (f"{topic}-s-RETRY", b"later", "customer-1")
        assert msg.properties() == {**origin, "RECONSUMETIMES": str(times), "DELAY_TIME": "300"}
        assert msg.deliver_at_time() > 0  # sent delayed
    consumer.reconsume_later(msg, 300)  # a third time: past max_redeliver_count, dead
    triage = client.subscribe(f"{topic}-s-DLQ", "triage")  # existed before the copy
    dead = triage.receive(timeout_millis=10_000)
    assert dead.data() == b"later" and dead.properties() == {**origin, "RECONSUMETIMES": "3",
                                                            "DELAY_TIME": "300"}
    # The original and both retry copies were acknowledged: nothing comes back, even to
    # a new consumer of the subscription.
    consumer.close()
    consumer = subscribe()
    with pytest.raises(magnetar.Timeout):
        consumer.receive(timeout_millis=2000)
    consumer.close()


def test_reconsume_later_sends_and_acknowledges_in_one_transaction(client):
    topic = "persistent://public/default/retry-atomic"
    consumer = client.subscribe(topic, "s", consumer_type=magnetar.ConsumerType.Shared, initial_position=EARLIEST,
                                dead_letter_policy=magnetar.ConsumerDeadLetterPolicy(3), enable_retry=True)
    client.create_producer(topic).send(b"held")
    msg = consumer.receive(timeout_millis=10_000)
    with pytest.raises(ValueError):
        consumer.reconsume_later(msg, -1)
    held = client.new_transaction()
    consumer.acknowledge(msg, held)  # pending in another transaction: the ack will conflict
    with pytest.raises(magnetar.TransactionConflict):
        consumer.reconsume_later(msg, 0)
    held.abort()
    # The copy was sent in the transaction that failed: aborted with it, never delivered.
    reader = client.create_reader(f"{topic}-s-RETRY", magnetar.MessageId.earliest)
    with pytest.raises(magnetar.Timeout):
        reader.read_next(timeout_millis=2000)
    again = consumer.receive(timeout_millis=10_000)  # the abort gave the original back
    assert again.data() == b"held"
    consumer.reconsume_later(again, 0)
    assert reader.read_next(timeout_millis=10_000).properties()["RECONSUMETIMES"] == "1"
    with pytest.raises(ValueError):
        client.subscribe(topic, "t", enable_retry=True)  # reconsume_later needs a limit
    consumer.close()
    reader.close()


def test_a_dead_letter_topic_that_cannot_be_written_is_refused_at_subscribe(client):
    for topic, error in [("persistent://public/no-such-namespace/dlq", magnetar.NamespaceNotFound),
                         ("persistent://public/default/bad..name", magnetar.InvalidTopicName)]:
        with pytest.raises(error):
            client.subscribe("dlq-refused", "s", consumer_type=magnetar.ConsumerType.Shared,
                             dead_letter_policy=magnetar.ConsumerDeadLetterPolicy(1, dead_letter_topic=topic))
    with pytest.raises(ValueError):
        magnetar.ConsumerDeadLetterPolicy(0)


# ---------------------------------------------------------------- an operator's policy, the Pulsar wheel


def cli(cluster, *argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = admin_cli(["--admin-url", cluster.admin_url, *argv])
    return code, out.getvalue() + err.getvalue()


def wheel(cluster) -> pulsar.Client:
    return pulsar.Client(cluster.pulsar_service_url, operation_timeout_seconds=10,
                         logger=logging.getLogger("pulsar-client"))


def nack_until_gone(consumer, receive_error, timeout_ms: int = 3000) -> list[int]:
    """Receive and nack until nothing comes any more; the redelivery counts seen."""
    counts = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=timeout_ms)
        except receive_error:
            return counts
        counts.append(msg.redelivery_count())
        consumer.negative_acknowledge(msg)


def test_an_operators_policy_moves_on_the_broker_for_a_pulsar_wheel_consumer(cluster, client):
    topic = "persistent://public/default/dlq-operator"
    assert cli(cluster, "topics", "create", topic)[0] == 0
    code, out = cli(cluster, "topics", "set-dead-letter-policy", topic, "-s", "s", "--max-redeliver-count", "1",
                    "--initial-subscription-name", "audit")
    assert code == 0, out
    code, out = cli(cluster, "--output", "json", "topics", "get-dead-letter-policy", topic, "-s", "s")
    assert code == 0 and json.loads(out) == {"maxRedeliverCount": 1, "deadLetterTopic": None,
                                             "initialSubscriptionName": "audit", "retryLetterTopic": None}
    pc = wheel(cluster)
    try:
        consumer = pc.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                initial_position=pulsar.InitialPosition.Earliest,
                                negative_ack_redelivery_delay_ms=100)
        pc.create_producer(topic, batching_enabled=False).send(b"poison", properties={"k": "v"})
        # The wheel has no dead-letter policy of its own here: the broker's moves it.
        assert nack_until_gone(consumer, pulsar.Timeout) == [0, 1]
    finally:
        pc.close()
    copy = client.subscribe(f"{topic}-s-DLQ", "audit").receive(timeout_millis=10_000)
    assert copy.data() == b"poison" and copy.properties()["k"] == "v"
    assert copy.properties()["REAL_TOPIC"] == topic
    stats = admin(cluster, "GET", "/admin/v2/persistent/public/default/dlq-operator/stats")[1]
    assert stats["subscriptions"]["s"]["msgDeadLettered"] == 1
    code, out = cli(cluster, "topics", "remove-dead-letter-policy", topic, "-s", "s")
    assert code == 0, out
    assert admin(cluster, "GET", "/admin/v2/persistent/public/default/dlq-operator/subscription/s/"
                                 "deadLetterPolicy") == (200, None)


def test_the_wheels_own_client_side_dead_letter_policy_over_the_pulsar_protocol(cluster, client):
    topic = "persistent://public/default/dlq-wheel"
    dlq = f"{topic}-dead"
    pc = wheel(cluster)
    try:
        consumer = pc.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                initial_position=pulsar.InitialPosition.Earliest,
                                negative_ack_redelivery_delay_ms=100,
                                dead_letter_policy=pulsar.ConsumerDeadLetterPolicy(
                                    max_redeliver_count=2, dead_letter_topic=dlq, initial_subscription_name="init"))
        pc.create_producer(topic, batching_enabled=False).send(b"poison")
        # The client moves it itself (produce, then ack): it relies on the counts.
        assert nack_until_gone(consumer, pulsar.Timeout) == [0, 1, 2]
        # Its dead-letter producer created "init" (PRODUCER's initial_subscription_name)
        # before producing, so it holds the copy.
        reader = pc.subscribe(dlq, "init", consumer_type=pulsar.ConsumerType.Shared)
        copy = reader.receive(timeout_millis=10_000)
        assert copy.data() == b"poison"
        assert copy.properties()["REAL_TOPIC"] == topic and "ORIGIN_MESSAGE_ID" in copy.properties()
        reader.acknowledge(copy)
    finally:
        pc.close()


def test_bad_dead_letter_policies_are_refused_by_the_admin_api(cluster):
    path = "/admin/v2/persistent/public/default/dlq-bad/subscription/s/deadLetterPolicy"
    assert admin(cluster, "POST", path, {"maxRedeliverCount": 1})[0] == 404  # no such topic yet
    assert admin(cluster, "PUT", "/admin/v2/persistent/public/default/dlq-bad")[0] == 204
    for body, status in [({"maxRedeliverCount": 0}, 400), ({}, 400), ({"maxRedeliverCount": "3"}, 400),
                         ({"maxRedeliverCount": 1, "surprise": 1}, 400),
                         ({"maxRedeliverCount": 1, "deadLetterTopic": "bad..name"}, 400),
                         ({"maxRedeliverCount": 1, "initialSubscriptionName": "a/b"}, 400),
                         ({"maxRedeliverCount": 1, "deadLetterTopic": "persistent://public/nope/x"}, 404)]:
        got, answer = admin(cluster, "POST", path, body)
        assert got == status, (body, answer)
    assert admin(cluster, "GET", path) == (200, None)  # nothing was written


# ---------------------------------------------------------------- delayed delivery


def test_shared_and_key_shared_wait_for_the_delivery_time_exclusive_does_not(client):
    topic = "persistent://public/default/delayed-types"
    consumers = {t: client.subscribe(topic, t.name, consumer_type=t, initial_position=EARLIEST) for t in TYPES}
    producer = client.create_producer(topic, batching_enabled=False)
    delayed = producer.send(b"later", deliver_after=timedelta(seconds=1.5))
    producer.send(b"now")
    for t, consumer in consumers.items():
        got = [consumer.receive(timeout_millis=10_000) for _ in range(2)]
        for m in got:
            consumer.acknowledge(m)
        order = [m.data() for m in got]
        # Shared and Key_Shared hold it back until its time; Exclusive and Failover
        # deliver at once, in order (Pulsar's rule).
        expected = [b"now", b"later"] if t in (magnetar.ConsumerType.Shared, magnetar.ConsumerType.KeyShared) \
            else [b"later", b"now"]
        assert order == expected, t
        assert got[order.index(b"later")].message_id() == delayed
        assert got[order.index(b"later")].deliver_at_time() > 0


def test_the_wheels_deliver_after_is_honoured_and_counted_in_msg_delayed(cluster, client):
    topic = "persistent://public/default/delayed-wheel"
    pc = wheel(cluster)
    try:
        consumer = pc.subscribe(topic, "s", consumer_type=pulsar.ConsumerType.Shared,
                                initial_position=pulsar.InitialPosition.Earliest)
        producer = pc.create_producer(topic, batching_enabled=False)
        producer.send(b"later", deliver_after=timedelta(seconds=30))
        producer.send(b"now")
        first = consumer.receive(timeout_millis=10_000)
        assert first.data() == b"now"
        consumer.acknowledge(first)
        # The wheel groups its acks (100 ms): wait for the ack of "now" too.
        def counts() -> tuple:
            s = admin(cluster, "GET", "/admin/v2/persistent/public/default/delayed-wheel/stats")[1]
            s = s["subscriptions"]["s"]
            return s["msgDelayed"], s["msgBacklog"], s["msgBacklogNoDelayed"]

        wait_until(lambda: counts() == (1, 1, 0), 10, "msgDelayed 1, msgBacklog 1, msgBacklogNoDelayed 0")
    finally:
        pc.close()


def test_a_delayed_message_in_a_transaction_waits_for_the_commit_and_its_time_and_an_aborted_one_never_comes(
        client):
    topic = "persistent://public/default/delayed-txn"
    consumer = client.subscribe(topic, "s", consumer_type=magnetar.ConsumerType.Shared, initial_position=EARLIEST)
    producer = client.create_producer(topic)
    aborted = client.new_transaction()
    producer.send(b"never", deliver_after=timedelta(seconds=1), txn=aborted)
    aborted.abort()
    with client.new_transaction() as txn:
        producer.send(b"delayed", deliver_after=timedelta(seconds=1.5), txn=txn)
        producer.send(b"at commit", txn=txn)
    first, second = receive_all(consumer, 2)
    assert [first.data(), second.data()] == [b"at commit", b"delayed"]
    consumer.acknowledge(first)
    consumer.acknowledge(second)
    # Both delivery times have passed: the aborted message would be due as well.
    with pytest.raises(magnetar.Timeout):
        consumer.receive(timeout_millis=1500)


def test_bad_delivery_times_raise_and_a_policy_sets_the_horizon_or_turns_delays_off(cluster, client):
    topic = "persistent://public/default/delayed-policy"
    producer = client.create_producer(topic, batching_enabled=False)
    with pytest.raises(ValueError):
        producer.send(b"x", deliver_after=timedelta(seconds=-1))
    with pytest.raises(ValueError):
        producer.send(b"x", deliver_at=-5)
    assert cli(cluster, "topics", "set-delayed-delivery", topic, "--enable", "--maxDelay", "1m")[0] == 0

    stored = []

    def refused() -> bool:  # the brokers pick the policy up within a heartbeat
        try:
            stored.append(producer.send(b"too late", deliver_after=timedelta(hours=2)))
        except magnetar.NotAllowedError as exc:
            return "exceeds the maximum delivery delay" in str(exc)
        return False

    wait_until(refused, 10, "a send past the horizon refused")
    consumer = client.subscribe(topic, "s", consumer_type=magnetar.ConsumerType.Shared, initial_position=EARLIEST)
    assert cli(cluster, "topics", "set-delayed-delivery", topic, "--disable")[0] == 0
    code, out = cli(cluster, "--output", "json", "topics", "get-delayed-delivery", topic)
    assert json.loads(out) == {"active": False, "tickTime": 1000, "maxDeliveryDelayInMillis": 0}
    # Turned off: what waited (sent before the horizon applied) and what comes is
    # delivered at once.
    def sent() -> bool:  # once the brokers have the new policy (no horizon: 0)
        try:
            producer.send(b"in an hour", deliver_after=timedelta(hours=1))
        except magnetar.NotAllowedError:
            return False
        return True

    wait_until(sent, 10, "the policy without a horizon in force")
    got = [consumer.receive(timeout_millis=15_000) for _ in range(len(stored) + 1)]
    assert sorted(m.data() for m in got) == sorted([b"too late"] * len(stored) + [b"in an hour"])
