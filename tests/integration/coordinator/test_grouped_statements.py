"""The coordinator store's group commit: transactions that arrive together share one
statement for NewTxn, registration, the participants read and the final transition, and
each still gets its own answer; a process that lost its TCID writes nothing."""

import asyncio

from magnetar_coordinator.store import CoordinatorStore, Fenced
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import TransactionNotFound
from magnetar_storage.db import create_pool
from tests.integration.counting import CountingPool

A, B = "persistent://public/default/a", "persistent://public/default/b"


async def test_concurrent_transactions_share_statements_and_keep_their_own_answers(database_url):
    pool = await create_pool(database_url, max_size=4)
    counting = CountingPool(pool)
    store = CoordinatorStore(counting, 0, "x")
    assert await store.claim("http://x", 5)
    first = await store.allocate_ids(40)
    ids = list(range(first, first + 40))
    counting.statements = 0
    await asyncio.gather(*(store.new_txn(i, 60000, "owner") for i in ids))
    assert counting.statements <= 2  # 40 transactions, not 40 statements
    assert await pool.fetchval("SELECT count(*) FROM transactions WHERE status = 0") == 40

    # End half of them, then register all at once: open ones register, ended ones answer
    # their status and register nothing, an unknown id is TransactionNotFound.
    assert all(await asyncio.gather(*(store.transition(i, pb.TXN_OPEN, pb.TXN_COMMITTING)
                                      for i in ids[:20])))
    results = await asyncio.gather(
        *(store.add_participants(i, [A, B], [A], [f"sub-{i}"]) for i in ids),
        store.add_participants(10_000, [A], [], []), return_exceptions=True)
    assert results[:20] == [pb.TXN_COMMITTING] * 20 and results[20:40] == [pb.TXN_OPEN] * 20
    assert isinstance(results[40], TransactionNotFound)
    assert await pool.fetchval("SELECT count(*) FROM txn_partitions") == 40
    assert await pool.fetchval("SELECT count(*) FROM txn_subscriptions") == 20

    counting.statements = 0
    participants = await asyncio.gather(*(store.participants(i) for i in ids))
    assert counting.statements <= 2
    assert participants[0] == ([], [])
    assert participants[25] == ([A, B], [(A, f"sub-{ids[25]}")])

    # Compare-and-sets in one statement: each reports whether its own move happened.
    moved = await asyncio.gather(*(store.transition(i, pb.TXN_COMMITTING, pb.TXN_COMMITTED)
                                   for i in ids[:10]),
                                 *(store.transition(i, pb.TXN_COMMITTING, pb.TXN_ABORTED)
                                   for i in ids[20:30]))  # these are OPEN: the CAS fails
    assert moved == [True] * 10 + [False] * 10
    assert await pool.fetchval(
        "SELECT count(*) FROM transactions WHERE status = 2 AND ended_at IS NOT NULL") == 10
    await pool.close()


async def test_a_fenced_process_writes_nothing_for_any_of_a_group(database_url):
    pool = await create_pool(database_url, max_size=4)
    old, new = CoordinatorStore(pool, 0, "old"), CoordinatorStore(pool, 0, "new")
    assert await old.claim("http://old", 5)
    await old.new_txn(1, 60000, None)
    await pool.execute("UPDATE coordinators SET heartbeat_at = now() - interval '1 minute'")
    assert await new.claim("http://new", 5)
    for group in (
        [old.new_txn(i, 60000, None) for i in (2, 3, 4)],
        [old.add_partitions(1, [A]), old.add_partitions(1, [B])],
        [old.transition(1, pb.TXN_OPEN, pb.TXN_ABORTING), old.transition(1, pb.TXN_OPEN, pb.TXN_COMMITTING)],
    ):
        for result in await asyncio.gather(*group, return_exceptions=True):
            assert isinstance(result, Fenced)
    assert await pool.fetchval("SELECT count(*) FROM transactions") == 1
    assert await pool.fetchval("SELECT status FROM transactions") == pb.TXN_OPEN
    assert await pool.fetchval("SELECT count(*) FROM txn_partitions") == 0
    await pool.close()


async def test_a_commit_and_an_abort_of_one_transaction_queued_together_move_it_once(database_url):
    pool = await create_pool(database_url, max_size=4)
    store = CoordinatorStore(pool, 0, "x")
    assert await store.claim("http://x", 5)
    for txn_id in (1, 2):
        await store.new_txn(txn_id, 60000, None)
    results = await asyncio.gather(
        store.start_ending(1, pb.TXN_COMMITTING, False, False),
        store.start_ending(1, pb.TXN_ABORTING, True, False),  # a timeout racing the commit
        store.start_ending(2, pb.TXN_ABORTING, False, True))
    assert results == [(True, True), (False, True), (True, True)]
    rows = await pool.fetch("SELECT txn_id, status, timed_out, expired FROM transactions ORDER BY 1")
    assert [tuple(r) for r in rows] == [(1, pb.TXN_COMMITTING, False, False),
                                        (2, pb.TXN_ABORTING, False, True)]
    await pool.close()
