"""A transaction's first send to a partition, and its first ack on a subscription,
register the partition or subscription with the transaction (KIP-890 style, no client
AddPartitionToTxn), only while it is OPEN and only for its owner or a superuser: a first
send or ack in the statement that writes it; sends or acks that arrive
together share one statement and each gets its own answer."""

import asyncio

import asyncpg

from magnetar_broker.store import BrokerStore
from magnetar_coordinator.store import CoordinatorStore
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_storage.db import create_pool
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


async def _buffer(broker, topic_id, epoch=0):
    """A partition's transaction buffer and the bits of its log that a group write uses,
    after taking the partition's lease over from ``epoch``."""
    from types import SimpleNamespace

    from magnetar_broker.partition.txnbuffer import TxnBuffer
    from magnetar_runtime.roles import Roles

    epoch = await broker.assign_owner(topic_id, "b", epoch)
    buffer = TxnBuffer(broker, topic_id, TOPIC, Roles("", enabled=False))
    return buffer, SimpleNamespace(next_entry_id=0, dedup=True, epoch=epoch)


async def _commit(buffer, plog, items):
    """A group written as the partition log writes it: its head, dedup setting, lease epoch."""
    return await buffer.commit_group(items, plog.next_entry_id, plog.dedup, plog.epoch, None)


def _send(txn_id, actor, producer="p", seq=0, payload=b"x"):
    from magnetar_broker.partition.planner import TxnAppend

    return TxnAppend(None, producer, seq, seq, 1, payload, (0, txn_id), actor)


async def test_first_sends_register_in_their_write_only_for_open_transactions_of_the_sender(database_url):
    """One group, one statement: the first sends of OPEN transactions register the
    partition and are stored; an ending (3), another role's (4) and an unknown (5)
    transaction's are refused with the precise error, and nothing of theirs is written:
    no rows, no registration, no dedup sequence, no buffer in memory."""
    from magnetar_protocol.errors import AuthorizationError, InvalidTxnStatusError, TransactionNotFound

    pool, coordinator, counting, broker, topic_id = await _stores(database_url)
    for txn_id in range(5):
        await coordinator.new_txn(txn_id, 60000, "alice")
    await coordinator.transition(3, pb.TXN_OPEN, pb.TXN_ABORTING)
    buffer, plog = await _buffer(broker, topic_id)
    actors = [ANYONE, ("alice", False), ANYONE, ANYONE, ("mallory", False), ANYONE]
    group = [_send(i, actors[i], producer=f"p{i}", seq=7) for i in range(6)]
    group.append(_send(0, ANYONE, producer="p0", seq=8, payload=b"y"))  # a second one

    counting.statements = 0
    settled = await _commit(buffer, plog, group)
    results = settled.results
    assert counting.statements == 1
    assert results[:3] == [0, 0, 0] and results[6] == 1
    assert isinstance(results[3], InvalidTxnStatusError)
    assert isinstance(results[4], AuthorizationError) and "mallory" in str(results[4])
    assert isinstance(results[5], TransactionNotFound)
    for txn_id in range(5):
        partitions, _ = await coordinator.participants(txn_id)
        assert partitions == ([TOPIC] if txn_id < 3 else [])
    rows = await pool.fetch("SELECT txn_least, seq, payload FROM txn_entries ORDER BY 1, 2")
    assert [tuple(r) for r in rows] == [(0, 0, b"x"), (0, 1, b"y"), (1, 0, b"x"), (2, 0, b"x")]
    sequences = await pool.fetch("SELECT producer_name FROM producer_sequences ORDER BY 1")
    assert [r[0] for r in sequences] == ["p0", "p1", "p2"]
    assert sorted(settled.sequences) == ["p0", "p1", "p2"] and settled.sequences["p0"] == 8
    assert sorted(buffer.txns) == [(0, 0), (0, 1), (0, 2)]
    assert buffer.txns[(0, 0)].registered and buffer.txns[(0, 0)].batches == 2

    # The next send of a registered transaction registers nothing more.
    results = (await _commit(buffer, plog, [_send(0, ANYONE, seq=9)])).results
    assert results == [2]
    assert await pool.fetchval("SELECT count(*) FROM txn_partitions") == 3
    await pool.close()


async def test_a_first_send_after_a_takeover_is_numbered_after_the_earlier_owners_batches(database_url):
    pool, coordinator, _, broker, topic_id = await _stores(database_url)
    await coordinator.new_txn(1, 60000, None)
    earlier, plog = await _buffer(broker, topic_id)
    assert (await _commit(earlier, plog, [_send(1, ANYONE, seq=0), _send(1, ANYONE, seq=1)])).results == [0, 1]
    later, plog = await _buffer(broker, topic_id, epoch=plog.epoch)  # a new owner: no memory
    results = (await _commit(later, plog, [_send(1, ANYONE, seq=2, payload=b"z")])).results
    assert results == [2]
    buf = later.txns[(0, 1)]
    assert (buf.batches, buf.messages, buf.payloads) == (3, 3, None)  # not all in memory
    rows = await pool.fetch("SELECT seq, payload FROM txn_entries ORDER BY seq")
    assert [tuple(r) for r in rows] == [(0, b"x"), (1, b"x"), (2, b"z")]
    await pool.close()


async def test_first_acks_register_in_their_write_only_for_open_transactions_of_the_sender(database_url):
    """The same rules for a transaction's first acks on a subscription: one statement
    records the group's acks and registers the subscription for OPEN transactions of
    the sender; a refused transaction's acks are not written, and its answer says why
    (an outcome here already, the coordinator's status, the owner)."""
    pool, coordinator, counting, broker, topic_id = await _stores(database_url)
    for txn_id in range(5):
        await coordinator.new_txn(txn_id, 60000, "alice")
    await coordinator.transition(3, pb.TXN_OPEN, pb.TXN_ABORTING)
    _, plog = await _buffer(broker, topic_id)
    await pool.execute("INSERT INTO txn_outcomes (topic_id, subscription, txn_most, txn_least, "
                       "committed) VALUES ($1, 'sub', 0, 3, false)", topic_id)
    actors = [ANYONE, ("alice", False), ANYONE, ANYONE, ("mallory", False), ANYONE]

    counting.statements = 0
    owned, answers = await broker.record_pending_acks(
        topic_id, plog.epoch, "sub", [(i, 0, 0, i, False) for i in range(6)],
        [(0, i, *actors[i]) for i in range(6)], TOPIC)
    assert owned and counting.statements == 1
    # 3 ended here (aborted), 4 belongs to alice (not mallory), 5 does not exist.
    assert [a[0] for a in answers] == [True, True, True, False, False, False]
    assert [a[1] for a in answers] == [None, None, None, False, None, None]
    assert [a[2] for a in answers] == [pb.TXN_OPEN] * 3 + [pb.TXN_ABORTING, pb.TXN_OPEN, None]
    assert [a[4] for a in answers] == ["alice"] * 5 + [None]
    for txn_id in range(5):
        _, subscriptions = await coordinator.participants(txn_id)
        assert subscriptions == ([(TOPIC, "sub")] if txn_id < 3 else [])
    pending = await pool.fetch("SELECT txn_least FROM pending_acks ORDER BY 1")
    assert [r[0] for r in pending] == [0, 1, 2]
    await pool.close()


async def test_an_ending_in_progress_makes_a_first_send_wait_then_fail(database_url):
    """OPEN -> COMMITTING holds the transaction's row; a first send arriving meanwhile
    waits for it, then registers and writes nothing, so the coordinator, which reads the
    participants after its status is durable, can never miss a partition that holds
    data."""
    from magnetar_protocol.errors import InvalidTxnStatusError

    pool, coordinator, _, broker, topic_id = await _stores(database_url)
    await coordinator.new_txn(9, 60000, None)
    buffer, plog = await _buffer(broker, topic_id)
    ending = await asyncpg.connect(database_url)
    tx = ending.transaction()
    await tx.start()
    await ending.execute("UPDATE transactions SET status = 1 WHERE coordinator_id = 0 AND txn_id = 9")
    write = asyncio.create_task(_commit(buffer, plog, [_send(9, ANYONE)]))
    deadline = asyncio.get_running_loop().time() + 10
    while not await pool.fetchval(  # the write is blocked on the row lock
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"):
        assert asyncio.get_running_loop().time() < deadline, "the write never waited"
        await asyncio.sleep(0.01)
    assert not write.done()
    await tx.commit()
    results = (await asyncio.wait_for(write, 10)).results
    assert isinstance(results[0], InvalidTxnStatusError)
    assert await coordinator.participants(9) == ([], [])
    assert await pool.fetchval("SELECT count(*) FROM txn_entries") == 0
    assert buffer.txns == {}
    await ending.close()
    await pool.close()


async def test_an_ending_in_the_same_group_refuses_the_first_sends_before_it(database_url):
    """EndTxnOnPartition arrives only once the transaction is no longer OPEN, so first
    sends queued before it in one group cannot register: they fail, and the end is
    recorded."""
    from magnetar_broker.partition.planner import TxnEnd
    from magnetar_protocol.errors import InvalidTxnStatusError

    pool, coordinator, _, broker, topic_id = await _stores(database_url)
    await coordinator.new_txn(4, 60000, None)
    await coordinator.transition(4, pb.TXN_OPEN, pb.TXN_ABORTING)
    buffer, plog = await _buffer(broker, topic_id)
    await buffer.state((0, 4))  # what EndTxnOnPartition does first
    results = (await _commit(buffer, plog, [_send(4, ANYONE), TxnEnd((0, 4), commit=False)])).results
    assert isinstance(results[0], InvalidTxnStatusError) and results[1] is None
    assert await pool.fetchval("SELECT count(*) FROM txn_entries") == 0
    assert await pool.fetchval("SELECT count(*) FROM producer_sequences") == 0
    assert buffer.txns[(0, 4)].committed is False
    await pool.close()


async def test_a_refused_first_ack_does_not_make_a_later_ack_in_its_group_conflict(database_url):
    """Acks of one group are checked against each other before their write, so a first
    ack holds its positions while its registration is decided.  When the write refuses
    it, an ack of the same message that clashed with it is checked again and written:
    the refused transaction never held anything."""
    from functools import partial
    from types import SimpleNamespace

    from magnetar_broker.partition.log import PartitionLog
    from magnetar_broker.subscription.cursor import Cursor
    from magnetar_broker.subscription.subscription import Subscription
    from magnetar_protocol.errors import InvalidTxnStatusError, TransactionConflict

    pool, coordinator, _, broker, topic_id = await _stores(database_url)
    for txn_id in (1, 2, 3):
        await coordinator.new_txn(txn_id, 60000, None)
    await coordinator.transition(1, pb.TXN_OPEN, pb.TXN_ABORTING)  # 1 can no longer ack
    epoch = await broker.assign_owner(topic_id, "b", 0)
    log = SimpleNamespace(store=broker, topic_id=topic_id, epoch=epoch,
                          name=SimpleNamespace(full=TOPIC), lose=None, check_open=None)
    log.lease_checked = partial(PartitionLog.lease_checked, log)  # the real check
    sub = Subscription(log, "sub", Cursor(), durable=True)
    message = [(0, 0)]
    results = await sub.txn._ack_txns([(message, False, (0, 1), ANYONE),   # refused: ABORTING
                                   (message, False, (0, 2), ANYONE),   # clashes with 1 at first
                                   (message, False, (0, 3), ANYONE)])  # clashes with 2: stands
    assert isinstance(results[0], InvalidTxnStatusError)
    assert results[1] is None
    assert isinstance(results[2], TransactionConflict) and "(0,2)" in str(results[2])
    assert sub.txn.pending.holder(0, 0) == (0, 2)
    pending = await pool.fetch("SELECT txn_least FROM pending_acks")
    assert [r[0] for r in pending] == [2]
    assert await coordinator.participants(2) == ([], [(TOPIC, "sub")])
    await pool.close()
