"""The broker store's first-send and first-ack checks: they register the partition or
subscription with the transaction (KIP-890 style, no client AddPartitionToTxn), only
while it is OPEN and only for its owner or a superuser; checks that arrive together
share one statement and each gets its own answer."""

import asyncio

import asyncpg
import pytest

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_storage.db import create_pool
from magnetar_broker.store import BrokerStore
from magnetar_coordinator.store import CoordinatorStore

from tests.integration.counting import CountingPool

TOPIC = "persistent://public/default/g"
ANYONE = ("anonymous", True)  # authentication off: every role acts for every owner


async def _stores(database_url):
    pool = await create_pool(database_url, max_size=4)
    coordinator = CoordinatorStore(pool, 0, "c")
    assert await coordinator.claim("http://c", 5)
    counting = CountingPool(pool)
    broker = BrokerStore(counting, "b")
    await broker.register("http://b")
    topic_id = await broker.create_topic(TOPIC, "public", "default", -1)
    return pool, coordinator, counting, broker, topic_id


async def test_concurrent_checks_share_a_statement_and_register_only_open_transactions(database_url):
    pool, coordinator, counting, broker, topic_id = await _stores(database_url)
    for txn_id in range(5):
        await coordinator.new_txn(txn_id, 60000, "alice")
    await coordinator.transition(3, pb.TXN_OPEN, pb.TXN_ABORTING)
    actors = [ANYONE, ("alice", False), ANYONE, ANYONE, ("mallory", False), ANYONE]

    counting.statements = 0
    sends = await asyncio.gather(*(broker.txn_send_check(topic_id, (0, i), TOPIC, actors[i])
                                   for i in range(6)))
    acks = await asyncio.gather(*(broker.txn_ack_check(topic_id, TOPIC, "sub", (0, i), actors[i])
                                  for i in range(6)))
    assert counting.statements <= 4  # 12 checks, a statement or two for each kind
    # 3 is ABORTING, 4 belongs to alice (not mallory), 5 does not exist.
    assert [s[6] for s in sends] == [True, True, True, False, False, False]
    assert [s[3] for s in sends] == [pb.TXN_OPEN] * 3 + [pb.TXN_ABORTING, pb.TXN_OPEN, None]
    assert [s[5] for s in sends] == ["alice"] * 5 + [None]
    assert [a[4] for a in acks] == [s[6] for s in sends]
    assert [a[1] for a in acks] == [s[3] for s in sends]
    for txn_id in range(5):
        partitions, subscriptions = await coordinator.participants(txn_id)
        registered = txn_id < 3
        assert partitions == ([TOPIC] if registered else [])
        assert subscriptions == ([(TOPIC, "sub")] if registered else [])
    # A second check of a registered transaction answers the same and adds no row.
    again = await broker.txn_send_check(topic_id, (0, 0), TOPIC, ANYONE)
    assert again[6] is True
    assert await pool.fetchval("SELECT count(*) FROM txn_partitions") == 3
    await pool.close()


async def test_an_ending_in_progress_makes_the_registration_wait_then_fail(database_url):
    """OPEN -> COMMITTING holds the transaction's row; a first send arriving meanwhile
    waits for it and registers nothing, so the coordinator, which reads the participants
    after its status is durable, can never miss a partition that holds data."""
    pool, coordinator, _, broker, topic_id = await _stores(database_url)
    await coordinator.new_txn(9, 60000, None)
    ending = await asyncpg.connect(database_url)
    tx = ending.transaction()
    await tx.start()
    await ending.execute("UPDATE transactions SET status = 1 WHERE coordinator_id = 0 AND txn_id = 9")
    check = asyncio.create_task(broker.txn_send_check(topic_id, (0, 9), TOPIC, ANYONE))
    deadline = asyncio.get_running_loop().time() + 10
    while not await pool.fetchval(  # the check is blocked on the row lock
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"):
        assert asyncio.get_running_loop().time() < deadline, "the check never waited"
        await asyncio.sleep(0.01)
    assert not check.done()
    await tx.commit()
    result = await asyncio.wait_for(check, 10)
    assert result[6] is False  # not registered (its status column may still read OPEN:
    # the statement's snapshot predates the ending; the broker answers "no longer open")
    assert await coordinator.participants(9) == ([], [])
    await ending.close()
    await pool.close()


async def test_a_refused_first_send_keeps_no_buffer(database_url):
    """The broker answers a send for an unknown, ended or foreign transaction with the
    precise error and keeps nothing for it in memory (no buffer, no active count)."""
    from magnetar_protocol.errors import InvalidTxnStatusError, TransactionNotFound
    from magnetar_runtime.roles import Roles
    from magnetar_broker.txnbuffer import TxnBuffer

    pool, coordinator, _, broker, topic_id = await _stores(database_url)
    await coordinator.new_txn(1, 60000, None)
    await coordinator.transition(1, pb.TXN_OPEN, pb.TXN_ABORTING)
    buffer = TxnBuffer(broker, topic_id, TOPIC, Roles("", enabled=False))
    with pytest.raises(TransactionNotFound):
        await buffer.check_send((0, 99))
    with pytest.raises(InvalidTxnStatusError, match="no longer open"):
        await buffer.check_send((0, 1))
    assert buffer.txns == {}
    await coordinator.new_txn(2, 60000, None)
    assert (await buffer.check_send((0, 2))).registered
    assert list(buffer.txns) == [(0, 2)]
    await pool.close()
