"""Delayed delivery in process against real PostgreSQL: a Shared or Key_Shared
subscription keeps a delayed message apart until its time (its cursor passes it, a row
keyed by time holds it), Exclusive and Failover deliver at once, the rows survive a
reload of the partition, a transaction's delayed message waits for its commit and its
time (an aborted one never comes), and bad times are refused before anything is
written."""

from __future__ import annotations

import time

import pytest

from magnetar_broker import metrics
from magnetar_broker.commands import Fetch
from magnetar_broker.partition.sends import Batch
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import BadRequest, NotAllowedError
from magnetar_protocol.policies import DelayedDelivery
from magnetar_protocol.pulsar import batches, stored
from magnetar_protocol.txnid import TxnID
from tests.component.conftest import Broker

TOPIC = "persistent://public/default/delayed"
FAST = DelayedDelivery(active=True, tick_ms=20, max_delay_ms=0)


def now_ms() -> int:
    return int(time.time() * 1000)


async def send(broker: Broker, producer: int, payloads: list[bytes], seq: int, deliver_at: list[int] | None = None,
               txn: pb.TxnId | None = None) -> int:
    times = deliver_at or [0] * len(payloads)
    messages = [pb.SingleMessage(payload=p, sequence_id=seq + i, deliver_at_time=t)
                for i, (p, t) in enumerate(zip(payloads, times))]
    [sent] = await broker.service.publish(broker.session, [Batch(
        producer_id=producer, payload=pb.MessageBatch(messages=messages).SerializeToString(),
        num_messages=len(messages), sequence_id=seq, highest_sequence_id=seq + len(messages) - 1,
        txn=None if txn is None else TxnID.from_wire(txn), deliver_at=max(times))])
    if isinstance(sent, Exception):
        raise sent
    return sent.entry_id


async def receive(broker: Broker, consumer: int, wait_ms: int = 0) -> list[bytes]:
    """One fetch (a long poll of ``wait_ms``): the payloads delivered."""
    fetched = await broker.service.fetch(Fetch(consumer_id=consumer, session_id=broker.session, max_messages=100,
                                               wait_ms=wait_ms))
    out = []
    for e in fetched.entries:
        messages = pb.MessageBatch.FromString(e.batch).messages
        out += [messages[i].payload for i in (e.indices or range(e.num_messages))]
    return out


async def receive_at_least(broker: Broker, consumer: int, count: int) -> list[bytes]:
    """Long polls (of 5 s, at most 6) until ``count`` messages came; what came."""
    got: list[bytes] = []
    for _ in range(6):
        got += await receive(broker, consumer, wait_ms=5000)
        if len(got) >= count:
            return got
    raise AssertionError(f"only {got} came in 6 long polls, {count} expected")


async def shared(broker: Broker, topic: str = TOPIC, sub: str = "s", sub_type: int = pb.SUB_SHARED) -> int:
    plog = await broker.partition(topic)
    plog.delayed_delivery = FAST
    return await broker.subscribe(topic, sub, sub_type=sub_type)


async def stored_delays(pool) -> list[tuple[int, int]]:
    return [tuple(r) for r in await pool.fetch("SELECT entry_id, messages FROM delayed_deliveries ORDER BY 1")]


async def test_a_shared_subscription_keeps_a_delayed_message_apart_until_its_time(broker, pool):
    consumer = await shared(broker)
    producer = await broker.producer(TOPIC, "p")
    later = await send(broker, producer, [b"later"], 0, [now_ms() + 400])
    await send(broker, producer, [b"now"], 1)
    assert await receive(broker, consumer) == [b"now"]
    sub = (await broker.partition(TOPIC)).subscriptions.get("s")
    assert sub.stats()["msgDelayed"] == 1
    # Stored with the cursor that passed it: its mark-delete is not held back by it.
    await sub.save_now()
    assert await stored_delays(pool) == [(later, 1)]
    assert await pool.fetchval("SELECT mark_delete_entry FROM subscriptions") == later
    await broker.service.export_topic_metrics()  # Pulsar's gauge, and the backlog counting it
    rows = metrics.TOPIC_GAUGES_COLLECTOR.latest.rows
    assert [v for _, v in rows["pulsar_subscription_delayed"]] == [1]
    assert [v for _, v in rows["pulsar_msg_backlog"]] == [2]  # "now" (not acknowledged) and "later"
    assert await receive(broker, consumer, wait_ms=5000) == [b"later"]  # woken on its tick
    assert sub.stats()["msgDelayed"] == 0
    await broker.ack(consumer, later)  # stored with the cursor, which deletes its row
    assert await stored_delays(pool) == []
    assert await receive(broker, consumer) == []


@pytest.mark.parametrize("sub_type", [pb.SUB_EXCLUSIVE, pb.SUB_FAILOVER])
async def test_exclusive_and_failover_deliver_delayed_messages_at_once(broker, pool, sub_type):
    consumer = await shared(broker, sub_type=sub_type)
    producer = await broker.producer(TOPIC, "p")
    await send(broker, producer, [b"later"], 0, [now_ms() + 60_000])
    assert await receive(broker, consumer) == [b"later"]
    assert await stored_delays(pool) == []


async def test_messages_of_one_batch_keep_their_own_times_and_key_shared_honours_them(broker):
    consumer = await shared(broker, sub_type=pb.SUB_KEY_SHARED)
    producer = await broker.producer(TOPIC, "p")
    await send(broker, producer, [b"a", b"b", b"c"], 0, [0, now_ms() + 60_000, now_ms() + 300])
    assert await receive(broker, consumer) == [b"a"]
    assert await receive(broker, consumer, wait_ms=5000) == [b"c"]
    sub = (await broker.partition(TOPIC)).subscriptions.get("s")
    assert sub.stats()["msgDelayed"] == 1


async def test_delayed_rows_survive_a_reload_and_the_cursor_is_past_them(broker, pool):
    consumer = await shared(broker)
    producer = await broker.producer(TOPIC, "p")
    at = now_ms() + 1500
    entries = [await send(broker, producer, [f"d{i}".encode()], i, [at]) for i in range(3)]
    await send(broker, producer, [b"now"], 3)
    assert await receive(broker, consumer) == [b"now"]
    await broker.ack(consumer, entries[-1] + 1)
    sub = (await broker.partition(TOPIC)).subscriptions.get("s")
    await sub.save_now()
    assert [e for e, _ in await stored_delays(pool)] == entries
    assert await pool.fetchval("SELECT mark_delete_entry FROM subscriptions") == entries[-1] + 1
    plog = await broker.partition(TOPIC)
    plog.lose("test: the partition moves")  # as after a restart or an unload
    consumer = await shared(broker)
    again = (await broker.partition(TOPIC)).subscriptions.get("s")
    assert again.stats()["msgDelayed"] == 3
    assert await receive(broker, consumer) == []  # not yet, and the log is not read again
    assert sorted(await receive_at_least(broker, consumer, 3)) == [b"d0", b"d1", b"d2"]


async def test_the_namespace_policy_turned_off_delivers_what_waits_at_once(broker):
    consumer = await shared(broker)
    producer = await broker.producer(TOPIC, "p")
    await send(broker, producer, [b"later"], 0, [now_ms() + 60_000])
    assert await receive(broker, consumer) == []
    (await broker.partition(TOPIC)).delayed_delivery = DelayedDelivery(active=False)
    assert await receive(broker, consumer) == [b"later"]


async def test_bad_delivery_times_are_refused_before_anything_is_written(broker, pool):
    producer = await broker.producer(TOPIC, "p")
    (await broker.partition(TOPIC)).delayed_delivery = DelayedDelivery(max_delay_ms=60_000)
    with pytest.raises(BadRequest, match="negative"):
        await send(broker, producer, [b"x"], 0, [-5])
    with pytest.raises(NotAllowedError, match="exceeds the maximum delivery delay of 60000 ms"):
        await send(broker, producer, [b"x"], 0, [now_ms() + 3_600_000])
    assert await pool.fetchval("SELECT count(*) FROM entries") == 0


async def test_a_transactions_delayed_message_waits_for_its_commit_and_its_time(broker, coordinator, pool):
    from magnetar_broker.txnend import end_on_participant

    consumer = await shared(broker)
    producer = await broker.producer(TOPIC, "p")
    committed = (await coordinator.new_txn(pb.NewTxnRequest(timeout_ms=60000))).txn
    aborted = (await coordinator.new_txn(pb.NewTxnRequest(timeout_ms=60000))).txn
    await send(broker, producer, [b"kept", b"soon"], 0, [now_ms() + 500, 0], txn=committed)
    await send(broker, producer, [b"never"], 2, [now_ms() + 100], txn=aborted)
    assert await receive(broker, consumer) == []
    for txn, commit in [(committed, True), (aborted, False)]:
        await coordinator.store.transition(txn.least_bits, pb.TXN_OPEN,
                                           pb.TXN_COMMITTING if commit else pb.TXN_ABORTING)
        await end_on_participant(broker.service.ownership, TOPIC, "", TxnID.from_wire(txn), commit)
    assert await receive(broker, consumer) == [b"soon"]  # the commit's undelayed message at once
    assert await receive_at_least(broker, consumer, 1) == [b"kept"]
    assert await receive(broker, consumer, wait_ms=300) == []  # the aborted one never


async def test_a_due_delayed_message_acknowledged_in_a_transaction_goes_with_its_commit(broker, coordinator, pool):
    from magnetar_broker.txnend import end_on_participant

    consumer = await shared(broker)
    producer = await broker.producer(TOPIC, "p")
    entry = await send(broker, producer, [b"later"], 0, [now_ms() + 300])
    assert await receive(broker, consumer) == []
    assert await receive_at_least(broker, consumer, 1) == [b"later"]
    txn = (await coordinator.new_txn(pb.NewTxnRequest(timeout_ms=60000))).txn
    await broker.ack(consumer, entry, txn=txn)  # not "already acknowledged": its cursor only passed it
    await coordinator.store.transition(txn.least_bits, pb.TXN_OPEN, pb.TXN_COMMITTING)
    await end_on_participant(broker.service.ownership, TOPIC, "s", TxnID.from_wire(txn), True)
    sub = (await broker.partition(TOPIC)).subscriptions.get("s")
    await sub.save_now()
    assert await stored_delays(pool) == []
    assert await receive(broker, consumer) == []


async def test_a_pulsar_batch_stored_as_sent_waits_for_its_entrys_time(broker, pool):
    """A Pulsar entry is stored as sent (an envelope); its metadata's deliver_at_time is
    its messages' (Pulsar's is per entry): all of them kept apart, unopened."""
    producer = await broker.producer(TOPIC, "p")
    consumer = await shared(broker)
    inner = pb.MessageBatch(messages=[pb.SingleMessage(payload=f"w{i}".encode(), sequence_id=i) for i in range(3)])
    metadata, payload = batches.to_pulsar_entry(inner, producer_name="p", publish_time=1, batched=True)
    metadata.deliver_at_time = at = now_ms() + 300
    [sent] = await broker.service.publish(broker.session, [Batch(
        producer_id=producer, payload=stored.envelope_batch(metadata.SerializeToString(), metadata, payload),
        num_messages=3, sequence_id=0, highest_sequence_id=2, deliver_at=at)])
    assert not isinstance(sent, Exception)
    assert await receive(broker, consumer) == []
    assert await stored_delays(pool) in ([], [(0, 3)])  # stored with the next cursor write
    fetched = await broker.service.fetch(Fetch(consumer_id=consumer, session_id=broker.session, max_messages=100,
                                               wait_ms=5000))
    assert now_ms() >= at
    [entry] = fetched.entries
    assert [m.payload for m in stored.stored_messages(entry.batch)] == [b"w0", b"w1", b"w2"]
