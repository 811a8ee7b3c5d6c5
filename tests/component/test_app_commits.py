"""Transactions an application's SQL transaction committed (magnetar_app.commit_transaction,
docs/exactly-once-postgres.md), finished by a coordinator hosted by the broker, in
process against real PostgreSQL: told by the notification at the application's COMMIT,
or found by the timeout loop past the deadline, which finishes them and never aborts."""

from __future__ import annotations

import asyncio

from magnetar_broker.api import txn_handlers
from magnetar_coordinator import metrics as coordinator_metrics
from magnetar_coordinator.service import CoordinatorService
from magnetar_coordinator.settings import CoordinatorSettings
from magnetar_protocol import magnetar_pb2 as pb
from tests.component import conftest
from tests.component.conftest import BROKER_URL, new_txn, payloads
from tests.waiting import async_wait_until

TOPIC = "persistent://public/default/component-app-commit"
coordinator = conftest.coordinator


async def _committed_by_the_app(broker, coordinator, pool, timeout_ms: int):
    """A transaction with a send and an ack, committed by an application's SQL
    transaction (the test's own database role, mapped as trusted)."""
    consumer = await broker.subscribe(TOPIC, "s")
    producer = await broker.producer(TOPIC, "p")
    await broker.send(producer, b"first", first_seq=0)
    [first] = await broker.fetch(consumer)
    txn = await new_txn(coordinator, timeout_ms)
    await broker.send(producer, b"second", first_seq=1, txn=txn)
    await broker.ack(consumer, first.entry_id, txn=txn)
    await pool.execute("SELECT magnetar_app.grant_app_role(session_user, 'anonymous', true)")
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("SELECT magnetar_app.commit_transaction($1, $2)", txn.most_bits, txn.least_bits)
    return consumer, first, txn


async def _wait_committed(pool, committed_before: float) -> None:
    await async_wait_until(lambda: coordinator_metrics.COMMITTED._value.get() > committed_before,
                           30, "the application's commit finished", interval=0.02)
    assert await pool.fetchval("SELECT status FROM transactions") == pb.TXN_COMMITTED


async def _check_applied(broker, pool, consumer, first) -> None:
    [marker] = await broker.fetch(consumer)
    assert pb.MessageBatch.FromString(marker.batch).messages[0].payload == b"second"
    assert await pool.fetchval("SELECT mark_delete_entry FROM subscriptions WHERE subscription = 's'") \
        == first.entry_id


async def test_the_notification_at_the_apps_commit_has_it_finished_in_one_phase(broker, coordinator, pool):
    # The coordinator's own loop takes its LISTEN connection once it serves its TCID.
    await async_wait_until(lambda: coordinator._app_commits is not None, 30, "the LISTEN connection")
    one_phase = coordinator_metrics.ONE_PHASE._value.get()
    committed = coordinator_metrics.COMMITTED._value.get()
    consumer, first, _ = await _committed_by_the_app(broker, coordinator, pool, 60000)
    await _wait_committed(pool, committed)
    assert coordinator_metrics.ONE_PHASE._value.get() == one_phase + 1
    await _check_applied(broker, pool, consumer, first)


async def test_the_timeout_loop_finishes_an_app_commit_it_was_never_told_of(broker, coordinator, pool):
    # Nobody listens (the notification lost: a broken LISTEN connection, say); the
    # timeout loop's pass is run by hand below.
    await coordinator.app_commits_loop.stop()
    await coordinator.timeout_loop.stop()
    if coordinator._app_commits is not None:
        await coordinator._app_commits.close()
        coordinator._app_commits = None
    committed = coordinator_metrics.COMMITTED._value.get()
    consumer, first, _ = await _committed_by_the_app(broker, coordinator, pool, 200)
    await asyncio.sleep(0.3)  # past the deadline
    assert await pool.fetchval("SELECT status FROM transactions") == pb.TXN_COMMITTING
    await coordinator.abort_expired()
    await _wait_committed(pool, committed)
    await _check_applied(broker, pool, consumer, first)


def _serve_the_broker_in_process(broker, coordinator) -> None:
    """The coordinator's two-phase calls (lookups, EndTxnOn*) reach ``broker``'s handlers
    in this process, as they reach a broker's routes over HTTP."""
    txn = txn_handlers(broker.service)

    async def lookup(req: pb.LookupRequest) -> pb.LookupResponse:
        found = await broker.service.lookup(req.topic, req.listener_name)
        return pb.LookupResponse(topic=found.topic, broker_url=found.url, broker_id=found.broker_id)

    coordinator.rpc.serve_locally(BROKER_URL, {
        "/v1/topics/lookup": lookup,
        "/v1/txn/end-on-partition": txn.end_on_partition,
        "/v1/txn/end-on-subscription": txn.end_on_subscription,
        "/v1/txn/end-on-participants": txn.end_on_participants,
    }, "")


async def _nobody_told(coordinator) -> None:
    """No notification and no timeout pass finishes anything: only the calls a test makes."""
    await coordinator.app_commits_loop.stop()
    await coordinator.timeout_loop.stop()
    if coordinator._app_commits is not None:
        await coordinator._app_commits.close()
        coordinator._app_commits = None


async def test_an_app_commit_is_delivered_after_the_earlier_one_whoever_finishes_first(broker, coordinator, pool):
    # Two applications commit blocks that sent to one partition, first then second (SQL
    # COMMIT order).  The second's EndTxn comes first (the first's application died after
    # its COMMIT, its notification not yet handled): the second's markers must still come
    # after the first's, so consumers see the partition in commit order.
    await _nobody_told(coordinator)
    _serve_the_broker_in_process(broker, coordinator)
    consumer = await broker.subscribe(TOPIC, "s")
    producer = await broker.producer(TOPIC, "p")
    first, second = await new_txn(coordinator), await new_txn(coordinator)
    await broker.send(producer, b"first", first_seq=0, txn=first)
    await broker.send(producer, b"second", first_seq=1, txn=second)
    await pool.execute("SELECT magnetar_app.grant_app_role(session_user, 'anonymous', true)")
    for txn in (first, second):
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT magnetar_app.commit_transaction($1, $2)", txn.most_bits, txn.least_bits)
    one_phase = coordinator_metrics.ONE_PHASE._value.get()
    await coordinator.end(pb.EndTxnRequest(txn=second, action=pb.TXN_COMMIT))
    assert payloads(await broker.fetch(consumer)) == [b"first", b"second"]
    assert coordinator_metrics.ONE_PHASE._value.get() == one_phase  # not ahead of the first
    status = "SELECT status FROM transactions WHERE txn_id = $1"
    assert await pool.fetchval(status, second.least_bits) == pb.TXN_COMMITTED
    # The first's own finish comes later: its marker is already written, nothing twice.
    assert await pool.fetchval(status, first.least_bits) == pb.TXN_COMMITTING
    await coordinator.end(pb.EndTxnRequest(txn=first, action=pb.TXN_COMMIT))
    assert await pool.fetchval(status, first.least_bits) == pb.TXN_COMMITTED
    assert await broker.fetch(consumer) == []


def _count_calls(obj, name: str) -> list[object]:
    """Record each call of ``obj.name`` (still calling it): its arguments."""
    calls: list[object] = []
    real = getattr(obj, name)

    async def counted(*args, **kwargs):
        calls.append((args, kwargs))
        return await real(*args, **kwargs)

    setattr(obj, name, counted)
    return calls


async def test_the_notification_and_the_clients_end_txn_at_once_share_one_attempt(broker, coordinator, pool):
    # Both are told at the application's COMMIT; a second attempt would hold the
    # broker's writers, wait for the first one's row lock and roll back, then try the
    # OPEN compare-and-sets, all to find the transaction finished.
    await coordinator.app_commits_loop.stop()  # the notification is sent by hand below
    one_phase = coordinator_metrics.ONE_PHASE._value.get()
    committed = coordinator_metrics.COMMITTED._value.get()
    consumer, first, txn = await _committed_by_the_app(broker, coordinator, pool, 60000)
    attempts = _count_calls(coordinator.store, "start_endings_in")
    open_cas = _count_calls(coordinator.store, "start_ending")
    await asyncio.gather(coordinator.end(pb.EndTxnRequest(txn=txn, action=pb.TXN_COMMIT)),
                         coordinator._finish_app_commit(txn.least_bits))
    assert len(attempts) == 1 and open_cas == []
    assert coordinator_metrics.ONE_PHASE._value.get() == one_phase + 1
    await _wait_committed(pool, committed)
    await _check_applied(broker, pool, consumer, first)
    # Finished: a later EndTxn (a client's retry) answers from the record.
    await coordinator.end(pb.EndTxnRequest(txn=txn, action=pb.TXN_COMMIT))
    assert coordinator._committing == {}


async def test_an_app_commit_heard_of_tries_no_compare_and_set_from_open(broker, coordinator, pool):
    # The notification (and the timeout loop) only tell of COMMITTING transactions: the
    # one-phase end locks it as it is, and the two-phase path reads its record at once.
    await coordinator.app_commits_loop.stop()
    await pool.execute("SELECT magnetar_app.grant_app_role(session_user, 'anonymous', true)")
    two_phase = CoordinatorService(
        coordinator.store, CoordinatorSettings(database_url="postgresql://unused", coordinator_id=0,
                                               one_phase_commit=False))
    two_phase.ready = True  # acting for the fixture's claim (nothing is started)
    for service in (coordinator, two_phase):
        committed = coordinator_metrics.COMMITTED._value.get()
        txn = await new_txn(coordinator)  # nothing sent or acknowledged: no participant to tell
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute("SELECT magnetar_app.commit_transaction($1, $2)", txn.most_bits, txn.least_bits)
        open_cas = _count_calls(coordinator.store, "start_ending")
        moved = _count_calls(coordinator.store, "start_endings_in")
        await service._finish_app_commit(txn.least_bits)
        assert coordinator_metrics.COMMITTED._value.get() == committed + 1
        assert await pool.fetchval("SELECT status FROM transactions WHERE txn_id = $1",
                                   txn.least_bits) == pb.TXN_COMMITTED
        assert open_cas == [] and all(kwargs.get("decided") for _, kwargs in moved)
        del coordinator.store.start_ending, coordinator.store.start_endings_in
    await two_phase.rpc.close()
