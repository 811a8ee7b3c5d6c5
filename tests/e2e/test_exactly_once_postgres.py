"""Exactly-once into the application's own PostgreSQL (magnetar.pg,
docs/exactly-once-postgres.md), with real processes: the application's rows, its acks and
its sends commit in one SQL transaction on its own connection and database role.
Crashes of the application process: test_exactly_once_postgres_crash.py."""

from __future__ import annotations

import asyncio
import json
import random
import urllib.request
import uuid

import asyncpg
import psycopg
import pytest

import magnetar
import magnetar.asyncio as aio
import magnetar.pg
from tests.e2e.test_authorization_e2e import AUTH_ENV, Admin, token
from tests.waiting import async_wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.shared_cluster]


class App:
    """An application database role mapped to Magnetar's `anonymous` (authentication is
    off: every caller is that superuser), and its tables (tag-suffixed)."""

    def __init__(self, cluster, tag: str):
        self.tag = tag
        self.role = f"app_{tag}"
        self.admin_url = cluster.database_url
        self.url = cluster.database_url.replace("://magnetar@", f"://{self.role}@", 1)
        self.balances = f"balances_{tag}"
        self.effects = f"effects_{tag}"

    async def create(self, magnetar_role: str = "anonymous", trusted: bool = True) -> None:
        conn = await asyncpg.connect(self.admin_url)
        try:
            await conn.execute(f'CREATE ROLE "{self.role}" LOGIN')
            await conn.execute("SELECT magnetar_app.grant_app_role($1, $2, $3)", self.role,
                               magnetar_role, trusted)
            await conn.execute(f"CREATE TABLE {self.balances} (account text PRIMARY KEY, amount bigint NOT NULL)")
            await conn.execute(f"CREATE TABLE {self.effects} (order_id text NOT NULL)")
            await conn.execute(f'GRANT SELECT, INSERT, UPDATE ON {self.balances}, {self.effects} TO "{self.role}"')
        finally:
            await conn.close()

    async def fetch(self, sql: str):
        conn = await asyncpg.connect(self.admin_url)
        try:
            return await conn.fetch(sql)
        finally:
            await conn.close()

    async def balance(self, account: str) -> int | None:
        rows = await self.fetch(f"SELECT amount FROM {self.balances} WHERE account = '{account}'")
        return rows[0][0] if rows else None


@pytest.fixture
async def app(cluster):
    made = App(cluster, uuid.uuid4().hex[:10])
    await made.create()
    return made


@pytest.fixture
async def aclient(cluster):
    c = aio.Client(",".join(cluster.broker_urls))
    yield c
    await c.close()


def _order(order_id: str, account: str, amount: int) -> bytes:
    return json.dumps({"id": order_id, "account": account, "amount": amount}).encode()


async def _apply(conn, app: App, tx, msg, events: str) -> None:
    """The example's transform: add the order to its account, emit an event."""
    order = json.loads(msg.data())
    await conn.execute(
        f"INSERT INTO {app.balances} VALUES ($1, $2) ON CONFLICT (account) DO UPDATE "
        f"SET amount = {app.balances}.amount + excluded.amount", order["account"], order["amount"])
    await tx.acknowledge(msg)
    await tx.send(events, json.dumps({"order": order["id"]}).encode(), partition_key=order["account"])


async def _events(client: aio.Client, topic: str, expect: int, wait_s: float = 3.0) -> list[str]:
    """Every event on ``topic`` from the start (waits for ``expect``, then ``wait_s`` more
    for any extra one)."""
    reader = await client.create_reader(topic, magnetar.MessageId.earliest)
    got: list[str] = []
    try:
        while True:
            try:
                msg = await reader.read_next(timeout_millis=int(wait_s * 1000) if len(got) >= expect else 30000)
            except magnetar.Timeout:
                return got
            got.append(json.loads(msg.data())["order"])
    finally:
        await reader.close()


async def _applied_once(app: App, aclient: aio.Client, events: str, amount: int) -> None:
    """Order o1 of ``amount`` was applied once: its balance row and its one event."""
    assert await app.balance("acct") == amount
    assert await _events(aclient, events, 1) == ["o1"]


async def test_consume_update_and_emit_in_one_sql_transaction_asyncpg(cluster, app, aclient):
    orders, events = f"orders-{app.tag}", f"events-{app.tag}"
    producer = await aclient.create_producer(orders)
    for i in range(20):
        await producer.send(_order(f"o{i}", f"acct{i % 3}", i))
    consumer = await aclient.subscribe(orders, "billing", consumer_type=magnetar.ConsumerType.Shared,
                                       initial_position=magnetar.InitialPosition.Earliest)
    conn = await asyncpg.connect(app.url)
    try:
        for _ in range(20):
            msg = await consumer.receive(timeout_millis=30000)
            async with magnetar.pg.transaction(conn, aclient) as tx:
                await _apply(conn, app, tx, msg, events)
            assert tx.txn.state is magnetar.TransactionState.COMMITTED
    finally:
        await conn.close()
    for account in range(3):
        assert await app.balance(f"acct{account}") == sum(i for i in range(20) if i % 3 == account)
    assert sorted(await _events(aclient, events, 20)) == sorted(f"o{i}" for i in range(20))
    with pytest.raises(magnetar.Timeout):  # every ack is durable: nothing comes again
        await consumer.receive(timeout_millis=1500)


async def test_a_rollback_writes_nothing_and_redelivers(cluster, app, aclient):
    orders, events = f"orders-{app.tag}", f"events-{app.tag}"
    producer = await aclient.create_producer(orders)
    await producer.send(_order("o1", "acct", 5))
    consumer = await aclient.subscribe(orders, "billing", consumer_type=magnetar.ConsumerType.Shared,
                                       initial_position=magnetar.InitialPosition.Earliest)
    conn = await asyncpg.connect(app.url)
    try:
        msg = await consumer.receive(timeout_millis=30000)
        with pytest.raises(RuntimeError, match="bug in the transform"):
            async with magnetar.pg.transaction(conn, aclient) as tx:
                await _apply(conn, app, tx, msg, events)
                raise RuntimeError("bug in the transform")
        assert tx.txn.state is magnetar.TransactionState.ABORTED
        again = await consumer.receive(timeout_millis=30000)
        assert again.message_id() == msg.message_id() and again.redelivery_count() == 1
        assert await app.balance("acct") is None
        async with magnetar.pg.transaction(conn, aclient) as tx:
            await _apply(conn, app, tx, again, events)
    finally:
        await conn.close()
    await _applied_once(app, aclient, events, 5)


async def test_psycopg_sync_and_async(cluster, app, aclient):
    orders = f"orders-{app.tag}"
    producer = await aclient.create_producer(orders)
    for i in range(4):
        await producer.send(_order(f"o{i}", "acct", 1))
    # psycopg 3 async with magnetar.asyncio.
    consumer = await aclient.subscribe(orders, "billing", consumer_type=magnetar.ConsumerType.Shared,
                                       initial_position=magnetar.InitialPosition.Earliest,
                                       receiver_queue_size=1)
    async with await psycopg.AsyncConnection.connect(app.url) as conn:
        for _ in range(2):
            msg = await consumer.receive(timeout_millis=30000)
            async with magnetar.pg.transaction(conn, aclient) as tx:
                await conn.execute(f"INSERT INTO {app.effects} VALUES (%s)",
                                   (json.loads(msg.data())["id"],))
                await tx.acknowledge(msg)
    await consumer.close()

    def sync_part() -> None:  # psycopg 3 sync with magnetar.Client
        client = magnetar.Client(",".join(cluster.broker_urls))
        try:
            sync_consumer = client.subscribe(orders, "billing",
                                             consumer_type=magnetar.ConsumerType.Shared)
            with psycopg.connect(app.url) as conn:
                for _ in range(2):
                    msg = sync_consumer.receive(timeout_millis=30000)
                    with magnetar.pg.transaction(conn, client) as tx:
                        conn.execute(f"INSERT INTO {app.effects} VALUES (%s)",
                                     (json.loads(msg.data())["id"],))
                        tx.acknowledge(msg)
                        tx.send(f"events-{app.tag}", b'{"order": "sync"}')
                with pytest.raises(magnetar.Timeout):
                    sync_consumer.receive(timeout_millis=1500)
        finally:
            client.close()

    await asyncio.to_thread(sync_part)
    rows = await app.fetch(f"SELECT order_id FROM {app.effects} ORDER BY order_id")
    assert [r[0] for r in rows] == ["o0", "o1", "o2", "o3"]


async def test_a_connection_already_in_a_transaction_is_refused(cluster, app, aclient):
    conn = await asyncpg.connect(app.url)
    try:
        async with conn.transaction():
            with pytest.raises(magnetar.InvalidTxnStatusError, match="must own the SQL transaction"):
                async with magnetar.pg.transaction(conn, aclient):
                    pass
    finally:
        await conn.close()


async def test_a_fenced_transaction_key_fails_the_commit(cluster, app, aclient):
    orders, events = f"orders-{app.tag}", f"events-{app.tag}"
    producer = await aclient.create_producer(orders)
    await producer.send(_order("o1", "acct", 7))
    key = f"billing-{app.tag}"
    zombie = aio.Client(",".join(cluster.broker_urls), transaction_key=key)
    successor = aio.Client(",".join(cluster.broker_urls), transaction_key=key)
    conn = await asyncpg.connect(app.url)
    try:
        consumer = await zombie.subscribe(orders, "billing", consumer_type=magnetar.ConsumerType.Shared,
                                          initial_position=magnetar.InitialPosition.Earliest)
        msg = await consumer.receive(timeout_millis=30000)
        with pytest.raises(magnetar.ExpiredTransactionError, match="fenced"):
            async with magnetar.pg.transaction(conn, zombie) as tx:
                await _apply(conn, app, tx, msg, events)
                await successor.connect_transaction_key()  # a newer holder of the key
        assert await app.balance("acct") is None
        await consumer.close()
        # The successor gets the message again and applies it once.
        consumer = await successor.subscribe(orders, "billing", consumer_type=magnetar.ConsumerType.Shared)
        again = await consumer.receive(timeout_millis=30000)
        assert again.message_id() == msg.message_id()
        async with magnetar.pg.transaction(conn, successor) as tx:
            await _apply(conn, app, tx, again, events)
    finally:
        await conn.close()
        await zombie.close()
        await successor.close()
    await _applied_once(app, aclient, events, 7)


def _unload(cluster, topic: str) -> None:
    for url in cluster.broker_urls:  # the owner answers; another broker's unload is a no-op
        req = urllib.request.Request(f"{url}/internal/v1/unload?topic={topic}", method="POST")
        with urllib.request.urlopen(req, timeout=30):
            pass


def _reset_to_start(cluster, topic: str, subscription: str) -> None:
    req = urllib.request.Request(f"{cluster.admin_url}/admin/v2/persistent/public/default/{topic}"
                                 f"/subscription/{subscription}/resetcursor/0", method="POST")
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 204


async def test_a_partition_moved_between_receive_and_commit(cluster, app, aclient):
    orders, events = f"orders-{app.tag}", f"events-{app.tag}"
    producer = await aclient.create_producer(orders)
    await producer.send(_order("o1", "acct", 3))
    consumer = await aclient.subscribe(orders, "billing", consumer_type=magnetar.ConsumerType.Shared,
                                       initial_position=magnetar.InitialPosition.Earliest)
    conn = await asyncpg.connect(app.url)
    full = f"persistent://public/default/{orders}"
    try:
        msg = await consumer.receive(timeout_millis=30000)
        _unload(cluster, full)  # moved before the ack
        async with magnetar.pg.transaction(conn, aclient) as tx:
            await _apply(conn, app, tx, msg, events)
            _unload(cluster, full)  # and again while the ack is pending
        # A copy the move redelivered is harmless: its ack conflicts, the block rolls back.
        while True:
            try:
                copy = await consumer.receive(timeout_millis=3000)
            except magnetar.Timeout:
                break
            with pytest.raises(magnetar.TransactionConflict):
                async with magnetar.pg.transaction(conn, aclient) as tx:
                    await _apply(conn, app, tx, copy, events)
    finally:
        await conn.close()
    await _applied_once(app, aclient, events, 3)


async def test_a_subscription_reset_between_receive_and_commit(cluster, app, aclient):
    """reset-cursor to the start while an order's ack is pending: the commit goes on; the
    orders are replayed, and a copy of one already applied (the pending one, or one queued
    before the reset and delivered again) conflicts at its ack: each applied once."""
    orders, events = f"orders-{app.tag}", f"events-{app.tag}"
    producer = await aclient.create_producer(orders)
    for i in range(3):
        await producer.send(_order(f"o{i}", "acct", 10 ** i))
    consumer = await aclient.subscribe(orders, "billing", consumer_type=magnetar.ConsumerType.Shared,
                                       initial_position=magnetar.InitialPosition.Earliest,
                                       receiver_queue_size=1)
    conn = await asyncpg.connect(app.url)
    try:
        first = await consumer.receive(timeout_millis=30000)
        async with magnetar.pg.transaction(conn, aclient) as tx:
            await _apply(conn, app, tx, first, events)
            await asyncio.to_thread(_reset_to_start, cluster, orders, "billing")
        applied = {first.message_id()}
        while True:
            try:
                msg = await consumer.receive(timeout_millis=3000)
            except magnetar.Timeout:
                break
            try:
                async with magnetar.pg.transaction(conn, aclient) as tx:
                    await _apply(conn, app, tx, msg, events)
                applied.add(msg.message_id())
            except magnetar.TransactionConflict:  # a copy (queued before the reset)
                assert msg.message_id() in applied
    finally:
        await conn.close()
    assert await app.balance("acct") == 111
    assert sorted(await _events(aclient, events, 3)) == ["o0", "o1", "o2"]


async def test_a_message_taken_over_by_another_consumer_is_applied_once(cluster, app, aclient):
    """A's transaction times out (the process hangs) and the message goes to B, which
    applies it; A's late commit fails instead of applying it twice."""
    orders, events = f"orders-{app.tag}", f"events-{app.tag}"
    producer = await aclient.create_producer(orders)
    await producer.send(_order("o1", "acct", 4))
    a = await aclient.subscribe(orders, "billing", consumer_type=magnetar.ConsumerType.Shared,
                                initial_position=magnetar.InitialPosition.Earliest)
    conn_a, conn_b = await asyncpg.connect(app.url), await asyncpg.connect(app.url)
    try:
        msg = await a.receive(timeout_millis=30000)
        with pytest.raises(magnetar.InvalidTxnStatusError, match="timed out"):
            async with magnetar.pg.transaction(conn_a, aclient, timeout_ms=1000) as tx:
                await tx.acknowledge(msg)
                await a.close()  # A is gone for the broker: the message is B's next
                b = await aclient.subscribe(orders, "billing", consumer_type=magnetar.ConsumerType.Shared)
                taken = await b.receive(timeout_millis=30000)  # after A's transaction aborted
                assert taken.message_id() == msg.message_id()
                async with magnetar.pg.transaction(conn_b, aclient) as tx_b:
                    await _apply(conn_b, app, tx_b, taken, events)
                # A wakes up and goes on with its transform.
                order = json.loads(msg.data())
                await conn_a.execute(f"UPDATE {app.balances} SET amount = amount + $1", order["amount"])
    finally:
        await conn_a.close()
        await conn_b.close()
    await _applied_once(app, aclient, events, 4)


async def test_outbox_order_under_concurrent_transactions_of_different_lengths(cluster, app, aclient):
    """Workers' blocks of different lengths interleave; a long one that began first
    commits last.  Every event comes once (none lost behind a long transaction: nothing
    polls by id), each worker's events in its commit order."""
    events = f"events-{app.tag}"
    workers, blocks = 4, 8
    rng = random.Random(7)

    async def worker(w: int) -> None:
        conn = await asyncpg.connect(app.url)
        try:
            for i in range(blocks):
                async with magnetar.pg.transaction(conn, aclient) as tx:
                    await conn.execute(f"INSERT INTO {app.effects} VALUES ($1)", f"w{w}-{i}")
                    for part in range(rng.randint(1, 4)):
                        await tx.send(events, json.dumps({"order": f"w{w}-{i}-{part}"}).encode())
                        await asyncio.sleep(rng.random() * 0.05)
        finally:
            await conn.close()

    async def long_one() -> None:
        conn = await asyncpg.connect(app.url)
        try:
            async with magnetar.pg.transaction(conn, aclient) as tx:
                await tx.send(events, json.dumps({"order": "long"}).encode())
                await async_wait_until(
                    lambda: done[0] == workers, 60, "the short transactions to finish", interval=0.05)
        finally:
            await conn.close()

    done = [0]

    async def counted(w: int) -> None:
        await worker(w)
        done[0] += 1

    await asyncio.gather(long_one(), *(counted(w) for w in range(workers)))
    sent = (await app.fetch(f"SELECT count(*) FROM {app.effects}"))[0][0]
    assert sent == workers * blocks
    got = await _events(aclient, events, 1)
    assert len(got) == len(set(got))
    assert got[-1] == "long"  # committed last: delivered last, not lost
    for w in range(workers):
        mine = [tuple(int(x) for x in e.split("-")[1:]) for e in got if e.startswith(f"w{w}-")]
        assert mine == sorted(mine) and len({i for i, _ in mine}) == blocks


# The application process of the crash test: batches of orders, each batch one block
# (balance rows, effect rows, acks, events); it SIGKILLs itself now and then at one of
# three points: inside the block, after the commit decision before its COMMIT, and after
# its COMMIT before anyone told the coordinator.
CRASHING_APP = """
import asyncio, json, os, random, signal, sys
import asyncpg
import magnetar, magnetar.asyncio as aio, magnetar.pg

service, app_url, orders, events, effects, seed = sys.argv[1:7]
rng = random.Random(int(seed))
kill_at = None

def maybe_die(point):
    if kill_at == point:
        print("SIGKILL at", point, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

class Conn(asyncpg.Connection):
    async def execute(self, query, *args, **kwargs):
        done = await super().execute(query, *args, **kwargs)
        if query.startswith("SELECT magnetar_app.commit_transaction("):
            maybe_die("before_commit")
        return done

committed = magnetar.pg._Core.committed
async def after_commit(self):
    maybe_die("after_commit")
    await committed(self)
magnetar.pg._Core.committed = after_commit

async def main():
    global kill_at
    client = aio.Client(service)
    consumer = await client.subscribe(orders, "billing", consumer_type=magnetar.ConsumerType.Shared,
                                      initial_position=magnetar.InitialPosition.Earliest)
    conn = await asyncpg.connect(app_url, connection_class=Conn)
    while True:
        batch = []
        try:
            while len(batch) < 10:
                batch.append(await consumer.receive(timeout_millis=200 if batch else 30000))
        except magnetar.Timeout:
            pass
        if rng.random() < 0.06:
            kill_at = rng.choice(["inside", "before_commit", "after_commit"])
        try:
            async with magnetar.pg.transaction(conn, client, timeout_ms=2000) as tx:
                for msg in batch:
                    order = json.loads(msg.data())
                    await conn.execute(f"INSERT INTO {effects} VALUES ($1)", order["id"])
                    await tx.acknowledge(msg)
                    await tx.send(events, json.dumps({"order": order["id"]}).encode())
                maybe_die("inside")
        except magnetar.MagnetarError as exc:  # e.g. a redelivered copy's ack conflicts
            print("block failed:", type(exc).__name__, exc, flush=True)

asyncio.run(main())
"""


async def test_sigkill_of_the_application_before_and_after_its_commit(cluster, app, aclient, tmp_path):
    """Thousands of orders through an application process that SIGKILLs itself before
    and after its COMMIT and is restarted: each order's effect row and event exist
    exactly once."""
    import signal
    import sys
    import time

    orders, events, total = f"orders-{app.tag}", f"events-{app.tag}", 2000
    producer = await aclient.create_producer(orders)
    for i in range(0, total, 100):
        await asyncio.gather(*(producer.send(_order(f"o{j}", "acct", 1)) for j in range(i, i + 100)))
    script = tmp_path / "app.py"
    script.write_text(CRASHING_APP)
    log = (tmp_path / "app.log").open("w")
    service = ",".join(cluster.broker_urls)
    kills = 0
    proc = None
    deadline = time.monotonic() + 300
    try:
        for seed in range(1000):
            proc = await asyncio.create_subprocess_exec(
                sys.executable, str(script), service, app.url, orders, events, app.effects,
                str(seed), stdout=log, stderr=asyncio.subprocess.STDOUT)
            while proc.returncode is None:
                done = (await app.fetch(f"SELECT count(DISTINCT order_id) FROM {app.effects}"))[0][0]
                if done == total:
                    break
                assert time.monotonic() < deadline, f"only {done} of {total} orders applied"
                try:
                    await asyncio.wait_for(proc.wait(), 0.5)
                except TimeoutError:
                    pass
            if proc.returncode is None:
                break
            assert proc.returncode == -signal.SIGKILL, (tmp_path / "app.log").read_text()[-3000:]
            kills += 1
        await asyncio.sleep(3)  # anything applied twice would show up meanwhile
    finally:
        if proc is not None and proc.returncode is None:
            proc.kill()
            await proc.wait()
        log.close()
    text = (tmp_path / "app.log").read_text()
    points = {p: text.count(f"SIGKILL at {p}") for p in ("inside", "before_commit", "after_commit")}
    assert all(points.values()), f"every crash point reached: {points}"
    rows = await app.fetch(f"SELECT order_id, count(*) FROM {app.effects} GROUP BY order_id")
    assert len(rows) == total and all(n == 1 for _, n in rows), "an order applied twice"
    got = await _events(aclient, events, total)
    assert len(got) == total and len(set(got)) == total, "an event lost or doubled"
    print(f"{kills} SIGKILLs: {points}")


def test_the_example_service(cluster, tmp_path):
    """examples/exactly_once_postgres.py as its docstring runs it: setup, orders, the
    service (its own database role), then killed and run again: nothing twice."""
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "examples" / "exactly_once_postgres.py"
    tag = uuid.uuid4().hex[:8]
    role = f"billing_{tag}"
    common = ["--service-url", ",".join(cluster.broker_urls), "--orders", f"orders-{tag}",
              "--events", f"events-{tag}"]

    def example_run(*args: str, database_url: str = cluster.database_url) -> str:
        out = subprocess.run([sys.executable, str(example), *args, *common,
                              "--database-url", database_url],
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout

    example_run("setup", "--app-role", role)
    example_run("produce", "--count", "6")
    app_url = cluster.database_url.replace("://magnetar@", f"://{role}@", 1)
    first = example_run("run", "--stop-after", "4", database_url=app_url)
    second = example_run("run", "--stop-after", "2", database_url=app_url)
    handled = [line.split(":")[0] for line in (first + second).splitlines()]
    assert sorted(handled) == [f"order-{i}" for i in range(6)]

    async def check() -> None:
        conn = await asyncpg.connect(cluster.database_url)
        try:
            rows = dict(await conn.fetch("SELECT account, amount FROM balances"))
        finally:
            await conn.close()
        assert rows == {f"customer-{a}": sum(10 + i for i in range(6) if i % 3 == a) for a in range(3)}
        client = aio.Client(",".join(cluster.broker_urls))
        try:
            assert sorted(await _events(client, f"events-{tag}", 6)) == [f"order-{i}" for i in range(6)]
        finally:
            await client.close()

    asyncio.run(check())


@pytest.mark.cluster(env=AUTH_ENV)
async def test_a_role_without_produce_permission_is_refused_at_commit(cluster):
    """Authentication on: the application's database role acts as Magnetar role
    `writer`.  Its producer was created while it held `produce`; the grant is revoked
    before the block ends (a plain producer would go on until it closed): the commit is
    refused and nothing becomes visible.  A database role mapped to another Magnetar role
    cannot commit `writer`'s transactions at all."""
    admin = Admin(cluster.admin_url)
    admin.ok("PUT", "/admin/v2/tenants/acme")
    admin.ok("PUT", "/admin/v2/namespaces/acme/app")
    admin.ok("POST", "/admin/v2/namespaces/acme/app/permissions/writer", ["produce", "consume"])
    app, other = App(cluster, uuid.uuid4().hex[:10]), App(cluster, uuid.uuid4().hex[:10])
    await app.create(magnetar_role="writer", trusted=False)
    await other.create(magnetar_role="reader", trusted=False)
    events = "persistent://acme/app/events"
    client = aio.Client(",".join(cluster.broker_urls), auth_token=token("writer"))
    conn = await asyncpg.connect(app.url)
    other_conn = await asyncpg.connect(other.url)
    try:
        async with magnetar.pg.transaction(conn, client) as tx:  # granted: commits
            await tx.send(events, b'{"order": "granted"}')
        with pytest.raises(magnetar.AuthorizationError, match="lacks produce on persistent://acme/app/events"):
            async with magnetar.pg.transaction(conn, client) as tx:
                await conn.execute(f"INSERT INTO {app.effects} VALUES ('revoked')")
                await tx.send(events, b'{"order": "revoked"}')
                status, _ = admin.call("DELETE", "/admin/v2/namespaces/acme/app/permissions/writer")
                assert status == 204
        with pytest.raises(magnetar.AuthorizationError, match="does not own"):
            async with magnetar.pg.transaction(other_conn, client) as tx:
                await other_conn.execute(f"INSERT INTO {other.effects} VALUES ('not-mine')")
        assert await app.fetch(f"SELECT * FROM {app.effects}") == []
        assert await other.fetch(f"SELECT * FROM {other.effects}") == []
        admin_client = aio.Client(",".join(cluster.broker_urls), auth_token=token("admin"))
        try:
            assert await _events(admin_client, events, 1) == ["granted"]
        finally:
            await admin_client.close()
    finally:
        await conn.close()
        await other_conn.close()
        await client.close()


async def test_cumulative_acks_commit_with_the_rows_and_a_rollback_rewinds(cluster, app, aclient):
    orders = f"orders-{app.tag}"
    producer = await aclient.create_producer(orders)
    for i in range(4):
        await producer.send(_order(f"o{i}", "acct", 10 ** i))
    consumer = await aclient.subscribe(orders, "billing", consumer_type=magnetar.ConsumerType.Failover,
                                       initial_position=magnetar.InitialPosition.Earliest)
    conn = await asyncpg.connect(app.url)
    try:
        first = [await consumer.receive(timeout_millis=30000) for _ in range(2)]
        with pytest.raises(RuntimeError):
            async with magnetar.pg.transaction(conn, aclient) as tx:
                for msg in first:
                    await conn.execute(f"INSERT INTO {app.effects} VALUES ($1)", json.loads(msg.data())["id"])
                await tx.acknowledge_cumulative(first[-1])
                raise RuntimeError("rolled back")
        # The abort rewinds the consumer: o0 and o1 come again, then the rest.
        batch = [await consumer.receive(timeout_millis=30000) for _ in range(4)]
        assert [json.loads(m.data())["id"] for m in batch] == ["o0", "o1", "o2", "o3"]
        async with magnetar.pg.transaction(conn, aclient) as tx:
            for msg in batch:
                await conn.execute(f"INSERT INTO {app.effects} VALUES ($1)", json.loads(msg.data())["id"])
            await tx.acknowledge_cumulative(batch[-1])
        with pytest.raises(magnetar.Timeout):
            await consumer.receive(timeout_millis=1500)
    finally:
        await conn.close()
    rows = await app.fetch(f"SELECT order_id FROM {app.effects} ORDER BY order_id")
    assert [r[0] for r in rows] == ["o0", "o1", "o2", "o3"]
    await consumer.close()
    again = await aclient.subscribe(orders, "billing", consumer_type=magnetar.ConsumerType.Failover)
    with pytest.raises(magnetar.Timeout):  # durable: a new consumer starts after o3
        await again.receive(timeout_millis=1500)


def test_psycopg_refusal_is_the_clients_error(cluster, app):
    """A block that outlives its transaction's timeout: the commit is refused with
    InvalidTxnStatusError and the psycopg transaction rolled back."""
    import time

    client = magnetar.Client(",".join(cluster.broker_urls))
    try:
        with psycopg.connect(app.url) as conn:
            with pytest.raises(magnetar.InvalidTxnStatusError):
                with magnetar.pg.transaction(conn, client, timeout_ms=300):
                    conn.execute(f"INSERT INTO {app.effects} VALUES ('late')")
                    time.sleep(1.5)
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            assert conn.execute(f"SELECT count(*) FROM {app.effects}").fetchone() == (0,)
    finally:
        client.close()


@pytest.mark.cluster(brokers=1, coordinator_in_broker=True)
async def test_with_the_coordinator_in_the_broker(cluster, app, aclient):
    """The deployment where a small transaction would be kept for a one-request commit
    (issue 26) and its end made in one phase: a block still stores its sends and makes
    its acks pending before the application's commit decision, and is finished."""
    orders, events = f"orders-{app.tag}", f"events-{app.tag}"
    producer = await aclient.create_producer(orders)
    for i in range(5):
        await producer.send(_order(f"o{i}", "acct", 1))
    consumer = await aclient.subscribe(orders, "billing", consumer_type=magnetar.ConsumerType.Shared,
                                       initial_position=magnetar.InitialPosition.Earliest)
    conn = await asyncpg.connect(app.url)
    try:
        for _ in range(5):
            msg = await consumer.receive(timeout_millis=30000)
            async with magnetar.pg.transaction(conn, aclient) as tx:
                await _apply(conn, app, tx, msg, events)
        with pytest.raises(magnetar.Timeout):
            await consumer.receive(timeout_millis=1500)
    finally:
        await conn.close()
    assert await app.balance("acct") == 5
    assert sorted(await _events(aclient, events, 5)) == [f"o{i}" for i in range(5)]


def test_a_block_at_repeatable_read_is_refused_and_redelivered(cluster, app):
    """The commit decision reads what Magnetar registered during the block, which a
    REPEATABLE READ snapshot cannot see: refused (BadRequest naming READ COMMITTED), the
    rows rolled back, the message redelivered."""
    orders = f"orders-{app.tag}"
    client = magnetar.Client(",".join(cluster.broker_urls))
    try:
        client.create_producer(orders).send(_order("o1", "acct", 1))
        consumer = client.subscribe(orders, "billing", consumer_type=magnetar.ConsumerType.Shared,
                                    initial_position=magnetar.InitialPosition.Earliest)
        msg = consumer.receive(timeout_millis=30000)
        with psycopg.connect(app.url) as conn:
            conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
            with pytest.raises(magnetar.BadRequest, match="READ COMMITTED"):
                with magnetar.pg.transaction(conn, client) as tx:
                    conn.execute(f"INSERT INTO {app.effects} VALUES ('o1')")
                    tx.acknowledge(msg, consumer)
                    tx.send(f"events-{app.tag}", b"o1")
            assert conn.execute(f"SELECT count(*) FROM {app.effects}").fetchone() == (0,)
        again = consumer.receive(timeout_millis=30000)
        assert again.message_id() == msg.message_id() and again.redelivery_count() == 1
    finally:
        client.close()


# A worker process of the commit-order test: each block takes the next number from a
# shared counter row (the row lock orders the blocks' COMMITs) and sends it.
ORDERED_WORKER = """
import asyncio, sys
import asyncpg
import magnetar.asyncio as aio, magnetar.pg

service, app_url, counter, events, blocks = sys.argv[1:6]

async def main():
    client = aio.Client(service)
    conn = await asyncpg.connect(app_url)
    for _ in range(int(blocks)):
        async with magnetar.pg.transaction(conn, client) as tx:
            n = await conn.fetchval(f"UPDATE {counter} SET n = n + 1 RETURNING n")
            await tx.send(events, str(n).encode())
    await conn.close()
    await client.close()

asyncio.run(main())
"""


@pytest.mark.parametrize("deployment", [
    "coordinator-process",
    pytest.param("coordinator-in-broker", marks=pytest.mark.cluster(brokers=1, coordinator_in_broker=True)),
])
async def test_blocks_of_different_processes_are_delivered_in_commit_order(cluster, app, aclient, tmp_path,
                                                                          deployment):
    """Three processes commit blocks to one partition concurrently; each block's number is
    its place in the SQL COMMIT order (a counter row it updates).  Consumers get the
    numbers in that order, with no gap and none twice, whichever coordinator request
    finished which block first (two-phase, or one phase in the hosting broker)."""
    import sys

    events, counter, processes, blocks = f"events-{app.tag}", f"counter_{app.tag}", 3, 40
    conn = await asyncpg.connect(app.admin_url)
    try:
        await conn.execute(f"CREATE TABLE {counter} (n bigint NOT NULL)")
        await conn.execute(f"INSERT INTO {counter} VALUES (0)")
        await conn.execute(f'GRANT SELECT, UPDATE ON {counter} TO "{app.role}"')
    finally:
        await conn.close()
    script = tmp_path / "worker.py"
    script.write_text(ORDERED_WORKER)
    service = ",".join(cluster.broker_urls)
    procs = [await asyncio.create_subprocess_exec(
        sys.executable, str(script), service, app.url, counter, events, str(blocks),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT) for _ in range(processes)]
    try:
        outputs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), 120)
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()
    assert all(p.returncode == 0 for p in procs), [o.decode()[-2000:] for o, _ in outputs]
    reader = await aclient.create_reader(events, magnetar.MessageId.earliest)
    try:
        got = [int((await reader.read_next(timeout_millis=30000)).data()) for _ in range(processes * blocks)]
        with pytest.raises(magnetar.Timeout):
            await reader.read_next(timeout_millis=1000)
    finally:
        await reader.close()
    assert got == list(range(1, processes * blocks + 1))
