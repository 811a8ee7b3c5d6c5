"""magnetar_app.commit_transaction (migration 0014): the application's own SQL transaction
decides a Magnetar transaction's commit (docs/exactly-once-postgres.md).  Real
PostgreSQL, the coordinator's store for the other side of each race."""

import asyncio
import uuid

import asyncpg
import pytest

from magnetar_coordinator.store import CoordinatorStore
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_storage.db import create_pool

TOPIC = "persistent://public/default/orders-partition-0"


@pytest.fixture
async def env(database_url):
    pool = await create_pool(database_url, max_size=4)
    store = CoordinatorStore(pool, 0, "instance-a")
    assert await store.claim("http://a", ttl_s=5)
    db_role = f"app_{uuid.uuid4().hex[:10]}"
    await pool.execute(f'CREATE ROLE "{db_role}" LOGIN')
    app_url = database_url.replace("://magnetar@", f"://{db_role}@", 1)
    assert app_url != database_url
    yield pool, store, db_role, app_url
    await pool.close()


async def _open(store: CoordinatorStore, owner: str = "app", timeout_ms: int = 60000) -> int:
    txn_id = await store.allocate_ids(1)
    await store.new_txn(txn_id, timeout_ms, owner)
    return txn_id


async def _commit_in_app(app_url: str, txn_id: int) -> None:
    conn = await asyncpg.connect(app_url)
    try:
        async with conn.transaction():
            await conn.execute("SELECT magnetar_app.commit_transaction(0, $1)", txn_id)
    finally:
        await conn.close()


async def _status(pool, txn_id: int) -> int:
    return await pool.fetchval(
        "SELECT status FROM transactions WHERE coordinator_id = 0 AND txn_id = $1", txn_id)


async def test_an_unmapped_database_role_can_neither_commit_nor_read_magnetar_tables(env):
    pool, store, db_role, app_url = env
    txn_id = await _open(store)
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await _commit_in_app(app_url, txn_id)
    await pool.execute("SELECT magnetar_app.grant_app_role($1, 'app', true)", db_role)
    conn = await asyncpg.connect(app_url)
    try:
        for sql in ("SELECT * FROM transactions", "UPDATE transactions SET status = 1",
                    "SELECT * FROM magnetar_app.app_roles",
                    "SELECT magnetar_app.grant_app_role('x', 'y', true)"):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(sql)
    finally:
        await conn.close()
    assert await _status(pool, txn_id) == pb.TXN_OPEN


async def test_commit_is_the_app_transactions_commit_and_notifies_only_then(env):
    pool, store, db_role, app_url = env
    await pool.execute("SELECT magnetar_app.grant_app_role($1, 'app', true)", db_role)
    heard: asyncio.Queue[str] = asyncio.Queue()
    listener = await asyncpg.connect(app_url.replace(f"://{db_role}@", "://magnetar@", 1))
    await listener.add_listener("magnetar_txn_committing", lambda *args: heard.put_nowait(args[3]))
    rolled, committed = await _open(store), await _open(store)
    conn = await asyncpg.connect(app_url)
    try:
        tr = conn.transaction()
        await tr.start()
        await conn.execute("SELECT magnetar_app.commit_transaction(0, $1)", rolled)
        await tr.rollback()  # the app's rollback: the Magnetar transaction stays OPEN
        async with conn.transaction():
            await conn.execute("SELECT magnetar_app.commit_transaction(0, $1)", committed)
            assert heard.empty()  # NOTIFY waits for the COMMIT
    finally:
        await conn.close()
    assert await asyncio.wait_for(heard.get(), 10) == f"0,{committed}"
    assert heard.empty()
    assert await _status(pool, rolled) == pb.TXN_OPEN
    assert await _status(pool, committed) == pb.TXN_COMMITTING
    # The coordinator's timeout abort is a compare-and-set: it loses to the app's commit.
    moved, _ = await store.start_ending(committed, pb.TXN_ABORTING, True, False)
    assert not moved
    assert await _status(pool, committed) == pb.TXN_COMMITTING
    await listener.close()


async def test_a_timeout_abort_racing_the_app_commit_waits_and_loses(env):
    pool, store, db_role, app_url = env
    await pool.execute("SELECT magnetar_app.grant_app_role($1, 'app', true)", db_role)
    txn_id = await _open(store)
    conn = await asyncpg.connect(app_url)
    try:
        tr = conn.transaction()
        await tr.start()
        await conn.execute("SELECT magnetar_app.commit_transaction(0, $1)", txn_id)
        abort = asyncio.ensure_future(store.start_ending(txn_id, pb.TXN_ABORTING, True, False))
        await asyncio.sleep(0.3)
        assert not abort.done()  # the row lock holds the abort until the app's COMMIT
        await tr.commit()
        moved, _ = await asyncio.wait_for(abort, 10)
    finally:
        await conn.close()
    assert not moved
    assert await _status(pool, txn_id) == pb.TXN_COMMITTING


async def test_an_ended_or_timed_out_transaction_fails_the_app_commit(env):
    pool, store, db_role, app_url = env
    await pool.execute("SELECT magnetar_app.grant_app_role($1, 'app', true)", db_role)
    aborted = await _open(store)
    assert (await store.start_ending(aborted, pb.TXN_ABORTING, True, False)).moved
    with pytest.raises(asyncpg.PostgresError, match="ABORTING, not OPEN \\(it timed out\\)") as err:
        await _commit_in_app(app_url, aborted)
    assert err.value.sqlstate == "MGX02"
    late = await _open(store, timeout_ms=1)
    await asyncio.sleep(0.05)  # past its deadline, not yet aborted by any timeout loop
    with pytest.raises(asyncpg.PostgresError, match="timed out") as err:
        await _commit_in_app(app_url, late)
    assert err.value.sqlstate == "MGX02"
    assert await _status(pool, late) == pb.TXN_OPEN
    with pytest.raises(asyncpg.PostgresError) as err:
        await _commit_in_app(app_url, 10**9)
    assert err.value.sqlstate == "MGX03"


async def test_a_fenced_transaction_key_fails_the_app_commit(env):
    pool, store, db_role, app_url = env
    await pool.execute("SELECT magnetar_app.grant_app_role($1, 'app', true)", db_role)
    await pool.execute("INSERT INTO transaction_keys (owner, transaction_key, epoch, coordinator_id) "
                       "VALUES ('app', 'k', 1, 0)")
    txn_id = await store.allocate_ids(1)
    await store.new_keyed_txn(txn_id, 60000, "app", "k", 1)
    # A newer holder connects: the key's epoch moves (the registry's compare-and-set).
    await pool.execute("UPDATE transaction_keys SET epoch = 2 WHERE transaction_key = 'k'")
    with pytest.raises(asyncpg.PostgresError, match="fenced") as err:
        await _commit_in_app(app_url, txn_id)
    assert err.value.sqlstate == "MGX01"
    assert await _status(pool, txn_id) == pb.TXN_OPEN
    # Not fenced: the commit also frees the key's active-transaction slot.
    again = await store.allocate_ids(1)
    await pool.execute("UPDATE transaction_keys SET active_txn_most = NULL, active_txn_least = NULL")
    await store.new_keyed_txn(again, 60000, "app", "k", 2)
    await _commit_in_app(app_url, again)
    assert await _status(pool, again) == pb.TXN_COMMITTING
    assert await pool.fetchval("SELECT active_txn_least FROM transaction_keys") is None


async def test_the_mapped_role_must_own_the_transaction_and_hold_its_grants(env):
    pool, store, db_role, app_url = env
    await pool.execute("SELECT magnetar_app.grant_app_role($1, 'app')", db_role)
    other = await _open(store, owner="someone-else")
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="does not own"):
        await _commit_in_app(app_url, other)
    txn_id = await _open(store)
    assert await store.add_participants(txn_id, [TOPIC], [], []) == pb.TXN_OPEN
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match=f"lacks produce on {TOPIC}"):
        await _commit_in_app(app_url, txn_id)
    await pool.execute("INSERT INTO namespace_permissions (tenant, namespace, role, actions) "
                       "VALUES ('public', 'default', 'app', '{consume}')")
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="lacks produce"):
        await _commit_in_app(app_url, txn_id)
    await pool.execute("UPDATE namespace_permissions SET actions = '{produce,consume}'")
    await _commit_in_app(app_url, txn_id)
    assert await _status(pool, txn_id) == pb.TXN_COMMITTING
    # Revoking the mapping takes the EXECUTE grant away too.
    await pool.execute("SELECT magnetar_app.revoke_app_role($1)", db_role)
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await _commit_in_app(app_url, await _open(store))


# ---------------------------------------------------------------- commit order (0015)

OTHER = "persistent://public/default/payments-partition-0"


async def _order(pool, txn_id: int) -> int | None:
    return await pool.fetchval(
        "SELECT app_commit_order FROM transactions WHERE coordinator_id = 0 AND txn_id = $1", txn_id)


async def _sending_to(store: CoordinatorStore, *topics: str) -> int:
    txn_id = await _open(store)
    assert await store.add_participants(txn_id, list(topics), [], []) == pb.TXN_OPEN
    return txn_id


async def test_blocks_sharing_a_partition_take_their_commit_order_one_at_a_time(env):
    pool, store, db_role, app_url = env
    await pool.execute("SELECT magnetar_app.grant_app_role($1, 'app', true)", db_role)
    first, second = await _sending_to(store, TOPIC, OTHER), await _sending_to(store, OTHER)
    elsewhere = await _sending_to(store, "persistent://public/default/elsewhere")
    conn = await asyncpg.connect(app_url)
    try:
        tr = conn.transaction()
        await tr.start()
        await conn.execute("SELECT magnetar_app.commit_transaction(0, $1)", first)
        # The second shares OTHER: its decision waits for the first's COMMIT (its order
        # must be the later one); a block on another partition does not wait.
        waiting = asyncio.ensure_future(_commit_in_app(app_url, second))
        await _commit_in_app(app_url, elsewhere)
        await asyncio.sleep(0.3)
        assert not waiting.done()
        assert await _status(pool, second) == pb.TXN_OPEN
        await tr.commit()
        await asyncio.wait_for(waiting, 10)
    finally:
        await conn.close()
    assert await _order(pool, first) < await _order(pool, second)
    # The coordinator's side: the second goes after the first on OTHER, until the first
    # is finished; a block that shares nothing with them has nothing before it.
    assert await store.app_predecessors(second) == [(0, first, await _order(pool, first), OTHER)]
    assert await store.app_predecessors(elsewhere) == []
    assert await store.app_predecessors(first) == []
    async with store.transaction() as sql:  # the one-phase finish refuses the second
        assert not await store.start_endings_in(sql, [(second, pb.TXN_COMMITTING, False, False)])
    assert await store.transition(first, pb.TXN_COMMITTING, pb.TXN_COMMITTED)
    assert await store.app_predecessors(second) == []
    async with store.transaction() as sql:
        assert await store.start_endings_in(sql, [(second, pb.TXN_COMMITTING, False, False)])


async def test_a_rolled_back_block_lets_the_next_one_through_and_takes_no_order(env):
    pool, store, db_role, app_url = env
    await pool.execute("SELECT magnetar_app.grant_app_role($1, 'app', true)", db_role)
    rolled, then = await _sending_to(store, TOPIC), await _sending_to(store, TOPIC)
    acks_only = await _open(store)
    conn = await asyncpg.connect(app_url)
    try:
        tr = conn.transaction()
        await tr.start()
        await conn.execute("SELECT magnetar_app.commit_transaction(0, $1)", rolled)
        waiting = asyncio.ensure_future(_commit_in_app(app_url, then))
        await asyncio.sleep(0.2)
        assert not waiting.done()
        await tr.rollback()
        await asyncio.wait_for(waiting, 10)
    finally:
        await conn.close()
    assert (await _status(pool, rolled), await _order(pool, rolled)) == (pb.TXN_OPEN, None)
    assert await _status(pool, then) == pb.TXN_COMMITTING
    assert await _order(pool, then) is not None
    await _commit_in_app(app_url, acks_only)  # sent nothing: no order to keep
    assert (await _status(pool, acks_only), await _order(pool, acks_only)) == (pb.TXN_COMMITTING, None)


@pytest.mark.parametrize("isolation", ["repeatable_read", "serializable"])
async def test_a_snapshot_older_than_the_block_is_refused(env, isolation):
    # Under REPEATABLE READ the function would read the transaction's registrations as of
    # the caller's first statement: a send registered after it would escape the grant
    # check and the commit order.
    pool, store, db_role, app_url = env
    await pool.execute("SELECT magnetar_app.grant_app_role($1, 'app')", db_role)
    txn_id = await _open(store)
    conn = await asyncpg.connect(app_url)
    try:
        async with conn.transaction(isolation=isolation):
            await conn.execute("SELECT 1")  # the application's first statement: its snapshot
            assert await store.add_participants(txn_id, [TOPIC], [], []) == pb.TXN_OPEN
            with pytest.raises(asyncpg.PostgresError, match="READ COMMITTED") as err:
                await conn.execute("SELECT magnetar_app.commit_transaction(0, $1)", txn_id)
        assert err.value.sqlstate == "MGX04"
    finally:
        await conn.close()
    assert await _status(pool, txn_id) == pb.TXN_OPEN


async def test_a_block_that_never_commits_holds_the_next_up_until_its_deadline_only(env):
    # An application that called commit_transaction and sits idle in its transaction
    # holds the partition's turn; another block sharing the partition waits no longer
    # than its own deadline and is refused naming why, never hangs.
    pool, store, db_role, app_url = env
    await pool.execute("SELECT magnetar_app.grant_app_role($1, 'app', true)", db_role)
    idle = await _sending_to(store, TOPIC)
    waiting = await _open(store, timeout_ms=800)
    assert await store.add_participants(waiting, [TOPIC], [], []) == pb.TXN_OPEN
    conn = await asyncpg.connect(app_url)
    try:
        tr = conn.transaction()
        await tr.start()
        await conn.execute("SELECT magnetar_app.commit_transaction(0, $1)", idle)
        with pytest.raises(asyncpg.PostgresError, match="waiting for its turn") as err:
            await asyncio.wait_for(_commit_in_app(app_url, waiting), 10)
        assert err.value.sqlstate == "MGX02"
        await tr.rollback()
    finally:
        await conn.close()
    assert await _status(pool, waiting) == pb.TXN_OPEN  # it times out and aborts as usual


async def test_a_waited_turn_leaves_the_callers_lock_timeout_as_it_was(env):
    pool, store, db_role, app_url = env
    await pool.execute("SELECT magnetar_app.grant_app_role($1, 'app', true)", db_role)
    first, second = await _sending_to(store, TOPIC), await _sending_to(store, TOPIC)
    holder, waiter = await asyncpg.connect(app_url), await asyncpg.connect(app_url)
    try:
        tr = holder.transaction()
        await tr.start()
        await holder.execute("SELECT magnetar_app.commit_transaction(0, $1)", first)
        async with waiter.transaction():
            await waiter.execute("SET LOCAL lock_timeout = '45s'")
            turn = asyncio.ensure_future(waiter.execute("SELECT magnetar_app.commit_transaction(0, $1)", second))
            await _until_waiting_on_a_lock(pool)  # the second block waits its turn
            await tr.commit()
            await asyncio.wait_for(turn, 10)
            assert await waiter.fetchval("SHOW lock_timeout") == "45s"
    finally:
        await holder.close()
        await waiter.close()
    assert await _order(pool, first) < await _order(pool, second)


async def _until_waiting_on_a_lock(pool, timeout_s: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await pool.fetchval("SELECT count(*) FROM pg_stat_activity "
                                  "WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'"):
        assert asyncio.get_running_loop().time() < deadline, "nobody waits on the partition's lock"
        await asyncio.sleep(0.01)
