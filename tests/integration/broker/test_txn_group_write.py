"""A transactional group is one statement: everything it holds is written together, only
while this broker holds the lease, and a transaction appended to and aborted in the same
group leaves no sidecar rows behind (aborted data is reclaimed)."""

from types import SimpleNamespace

from magnetar_broker.partition.planner import TxnAppend, TxnEnd
from magnetar_broker.partition.txnbuffer import TxnBuffer
from magnetar_broker.partition.txnrules import TxnBuf
from magnetar_broker.store import BrokerStore
from magnetar_runtime.roles import Roles
from magnetar_storage.db import create_pool

TOPIC = "persistent://public/default/t"
ANYONE = ("anonymous", True)  # the sender: authentication off


async def _buffer(database_url):
    pool = await create_pool(database_url, max_size=2)
    store = BrokerStore(pool, "b")
    await store.register("http://b")
    topic_id = await store.create_topic(TOPIC, "public", "default", -1)
    epoch = await store.assign_owner(topic_id, "b", 0)
    buffer = TxnBuffer(store, topic_id, TOPIC, Roles("", enabled=False))
    for txn in ((0, 1), (0, 2)):
        buffer.txns[txn] = TxnBuf(registered=True)
    plog = SimpleNamespace(next_entry_id=0, dedup=True, epoch=epoch)
    return pool, store, topic_id, buffer, plog


def _group():
    return [TxnAppend(None, "p", 0, 0, 1, b"x", (0, 1), ANYONE),
            TxnAppend(None, "p", 1, 1, 1, b"y", (0, 2), ANYONE),
            TxnEnd((0, 1), commit=False), TxnEnd((0, 2), commit=True)]


async def test_append_and_abort_in_one_group_leave_only_the_committed_marker(database_url):
    pool, _, topic_id, buffer, plog = await _buffer(database_url)
    settled = await buffer.commit_group(_group(), plog.next_entry_id, plog.dedup, plog.epoch, None)
    results, cached = settled.results, settled.cached
    assert results == [0, 0, None, None]
    assert await pool.fetchval("SELECT count(*) FROM txn_entries WHERE txn_least = 1") == 0
    assert await pool.fetchval("SELECT count(*) FROM txn_entries WHERE txn_least = 2") == 1
    outcomes = await pool.fetch("SELECT txn_least, committed FROM txn_outcomes ORDER BY 1")
    assert [tuple(r) for r in outcomes] == [(1, False), (2, True)]
    markers = await pool.fetch("SELECT entry_id, txn_least, num_messages FROM entries")
    assert [tuple(r) for r in markers] == [(0, 2, 1)]
    # The marker keeps its batches as they came: joined on first read, not by the commit.
    assert cached[0].payload is None and cached[0].parts == (b"y",) and cached[0].size() == 1
    assert await pool.fetchval("SELECT last_sequence_id FROM producer_sequences") == 1
    await pool.close()


async def test_a_group_after_a_takeover_writes_nothing(database_url):
    pool, store, topic_id, buffer, plog = await _buffer(database_url)
    other = BrokerStore(pool, "c")
    await other.register("http://c")
    assert await other.assign_owner(topic_id, "c", plog.epoch) == plog.epoch + 1
    assert await buffer.commit_group(_group(), plog.next_entry_id, plog.dedup, plog.epoch, None) is None
    for table in ("entries", "txn_entries", "txn_outcomes", "producer_sequences"):
        assert await pool.fetchval(f"SELECT count(*) FROM {table}") == 0, table
    await pool.close()


async def test_subscription_writes_are_one_statement_and_only_for_the_lease_holder(database_url):
    pool, store, topic_id, _, plog = await _buffer(database_url)
    await pool.execute("INSERT INTO subscriptions (topic_id, subscription, mark_delete_entry) "
                       "VALUES ($1, 'sub', -1)", topic_id)
    assert (await store.record_pending_acks(topic_id, plog.epoch, "sub",
                                            [(3, -1, 0, 1, False), (4, -1, 0, 2, True)]))[0]
    assert await store.end_subscription_txns(topic_id, plog.epoch, "sub", (3, b"state"),
                                             [(0, 1, True)])
    assert await pool.fetchval("SELECT mark_delete_entry FROM subscriptions") == 3
    assert await pool.fetchval("SELECT txn_least FROM pending_acks") == 2
    other = BrokerStore(pool, "c")
    await other.register("http://c")
    await other.assign_owner(topic_id, "c", plog.epoch)  # a takeover: the old owner is fenced
    assert not (await store.record_pending_acks(topic_id, plog.epoch, "sub",
                                                [(5, -1, 0, 3, False)]))[0]
    assert not await store.end_subscription_txns(topic_id, plog.epoch, "sub", (9, b""),
                                                 [(0, 2, False)])
    assert await pool.fetchval("SELECT mark_delete_entry FROM subscriptions") == 3
    assert await pool.fetchval("SELECT count(*) FROM pending_acks") == 1
    outcomes = await pool.fetch("SELECT subscription, txn_least, committed FROM txn_outcomes")
    assert [tuple(r) for r in outcomes] == [("sub", 1, True)]
    await pool.close()
