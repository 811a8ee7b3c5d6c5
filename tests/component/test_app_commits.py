"""Transactions an application's SQL transaction committed (magnetar_app.commit_transaction,
docs/exactly-once-postgres.md), finished by a coordinator hosted by the broker, in
process against real PostgreSQL: told by the notification at the application's COMMIT,
or found by the timeout loop past the deadline, which finishes them and never aborts."""

from __future__ import annotations

import asyncio

from magnetar_coordinator import metrics as coordinator_metrics
from magnetar_protocol import magnetar_pb2 as pb
from tests.component import conftest
from tests.component.conftest import new_txn
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
