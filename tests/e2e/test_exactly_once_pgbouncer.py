"""magnetar.pg behind a real pgbouncer (docs/exactly-once-postgres.md, "Where it does not
apply"): the application connects through pgbouncer in transaction mode, with asyncpg
(``statement_cache_size=0``) and psycopg 3 (``prepare_threshold=None``).  One pgbouncer
for the module, non-root, on a free loopback port, in front of the shared cluster's
database; its aliases force the role it logs in as, to show that the commit function's
mapping is that role's, not the client's login name."""

from __future__ import annotations

import asyncio
import json
import uuid

import asyncpg
import psycopg
import pytest

import magnetar
import magnetar.asyncio as aio
import magnetar.pg
from magnetar_runtime.local.pgbouncer import LocalPgbouncer, PgbouncerNotFound, find_pgbouncer
from tests.e2e.test_exactly_once_postgres import App, _apply, _events, _order

pytestmark = [pytest.mark.e2e, pytest.mark.shared_cluster]


class Bouncer:
    """The module's roles and pgbouncer.  ``app`` and ``pool`` are mapped to Magnetar's
    `anonymous` (authentication is off), ``unmapped`` is not; ``alice`` is a client name
    PostgreSQL does not know (pgbouncer logs in as ``pool`` for her)."""

    def __init__(self, cluster, tmp):
        tag = uuid.uuid4().hex[:8]
        self.admin_url = cluster.database_url
        self.app, self.pool, self.unmapped = f"pgb_app_{tag}", f"pgb_pool_{tag}", f"pgb_unmapped_{tag}"
        self.alice = f"alice_{tag}"
        dbname = cluster.database_url.rsplit("/", 1)[1]
        port = int(cluster.database_url.split("@127.0.0.1:", 1)[1].split("/", 1)[0])
        self.server = LocalPgbouncer(
            tmp, server_port=port, users=[self.app, self.pool, self.unmapped, self.alice],
            databases={
                "direct": {"dbname": dbname},  # logs in as the client's name
                "pooled": {"dbname": dbname, "user": self.pool, "pool_size": "2"},
                "unmapped": {"dbname": dbname, "user": self.unmapped},
                "statement": {"dbname": dbname, "pool_mode": "statement"},
            })

    async def create_roles(self) -> None:
        conn = await asyncpg.connect(self.admin_url)
        try:
            for role in (self.app, self.pool, self.unmapped):
                await conn.execute(f'CREATE ROLE "{role}" LOGIN')
            for role in (self.app, self.pool):
                await conn.execute("SELECT magnetar_app.grant_app_role($1, 'anonymous', true)", role)
        finally:
            await conn.close()

    def url(self, user: str, alias: str) -> str:
        return self.server.url(user, alias)


@pytest.fixture(scope="module")
def bouncer(module_cluster, tmp_path_factory):
    try:
        find_pgbouncer()
    except PgbouncerNotFound as missing:  # a missing tool fails, never skips (as helm)
        pytest.fail(str(missing))
    made = Bouncer(module_cluster, tmp_path_factory.mktemp("pgbouncer"))
    asyncio.run(made.create_roles())
    made.server.start()
    yield made
    made.server.stop()


class Tables(App):
    """A test's tables (tag-suffixed, as App's), usable by the module's three roles."""

    def __init__(self, bouncer: Bouncer):
        self.tag = uuid.uuid4().hex[:10]
        self.admin_url = bouncer.admin_url
        self.balances, self.effects = f"balances_{self.tag}", f"effects_{self.tag}"
        self.roles = (bouncer.app, bouncer.pool, bouncer.unmapped)

    async def create(self) -> None:  # type: ignore[override]  # the roles exist already
        conn = await asyncpg.connect(self.admin_url)
        try:
            await conn.execute(f"CREATE TABLE {self.balances} (account text PRIMARY KEY, amount bigint NOT NULL)")
            await conn.execute(f"CREATE TABLE {self.effects} (order_id text NOT NULL)")
            roles = ", ".join(f'"{r}"' for r in self.roles)
            await conn.execute(f"GRANT SELECT, INSERT, UPDATE ON {self.balances}, {self.effects} TO {roles}")
        finally:
            await conn.close()


@pytest.fixture
async def aclient(cluster):
    c = aio.Client(",".join(cluster.broker_urls))
    yield c
    await c.close()


@pytest.fixture
async def tables(bouncer):
    made = Tables(bouncer)
    await made.create()
    return made


async def _orders(aclient, topic: str, count: int, accounts: int = 1):
    producer = await aclient.create_producer(topic)
    for i in range(count):
        await producer.send(_order(f"o{i}", f"acct{i % accounts}", i + 1))
    await producer.close()
    return await aclient.subscribe(topic, "billing", consumer_type=magnetar.ConsumerType.Shared,
                                   initial_position=magnetar.InitialPosition.Earliest)


async def test_asyncpg_through_pgbouncer_commits_once_and_a_rollback_redelivers(bouncer, tables, aclient):
    orders, events = f"orders-{tables.tag}", f"events-{tables.tag}"
    consumer = await _orders(aclient, orders, 5)
    conn = await asyncpg.connect(bouncer.url(bouncer.app, "direct"), statement_cache_size=0)
    try:
        first = await consumer.receive(timeout_millis=30000)
        with pytest.raises(RuntimeError, match="bug in the transform"):
            async with magnetar.pg.transaction(conn, aclient) as tx:
                await _apply(conn, tables, tx, first, events)
                raise RuntimeError("bug in the transform")
        assert tx.txn.state is magnetar.TransactionState.ABORTED
        assert await tables.balance("acct0") is None
        seen = []
        for _ in range(5):
            msg = await consumer.receive(timeout_millis=30000)
            seen.append((msg.message_id(), msg.redelivery_count()))
            async with magnetar.pg.transaction(conn, aclient) as tx:
                await _apply(conn, tables, tx, msg, events)
            assert tx.txn.state is magnetar.TransactionState.COMMITTED
    finally:
        await conn.close()
    assert (first.message_id(), 1) in seen  # the rolled-back one came again
    assert await tables.balance("acct0") == 1 + 2 + 3 + 4 + 5
    assert sorted(await _events(aclient, events, 5)) == [f"o{i}" for i in range(5)]
    with pytest.raises(magnetar.Timeout):  # every ack is durable: nothing comes again
        await consumer.receive(timeout_millis=1500)


async def test_psycopg_sync_and_async_through_pgbouncer(cluster, bouncer, tables, aclient):
    orders, events = f"orders-{tables.tag}", f"events-{tables.tag}"
    consumer = await _orders(aclient, orders, 4)
    url = bouncer.url(bouncer.app, "direct")
    async with await psycopg.AsyncConnection.connect(url, prepare_threshold=None) as conn:
        for _ in range(2):
            msg = await consumer.receive(timeout_millis=30000)
            async with magnetar.pg.transaction(conn, aclient) as tx:
                await conn.execute(f"INSERT INTO {tables.effects} VALUES (%s)", (json.loads(msg.data())["id"],))
                await tx.acknowledge(msg)
                await tx.send(events, json.dumps({"order": json.loads(msg.data())["id"]}).encode())
    await consumer.close()

    def sync_part() -> None:
        client = magnetar.Client(",".join(cluster.broker_urls))
        try:
            sync_consumer = client.subscribe(orders, "billing", consumer_type=magnetar.ConsumerType.Shared)
            with psycopg.connect(url, prepare_threshold=None) as conn:
                for _ in range(2):
                    msg = sync_consumer.receive(timeout_millis=30000)
                    with magnetar.pg.transaction(conn, client) as tx:
                        order = json.loads(msg.data())["id"]
                        conn.execute(f"INSERT INTO {tables.effects} VALUES (%s)", (order,))
                        tx.acknowledge(msg)
                        tx.send(events, json.dumps({"order": order}).encode())
                with pytest.raises(magnetar.Timeout):
                    sync_consumer.receive(timeout_millis=1500)
        finally:
            client.close()

    await asyncio.to_thread(sync_part)
    rows = await tables.fetch(f"SELECT order_id FROM {tables.effects} ORDER BY order_id")
    assert [r[0] for r in rows] == ["o0", "o1", "o2", "o3"]
    assert sorted(await _events(aclient, events, 4)) == ["o0", "o1", "o2", "o3"]


async def test_the_mapping_is_the_role_pgbouncer_logs_in_as(bouncer, tables, aclient):
    orders, events = f"orders-{tables.tag}", f"events-{tables.tag}"
    consumer = await _orders(aclient, orders, 1)
    msg = await consumer.receive(timeout_millis=30000)
    # The client logs in as a name PostgreSQL does not know; pgbouncer logs in as the
    # mapped `pool` role: the commit is that role's, and it goes through.
    # The mapped `app` role logs in through an alias that forces the unmapped role: refused.
    conn = await asyncpg.connect(bouncer.url(bouncer.app, "unmapped"), statement_cache_size=0)
    try:
        with pytest.raises(magnetar.AuthorizationError, match="permission denied for schema magnetar_app"):
            async with magnetar.pg.transaction(conn, aclient) as tx:
                assert await conn.fetchval("SELECT session_user") == bouncer.unmapped
                await _apply(conn, tables, tx, msg, events)
        assert tx.txn.state is magnetar.TransactionState.ABORTED
    finally:
        await conn.close()
    assert await tables.balance("acct0") is None
    again = await consumer.receive(timeout_millis=30000)
    assert again.message_id() == msg.message_id() and again.redelivery_count() == 1
    conn = await asyncpg.connect(bouncer.url(bouncer.alice, "pooled"), statement_cache_size=0)
    try:
        async with magnetar.pg.transaction(conn, aclient) as tx:
            assert await conn.fetchval("SELECT session_user") == bouncer.pool
            await _apply(conn, tables, tx, again, events)
        assert tx.txn.state is magnetar.TransactionState.COMMITTED
    finally:
        await conn.close()
    assert await tables.balance("acct0") == 1
    assert await _events(aclient, events, 1) == ["o0"]


async def test_six_app_connections_over_two_server_connections(bouncer, tables, aclient):
    """pool_size=2 on the alias: six connections' blocks, concurrent, share two server
    connections (their backend pids), and each message is applied once."""
    orders, events = f"orders-{tables.tag}", f"events-{tables.tag}"
    consumer = await _orders(aclient, orders, 18, accounts=3)
    conns = [await asyncpg.connect(bouncer.url(bouncer.alice, "pooled"), statement_cache_size=0)
             for _ in range(6)]
    backends: set[int] = set()
    committed: list[str] = []

    async def worker(conn) -> None:
        for _ in range(3):
            msg = await consumer.receive(timeout_millis=30000)
            async with magnetar.pg.transaction(conn, aclient) as tx:
                backends.add(await conn.fetchval("SELECT pg_backend_pid()"))
                await _apply(conn, tables, tx, msg, events)
            committed.append(json.loads(msg.data())["id"])

    try:
        await asyncio.gather(*(worker(c) for c in conns))
    finally:
        for c in conns:
            await c.close()
    assert len(backends) <= 2, backends
    assert sorted(committed) == sorted(f"o{i}" for i in range(18))
    for account in range(3):
        assert await tables.balance(f"acct{account}") == sum(i + 1 for i in range(18) if i % 3 == account)
    assert sorted(await _events(aclient, events, 18)) == sorted(f"o{i}" for i in range(18))
    with pytest.raises(magnetar.Timeout):
        await consumer.receive(timeout_millis=1500)


async def test_statement_mode_refuses_the_block_before_anything_happens(bouncer, tables, aclient):
    """Statement mode cannot hold a multi-statement transaction: pgbouncer closes the
    connection at BEGIN, before any Magnetar transaction is opened or row written."""
    consumer = await _orders(aclient, f"orders-{tables.tag}", 1)
    msg = await consumer.receive(timeout_millis=30000)
    conn = await asyncpg.connect(bouncer.url(bouncer.app, "statement"), statement_cache_size=0)
    try:
        with pytest.raises(asyncpg.exceptions.ConnectionDoesNotExistError,
                           match="transaction blocks not allowed in statement pooling mode"):
            async with magnetar.pg.transaction(conn, aclient) as tx:
                await _apply(conn, tables, tx, msg, f"events-{tables.tag}")
    finally:
        await conn.close()
    assert await tables.balance("acct0") is None


async def _hold_the_last_server_connection(bouncer: Bouncer):
    """A connection in a transaction on the server connection used last (pgbouncer hands
    out the most recently used one): the next block of another client gets another."""
    holder = await asyncpg.connect(bouncer.url(bouncer.alice, "pooled"), statement_cache_size=0)
    holding = holder.transaction()
    await holding.start()
    await holder.execute("SELECT 1")
    return holder, holding


async def _blocks_across_server_connections(bouncer, aclient, conn, consumer, blocks: int) -> None:
    """``blocks`` blocks on ``conn`` that only acknowledge, the last one on another server
    connection than the one before; each commits, and nothing comes again."""
    holder = None
    try:
        for step in range(blocks):
            msg = await consumer.receive(timeout_millis=30000)
            if step == blocks - 1:
                holder, holding = await _hold_the_last_server_connection(bouncer)
            async with magnetar.pg.transaction(conn, aclient) as tx:
                await tx.acknowledge(msg)
            assert tx.txn.state is magnetar.TransactionState.COMMITTED
    finally:
        if holder is not None:
            await holding.rollback()
            await holder.close()
    with pytest.raises(magnetar.Timeout):
        await consumer.receive(timeout_millis=1500)


async def test_magnetar_pg_prepares_nothing_asyncpg_default_cache(bouncer, tables, aclient):
    """magnetar.pg's own statement is never a prepared statement: with asyncpg's default
    statement cache, a block on one server connection and the next on another both commit
    (a cached commit statement would not exist on the second)."""
    consumer = await _orders(aclient, f"orders-{tables.tag}", 2)
    conn = await asyncpg.connect(bouncer.url(bouncer.alice, "pooled"))  # default cache
    try:
        await _blocks_across_server_connections(bouncer, aclient, conn, consumer, 2)
    finally:
        await conn.close()


async def test_magnetar_pg_prepares_nothing_psycopg_default_threshold(bouncer, tables, aclient):
    """The same with psycopg's default prepare_threshold (5): the commit statement, run by
    every block, is never prepared on the server connection of the eighth."""
    consumer = await _orders(aclient, f"orders-{tables.tag}", 8)
    async with await psycopg.AsyncConnection.connect(bouncer.url(bouncer.alice, "pooled")) as conn:
        await _blocks_across_server_connections(bouncer, aclient, conn, consumer, 8)
