"""Transactions seen from a partition and a subscription, in process against real
PostgreSQL with a coordinator hosted by the broker: what a transaction sends is visible
only once it commits (one entry at its commit point, never blocking other messages) and
never when it aborts; its acks are pending (PIP-31) and conflict with every other
transaction's by Pulsar's rules, across a reload of the partition too; and trimming
keeps an entry an open transaction acknowledged."""

from __future__ import annotations

import pytest

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import InvalidTxnStatusError, TransactionConflict
from tests.component.conftest import at, counts, new_txn, payloads

TOPIC = "persistent://public/default/txn-visibility"


async def _commit(coordinator, txn) -> None:
    assert (await coordinator.end(pb.EndTxnRequest(txn=txn, action=pb.TXN_COMMIT))).status == pb.TXN_COMMITTED


async def _abort(coordinator, txn) -> None:
    assert (await coordinator.end(pb.EndTxnRequest(txn=txn, action=pb.TXN_ABORT))).status == pb.TXN_ABORTED


async def test_a_transactions_messages_are_visible_at_its_commit_and_never_hold_others_back(
        broker, coordinator, pool):
    consumer = await broker.subscribe(TOPIC, "s")
    producer = await broker.producer(TOPIC, "p")
    await broker.send(producer, b"m0", first_seq=0)
    txn = await new_txn(coordinator)
    await broker.send(producer, b"t0", first_seq=1, txn=txn)
    await broker.send(producer, b"t1", b"t2", first_seq=2, txn=txn)
    await broker.send(producer, b"m1", first_seq=4)  # after the transaction's, not behind it
    assert payloads(await broker.fetch(consumer)) == [b"m0", b"m1"]
    reader = await broker.reader(TOPIC, at(0), inclusive=True)
    assert payloads(await broker.fetch(reader)) == [b"m0", b"m1"]

    await _commit(coordinator, txn)
    [marker] = await broker.fetch(consumer)  # one entry at the commit point, in send order
    assert (marker.entry_id, marker.num_messages, payloads([marker])) == (2, 3, [b"t0", b"t1", b"t2"])
    assert payloads(await broker.fetch(reader)) == [b"t0", b"t1", b"t2"]
    with pytest.raises(InvalidTxnStatusError):
        await broker.send(producer, b"late", first_seq=5, txn=txn)  # an ended transaction takes no more
    # The log holds the plain entries and the marker; the batches stay in the buffer.
    assert await pool.fetchval("SELECT count(*) FROM entries") == 3
    assert await pool.fetchval("SELECT count(*) FROM txn_entries") == 2


async def test_an_aborted_transactions_messages_are_never_delivered_on_any_path(broker, coordinator, pool):
    consumer = await broker.subscribe(TOPIC, "s")
    producer = await broker.producer(TOPIC, "p")
    txn = await new_txn(coordinator)
    await broker.send(producer, b"aborted", first_seq=0, txn=txn)
    await broker.send(producer, b"plain", first_seq=1)
    await _abort(coordinator, txn)
    assert payloads(await broker.fetch(consumer)) == [b"plain"]
    await broker.nack(consumer)
    assert payloads(await broker.fetch(consumer)) == [b"plain"]  # not on redelivery either
    late = await broker.subscribe(TOPIC, "late")  # from Earliest
    assert payloads(await broker.fetch(late)) == [b"plain"]
    reader = await broker.reader(TOPIC, at(0), inclusive=True)
    assert payloads(await broker.fetch(reader)) == [b"plain"]
    assert await pool.fetchval("SELECT count(*) FROM txn_entries") == 0  # reclaimed at once


async def test_pending_acks_conflict_by_pulsars_rules_and_survive_a_reload(broker, coordinator, pool):
    consumer = await broker.subscribe(TOPIC, "s", sub_type=pb.SUB_FAILOVER)
    producer = await broker.producer(TOPIC, "p")
    for i in range(5):
        await broker.send(producer, f"m{i}".encode(), first_seq=i)
    assert len(await broker.fetch(consumer)) == 5
    await broker.ack(consumer, 0)
    a, b = await new_txn(coordinator), await new_txn(coordinator)
    await broker.ack(consumer, 1, txn=a)
    await broker.ack(consumer, 3, txn=a, cumulative=False)
    with pytest.raises(TransactionConflict, match="already acknowledged"):
        await broker.ack(consumer, 0, txn=b)
    with pytest.raises(TransactionConflict, match="message 1:-1 is pending in transaction"):
        await broker.ack(consumer, 1, txn=b)
    with pytest.raises(TransactionConflict, match="pending in another transaction before 2"):
        await broker.ack(consumer, 2, txn=b, cumulative=True)
    await broker.ack(consumer, 1)  # a plain ack of a pending message is ignored, as in Pulsar

    # The pending acks are stored: a reloaded partition judges the same.
    (await broker.partition(TOPIC)).lose("test: reload")
    consumer = await broker.subscribe(TOPIC, "s", sub_type=pb.SUB_FAILOVER)
    assert payloads(await broker.fetch(consumer)) == [b"m2", b"m4"]  # 1 and 3 held by a
    with pytest.raises(TransactionConflict, match="message 3:-1 is pending in transaction"):
        await broker.ack(consumer, 3, txn=b)
    await broker.ack(consumer, 4, txn=b)

    await _abort(coordinator, a)  # a's messages come back, counted
    again = await broker.fetch(consumer)
    assert (payloads(again), counts(again)) == ([b"m1", b"m3"], [1, 1])
    await broker.ack(consumer, 1, 3, txn=b)  # free now
    await _commit(coordinator, b)
    stored = await pool.fetchrow("SELECT mark_delete_entry FROM subscriptions WHERE subscription = 's'")
    assert stored[0] == 1 and await pool.fetchval("SELECT count(*) FROM pending_acks") == 0


async def test_one_transaction_holds_the_cumulative_ack_and_moves_it_only_forward(broker, coordinator):
    consumer = await broker.subscribe(TOPIC, "s")
    producer = await broker.producer(TOPIC, "p")
    for i in range(6):
        await broker.send(producer, f"m{i}".encode(), first_seq=i)
    assert len(await broker.fetch(consumer)) == 6
    a, b = await new_txn(coordinator), await new_txn(coordinator)
    await broker.ack(consumer, 2, txn=a, cumulative=True)
    with pytest.raises(TransactionConflict, match="already holds a cumulative ack"):
        await broker.ack(consumer, 4, txn=b, cumulative=True)
    with pytest.raises(TransactionConflict, match="under transaction .*'s cumulative ack"):
        await broker.ack(consumer, 1, txn=b)
    with pytest.raises(TransactionConflict, match="can only move forward"):
        await broker.ack(consumer, 1, txn=a, cumulative=True)
    await broker.ack(consumer, 4, txn=a, cumulative=True)
    await _commit(coordinator, a)
    sub = (await broker.partition(TOPIC)).subscriptions.get("s")
    assert sub.cursor.mark_delete == 4
    with pytest.raises(TransactionConflict, match="behind the acknowledged position"):
        await broker.ack(consumer, 3, txn=b, cumulative=True)


async def test_trimming_keeps_an_entry_an_open_transaction_acknowledged(broker, coordinator, pool):
    broker.service.lifecycle.min_age_ms = 0  # MAGNETAR_TRIM_MIN_AGE_S=0: the cursors alone decide
    consumer = await broker.subscribe(TOPIC, "s", sub_type=pb.SUB_SHARED)
    producer = await broker.producer(TOPIC, "p")
    for i in range(4):
        await broker.send(producer, f"m{i}".encode(), first_seq=i)
    assert len(await broker.fetch(consumer)) == 4
    txn = await new_txn(coordinator)
    await broker.ack(consumer, 0, 2, 3)
    await broker.ack(consumer, 1, txn=txn)  # pending: an abort must find it again
    await broker.service.lifecycle.run_once()  # 0 goes; 1 and what follows it stay
    assert [r[0] for r in await pool.fetch("SELECT entry_id FROM entries ORDER BY 1")] == [1, 2, 3]
    await _abort(coordinator, txn)
    again = await broker.fetch(consumer)
    assert (payloads(again), counts(again)) == ([b"m1"], [1])
    await broker.ack(consumer, 1)
    await broker.service.lifecycle.run_once()
    assert await pool.fetchval("SELECT array_agg(entry_id) FROM entries") == [3]  # the newest stays
