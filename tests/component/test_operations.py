"""A partition's operations in process against real PostgreSQL: terminate (and its wait
for the transactions that sent to the partition), the backlog-quota gate on the send
path (producer_exception, producer_request_hold), and the storage lifecycle's pass
(``run_once``: trimming under the cursors, retention, the trimming floor
MAGNETAR_TRIM_MIN_AGE_S, messageTTL).  Policies are set with the admin's own store, as
its REST API would; ages are made by moving entries' publish times back in the database
instead of waiting."""

from __future__ import annotations

import asyncio

import pytest

from magnetar_admin.store import AdminStore
from magnetar_broker.commands import Fetch
from magnetar_broker.partition.log import TERMINATING
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import Conflict, ProducerBlockedQuotaExceeded, TopicTerminated
from magnetar_protocol.policies import EXCEPTION, HOLD
from tests.component.conftest import new_txn, payloads
from tests.waiting import async_wait_until

TOPIC = "persistent://public/default/operations"


async def _stored(pool) -> list[int]:
    return [r[0] for r in await pool.fetch("SELECT entry_id FROM entries ORDER BY 1")]


async def _age(pool, seconds: int, below: int | None = None) -> None:
    """Entries (those below ``below``, or all) published ``seconds`` earlier than they were."""
    await pool.execute("UPDATE entries SET publish_time = publish_time - $1::bigint * 1000 "
                       "WHERE $2::bigint IS NULL OR entry_id < $2", seconds, below)


async def _produce(broker, n: int, producer: int | None = None, first_seq: int = 0) -> int:
    """``n`` entries of one 16-byte message each; the producer."""
    producer = producer or await broker.producer(TOPIC, "p")
    for i in range(n):
        await broker.send(producer, b"0123456789abcdef", first_seq=first_seq + i)
    return producer


# ---------------------------------------------------------------- terminate

async def test_terminate_refuses_sends_and_consumers_learn_the_end_after_the_last_message(broker, pool):
    consumer = await broker.subscribe(TOPIC, "s")
    producer = await _produce(broker, 2)
    answer = await broker.service.backlog_ops.terminate(TOPIC)  # the admin's operation
    assert answer["entryId"] == 1
    assert (await broker.service.backlog_ops.terminate(TOPIC))["entryId"] == 1  # again: the same end
    with pytest.raises(TopicTerminated, match="was terminated at entry 1"):
        await broker.send(producer, b"late", first_seq=2)
    fetched = await broker.service.fetch(Fetch(consumer, broker.session, max_messages=1))
    assert ([e.entry_id for e in fetched.entries], fetched.end_of_topic) == ([0], False)
    fetched = await broker.service.fetch(Fetch(consumer, broker.session, max_messages=10))
    assert ([e.entry_id for e in fetched.entries], fetched.end_of_topic) == ([1], False)
    fetched = await broker.service.fetch(Fetch(consumer, broker.session, max_messages=10))
    assert (list(fetched.entries), fetched.end_of_topic) == ([], True)
    assert await pool.fetchval("SELECT terminated_entry FROM topic_owners") == 1
    assert await _stored(pool) == [0, 1]


async def test_terminate_waits_for_a_transaction_that_sent_here_and_ends_after_its_commit(
        broker, coordinator, pool):
    consumer = await broker.subscribe(TOPIC, "s")
    producer = await _produce(broker, 1)
    txn = await new_txn(coordinator)
    await broker.send(producer, b"in txn", first_seq=1, txn=txn)
    plog = await broker.partition(TOPIC)
    terminating = asyncio.ensure_future(plog.terminate(10))
    await async_wait_until(lambda: plog.terminated_entry == TERMINATING, 5, "the terminate under way")
    with pytest.raises(TopicTerminated):  # no more sends meanwhile, in the transaction or not
        await broker.send(producer, b"plain", first_seq=2)
    with pytest.raises(TopicTerminated):
        await broker.send(producer, b"more", first_seq=2, txn=txn)
    assert not terminating.done()

    await coordinator.end(pb.EndTxnRequest(txn=txn, action=pb.TXN_COMMIT))
    assert await terminating == 1  # the commit marker is the last entry
    assert payloads(await broker.fetch(consumer)) == [b"0123456789abcdef", b"in txn"]
    assert (await broker.service.fetch(Fetch(consumer, broker.session, max_messages=10))).end_of_topic


async def test_terminate_refuses_while_a_transaction_stays_open_and_changes_nothing(
        broker, coordinator, pool):
    producer = await _produce(broker, 1)
    txn = await new_txn(coordinator)
    await broker.send(producer, b"in txn", first_seq=1, txn=txn)
    plog = await broker.partition(TOPIC)
    with pytest.raises(Conflict, match="1 open transaction.* did not end within 0.2 s"):
        await plog.terminate(0.2)
    assert plog.terminated_entry is None
    assert await pool.fetchval("SELECT terminated_entry FROM topic_owners") is None
    await broker.send(producer, b"taken again", first_seq=2)  # sends are taken again
    await coordinator.end(pb.EndTxnRequest(txn=txn, action=pb.TXN_ABORT))
    assert await plog.terminate(0.2) == 1  # nothing open now: the end is the last entry


# ---------------------------------------------------------------- the backlog quota

async def _quota(pool, policy: str, limit_size: int) -> None:
    await AdminStore(pool, 5).set_backlog_quota("public", "default", "", limit_size, -1, policy)


async def test_quota_exception_refuses_sends_until_acks_bring_the_backlog_back(make_broker, pool):
    broker = await make_broker(backlog_quota_recheck_ms=0)
    await _quota(pool, EXCEPTION, 10)
    consumer = await broker.subscribe(TOPIC, "s")
    producer = await _produce(broker, 1)  # within the quota until the lifecycle knows it
    await broker.service.lifecycle.run_once()
    plog = await broker.partition(TOPIC)
    assert plog.quota.blocked == EXCEPTION
    with pytest.raises(ProducerBlockedQuotaExceeded, match="backlog quota exceeded .* policy producer_exception"):
        await broker.send(producer, b"x", first_seq=1)
    await broker.fetch(consumer)
    await broker.ack(consumer, 0)  # the partition checks again after an ack
    await async_wait_until(lambda: plog.quota.blocked is None, 5, "the quota cleared after the ack")
    await broker.send(producer, b"x", first_seq=1)
    assert await _stored(pool) == [0, 1]


async def test_quota_exception_refuses_the_very_next_send_once_the_backlog_passes_the_limit(make_broker, pool):
    broker = await make_broker(backlog_quota_recheck_ms=0)
    await _quota(pool, EXCEPTION, 20)
    await broker.subscribe(TOPIC, "s")
    producer = await broker.producer(TOPIC, "p")
    await broker.send(producer, b"a")
    await broker.service.lifecycle.run_once()  # the partition knows its quota and its backlog
    assert (await broker.partition(TOPIC)).quota.blocked is None
    await broker.send(producer, b"0123456789abcdefghij", first_seq=1)  # this one passes the limit...
    with pytest.raises(ProducerBlockedQuotaExceeded):
        await broker.send(producer, b"x", first_seq=2)  # ...so the next fails at once, no pass between
    assert await _stored(pool) == [0, 1]


async def test_quota_hold_holds_a_send_until_an_ack_releases_it(make_broker, pool):
    broker = await make_broker(backlog_quota_recheck_ms=0, backlog_quota_hold_max_ms=20_000)
    await _quota(pool, HOLD, 10)
    consumer = await broker.subscribe(TOPIC, "s")
    producer = await _produce(broker, 1)
    await broker.service.lifecycle.run_once()
    assert (await broker.partition(TOPIC)).quota.blocked == HOLD
    held = asyncio.ensure_future(broker.send(producer, b"held", first_seq=1))
    done, _ = await asyncio.wait({held}, timeout=0.3)
    assert not done  # held, not refused
    await broker.service.lifecycle.run_once()  # a pass that finds the backlog still there
    assert not held.done() and await _stored(pool) == [0]
    await broker.fetch(consumer)
    await broker.ack(consumer, 0)
    sent = await asyncio.wait_for(held, 10)  # the ack's re-check lets it go
    assert sent.entry_id == 1
    assert await _stored(pool) == [0, 1]


async def test_quota_hold_fails_the_send_after_the_longest_hold(make_broker, pool):
    broker = await make_broker(backlog_quota_recheck_ms=0, backlog_quota_hold_max_ms=100)
    await _quota(pool, HOLD, 10)
    await broker.subscribe(TOPIC, "s")
    producer = await _produce(broker, 1)
    await broker.service.lifecycle.run_once()
    with pytest.raises(ProducerBlockedQuotaExceeded, match="policy producer_request_hold"):
        await broker.send(producer, b"held", first_seq=1)
    assert await _stored(pool) == [0]


# ---------------------------------------------------------------- the lifecycle pass

async def test_trimming_removes_only_what_every_subscription_acknowledged(make_broker, pool):
    broker = await make_broker(trim_min_age_s=0)
    slow = await broker.subscribe(TOPIC, "slow")
    fast = await broker.subscribe(TOPIC, "fast")
    await _produce(broker, 10)
    await broker.fetch(fast)
    await broker.ack(fast, 9, cumulative=True)
    await broker.fetch(slow)
    await broker.ack(slow, 3, cumulative=True)
    await broker.ack(slow, 6)  # acknowledged past the slow cursor: kept, its cursor needs it
    await broker.service.lifecycle.run_once()
    assert await _stored(pool) == list(range(4, 10))
    plog = await broker.partition(TOPIC)
    assert plog.first_entry_id == 4
    # A new subscription from Earliest starts at the first entry still stored.
    late = await broker.subscribe(TOPIC, "late")
    assert [e.entry_id for e in await broker.fetch(late)] == list(range(4, 10))


async def test_with_no_subscription_acknowledged_data_goes_and_retention_keeps_it_for_its_time(
        make_broker, pool):
    broker = await make_broker(trim_min_age_s=0)
    admin = AdminStore(pool, 5)
    await admin.set_retention("public", "default", "", 60, -1)  # an hour, any size
    await _produce(broker, 6)
    await broker.service.lifecycle.run_once()
    assert await _stored(pool) == list(range(6))  # none is an hour old
    await _age(pool, 2 * 3600, below=4)
    await broker.service.lifecycle.run_once()
    assert await _stored(pool) == [4, 5]


async def test_the_trimming_floor_keeps_young_entries_whatever_the_cursors_say(broker, pool):
    # The shipped MAGNETAR_TRIM_MIN_AGE_S (600): everything acknowledged, nothing 10 minutes old.
    consumer = await broker.subscribe(TOPIC, "s")
    await _produce(broker, 8)
    await broker.fetch(consumer)
    await broker.ack(consumer, 7, cumulative=True)
    await broker.service.lifecycle.run_once()
    assert await _stored(pool) == list(range(8))
    await _age(pool, 601, below=5)
    await broker.service.lifecycle.run_once()
    assert await _stored(pool) == [5, 6, 7]


async def test_message_ttl_acknowledges_old_messages_on_every_subscription(make_broker, pool):
    broker = await make_broker(trim_min_age_s=0)
    await AdminStore(pool, 5).set_message_ttl("public", "default", "", 60)
    connected = await broker.subscribe(TOPIC, "connected")
    await broker.subscribe(TOPIC, "idle")
    await broker.close(await broker.subscribe(TOPIC, "gone"))  # durable, nobody connected
    await _produce(broker, 5)
    await _age(pool, 120, below=3)
    await broker.service.lifecycle.run_once()
    marks = await pool.fetch("SELECT subscription, mark_delete_entry FROM subscriptions ORDER BY 1")
    assert [tuple(r) for r in marks] == [("connected", 2), ("gone", 2), ("idle", 2)]
    assert [e.entry_id for e in await broker.fetch(connected)] == [3, 4]
    assert await _stored(pool) == [3, 4]  # what every cursor passed is trimmed too
