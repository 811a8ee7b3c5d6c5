"""A transaction's end on this broker's participants, in process against real
PostgreSQL: the two-phase path (txnend.end_on_participant: the partition's writer, the
subscription's TxnAcks) and the one-phase path of a coordinator hosted by the broker
(CoordinatorService with the broker's LocalEnds behind its LocalParticipants protocol),
which write and apply through the same parts."""

from __future__ import annotations

import asyncio

import pytest

from magnetar_broker.commands import Fetch, Redeliver
from magnetar_broker.txnend import end_on_participant
from magnetar_coordinator import metrics as coordinator_metrics
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import InvalidTxnStatusError, TransactionConflict
from magnetar_protocol.txnid import TxnID
from tests.component import conftest
from tests.component.conftest import new_txn

TOPIC = "persistent://public/default/component-txn"
# The conftest's fixture, under the name other modules import from here.
coordinator = conftest.coordinator


async def test_two_phase_end_commits_the_partition_and_the_subscription_through_their_parts(
        broker, coordinator, pool):
    consumer = await broker.subscribe(TOPIC, "s")
    producer = await broker.producer(TOPIC, "p")
    await broker.send(producer, b"before", first_seq=0)
    txn = await new_txn(coordinator)
    await broker.send(producer, b"in txn", first_seq=1, txn=txn)
    [entry] = await broker.fetch(consumer)
    await broker.ack(consumer, entry.entry_id, txn=txn)
    assert await broker.fetch(consumer) == []  # the transaction's message is not visible yet

    # The coordinator's status first, then each participant (what its fan-out would call).
    await coordinator.store.transition(txn.least_bits, pb.TXN_OPEN, pb.TXN_COMMITTING)
    txn_id = TxnID.from_wire(txn)
    await end_on_participant(broker.service.ownership, TOPIC, "", txn_id, True)
    await end_on_participant(broker.service.ownership, TOPIC, "s", txn_id, True)
    await end_on_participant(broker.service.ownership, TOPIC, "s", txn_id, True)  # a retry: no-op
    with pytest.raises(InvalidTxnStatusError):
        await end_on_participant(broker.service.ownership, TOPIC, "", txn_id, False)  # the opposite

    [marker] = await broker.fetch(consumer)
    assert pb.MessageBatch.FromString(marker.batch).messages[0].payload == b"in txn"
    assert await pool.fetchval("SELECT mark_delete_entry FROM subscriptions WHERE subscription = 's'") == entry.entry_id
    outcomes = await pool.fetch("SELECT subscription, committed FROM txn_outcomes ORDER BY subscription")
    assert [tuple(r) for r in outcomes] == [("", True), ("s", True)]


async def test_a_hosted_coordinator_ends_a_local_transaction_in_one_phase(broker, coordinator, pool):
    consumer = await broker.subscribe(TOPIC, "s")
    producer = await broker.producer(TOPIC, "p")
    await broker.send(producer, b"first", first_seq=0)
    [first] = await broker.fetch(consumer)
    txn = await new_txn(coordinator)
    await broker.send(producer, b"second", first_seq=1, txn=txn)
    await broker.ack(consumer, first.entry_id, txn=txn)
    one_phase = coordinator_metrics.ONE_PHASE._value.get()

    reply = await coordinator.end(pb.EndTxnRequest(txn=txn, action=pb.TXN_COMMIT))

    assert reply.status == pb.TXN_COMMITTED
    assert coordinator_metrics.ONE_PHASE._value.get() == one_phase + 1  # no fan-out
    assert await pool.fetchval("SELECT status FROM transactions") == pb.TXN_COMMITTED
    [marker] = await broker.fetch(consumer)
    assert pb.MessageBatch.FromString(marker.batch).messages[0].payload == b"second"
    # The writer applied it: the log head, and the subscription's cursor in memory and stored.
    plog = await broker.partition(TOPIC)
    assert plog.next_entry_id == marker.entry_id + 1
    assert plog.subscriptions.get("s").cursor.mark_delete == first.entry_id
    assert await pool.fetchval("SELECT mark_delete_entry FROM subscriptions WHERE subscription = 's'") == first.entry_id


async def test_an_aborted_transactions_acks_are_redelivered_and_a_conflicting_ack_refused(
        broker, coordinator):
    consumer = await broker.subscribe(TOPIC, "s", sub_type=pb.SUB_SHARED)
    producer = await broker.producer(TOPIC, "p")
    await broker.send(producer, b"m", first_seq=0)
    [entry] = await broker.fetch(consumer)
    txn, other = await new_txn(coordinator), await new_txn(coordinator)
    await broker.ack(consumer, entry.entry_id, txn=txn)
    with pytest.raises(TransactionConflict):
        await broker.ack(consumer, entry.entry_id, txn=other)

    await coordinator.end(pb.EndTxnRequest(txn=txn, action=pb.TXN_ABORT))

    [again] = await broker.fetch(consumer)
    assert again.entry_id == entry.entry_id
    assert list(again.redelivery_counts) == [1]


@pytest.mark.parametrize("path", ["one-phase", "two-phase"])
async def test_an_aborted_cumulative_ack_rewinds_the_consumer_to_its_mark_delete_position(
        broker, coordinator, path):
    # Pulsar's PendingAckHandleImpl: redeliverUnacknowledgedMessages, i.e. the single active
    # consumer's cursor back to mark-delete; not only the range the transaction acknowledged.
    topic = f"{TOPIC}-rewind-{path}"
    consumer = await broker.subscribe(topic, "s", sub_type=pb.SUB_FAILOVER)
    producer = await broker.producer(topic, "p")
    for i in range(5):
        await broker.send(producer, f"m{i}".encode(), first_seq=i)
    delivered = await broker.fetch(consumer)
    assert [e.entry_id for e in delivered] == [0, 1, 2, 3, 4]
    txn = await new_txn(coordinator)
    await broker.ack(consumer, 2, txn=txn, cumulative=True)  # 0..2 pending in it; 3, 4 held
    if path == "one-phase":
        await coordinator.end(pb.EndTxnRequest(txn=txn, action=pb.TXN_ABORT))
    else:
        await coordinator.store.transition(txn.least_bits, pb.TXN_OPEN, pb.TXN_ABORTING)
        await end_on_participant(broker.service.ownership, topic, "s", TxnID.from_wire(txn), False)
    again = await broker.fetch(consumer)
    assert [e.entry_id for e in again] == [0, 1, 2, 3, 4]  # in order, 3 and 4 too
    assert [list(e.redelivery_counts) for e in again] == [[1]] * 5


async def test_a_fetch_overtaken_by_a_rewind_while_it_waited_for_the_lock_delivers_nothing(broker):
    # The client dropped its queue (RedeliverRequest.seeks): what a fetch it sent before
    # takes would never come again, so it takes nothing, even one already past the
    # service's check and waiting for the subscription's lock.
    topic = f"{TOPIC}-overtaken"
    consumer_id = await broker.subscribe(topic, "s")
    producer = await broker.producer(topic, "p")
    await broker.send(producer, b"m0")
    sub = broker.service.consumers[consumer_id].subscription
    await sub.lock.acquire()  # another fetch (or an ack) holds the subscription
    stale = asyncio.ensure_future(broker.service.fetch(Fetch(consumer_id=consumer_id, session_id=broker.session,
                                                             max_messages=10, seeks=0)))
    await asyncio.sleep(0.01)  # the fetch passed the service's check and waits for the lock
    await broker.service.redeliver(Redeliver(consumer_id=consumer_id, session_id=broker.session, seeks=1))
    sub.lock.release()
    assert list((await stale).entries) == []
    assert sub.deliveries.pending == {}  # nothing counted as delivered
    fresh = await broker.service.fetch(Fetch(consumer_id=consumer_id, session_id=broker.session,
                                             max_messages=10, seeks=1))
    assert [e.entry_id for e in fresh.entries] == [0]
