"""A broker whose lease on a partition moved to another broker (a higher lease epoch),
in process against real PostgreSQL: every kind of write it still tries fails, stores
nothing, and makes it stop serving the partition, so its next request reloads from the
database (or finds the new owner).  Also ``PartitionLog.lease_checked`` itself, the one
check those writes share (formerly a unit test on a stand-in log)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pytest

from magnetar_broker.partition.trimpace import TrimBudget
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import NotOwner
from magnetar_protocol.policies import Retention
from tests.component.conftest import Broker, at, new_txn

TOPIC = "persistent://public/default/lease"


@dataclass
class Former:
    """The former owner, what it had open, and the database as the new owner left it."""

    broker: Broker
    producer: int
    consumer: int
    coordinator: object
    pool: object

    async def state(self) -> list:
        """Every row a write of the former owner could change."""
        queries = ("SELECT entry_id FROM entries ORDER BY 1",
                   "SELECT subscription, mark_delete_entry, acked_state FROM subscriptions ORDER BY 1",
                   "SELECT topic_epoch, terminated_entry FROM topic_owners",
                   "SELECT entry_id, txn_least FROM pending_acks", "SELECT seq FROM txn_entries",
                   "SELECT producer_name, last_sequence_id FROM producer_sequences ORDER BY 1")
        return [[tuple(r) for r in await self.pool.fetch(q)] for q in queries]


async def _send_in_txn(f: Former) -> None:
    await f.broker.send(f.producer, b"txn", first_seq=2, txn=await new_txn(f.coordinator))


async def _ack_in_txn(f: Former) -> None:
    await f.broker.ack(f.consumer, 1, txn=await new_txn(f.coordinator))


async def _trim(f: Former) -> None:
    lifecycle = f.broker.service.lifecycle
    lifecycle.min_age_ms = 0  # entry 0 is acknowledged: nothing but the lease keeps it
    await lifecycle.trim(f.broker.service.ownership.logs[TOPIC], Retention(), TrimBudget(lifecycle.pace))


WRITES: dict[str, Callable[[Former], Awaitable[object]]] = {
    "send": lambda f: f.broker.send(f.producer, b"late", first_seq=2),
    "send in a transaction": _send_in_txn,
    "ack": lambda f: f.broker.ack(f.consumer, 1),
    "cumulative ack": lambda f: f.broker.ack(f.consumer, 1, cumulative=True),
    "batch-index ack": lambda f: f.broker.ack(f.consumer, at(1, 0)),
    "ack in a transaction": _ack_in_txn,
    "seek": lambda f: f.broker.seek(f.consumer, at(1)),
    "open a subscription": lambda f: f.broker.subscribe(TOPIC, "new"),
    "exclusive producer": lambda f: f.broker.producer(TOPIC, "x", pb.ACCESS_EXCLUSIVE_WITH_FENCING),
    "terminate": lambda f: f.broker.service.backlog_ops.terminate(TOPIC),
    "unsubscribe": lambda f: f.broker.close(f.consumer, unsubscribe=True),
    "trim": _trim,
}


@pytest.mark.parametrize("write", list(WRITES))
async def test_every_write_of_a_broker_whose_lease_moved_fails_and_stores_nothing(
        broker, coordinator, make_broker, pool, write):
    consumer = await broker.subscribe(TOPIC, "s")
    producer = await broker.producer(TOPIC, "p")
    await broker.send(producer, b"m0", first_seq=0)
    await broker.send(producer, b"m1", first_seq=1)
    assert len(await broker.fetch(consumer)) == 2
    await broker.ack(consumer, 0)
    former = Former(broker, producer, consumer, coordinator, pool)
    new_owner = await make_broker(broker_id="b-new")
    await new_owner.take_over(TOPIC)
    before = await former.state()

    with pytest.raises(NotOwner):
        await WRITES[write](former)
    assert TOPIC not in broker.service.ownership.logs  # it stopped serving the partition
    assert broker.service.producers == {} and broker.service.consumers == {}  # and dropped its clients
    assert await former.state() == before
    assert await pool.fetchval("SELECT broker_id FROM topic_owners") == "b-new"


async def test_the_heartbeat_drops_a_partition_whose_lease_moved(broker, make_broker):
    await broker.subscribe(TOPIC, "s")
    await (await make_broker(broker_id="b-new")).take_over(TOPIC)
    await broker.service.ownership.heartbeat_once()
    assert TOPIC not in broker.service.ownership.logs and broker.service.consumers == {}


# ---------------------------------------------------------------- lease_checked

async def _returns(value):
    return value


async def _fails():
    raise ConnectionError("server closed the connection")


def _lost(caplog) -> list[str]:
    """Why the partition stopped being served (the log line losing it writes)."""
    prefix = f"stopped serving {TOPIC}: "
    return [m.removeprefix(prefix) for m in caplog.messages if m.startswith(prefix)]


async def test_an_owned_write_returns_its_result_and_keeps_serving(broker, caplog):
    log = await broker.partition(TOPIC)
    with caplog.at_level(logging.WARNING, "magnetar.broker.topic"):
        assert await log.lease_checked("saving", _returns((True, ["answer"])),
                                       owned=lambda r: r[0]) == (True, ["answer"])
    assert not log.closed and _lost(caplog) == []


async def test_a_fenced_write_stops_serving_and_raises_not_owner(broker, caplog):
    log = await broker.partition(TOPIC)
    with caplog.at_level(logging.WARNING, "magnetar.broker.topic"), \
            pytest.raises(NotOwner, match="no longer served"):
        await log.lease_checked("ending transactions", _returns(False))
    assert _lost(caplog) == ["fenced while ending transactions"]


async def test_a_failed_write_stops_serving_and_raises_its_error(broker, caplog):
    log = await broker.partition(TOPIC)
    with caplog.at_level(logging.WARNING, "magnetar.broker.topic"), pytest.raises(ConnectionError):
        await log.lease_checked("recording transactional acks", _fails())
    assert log.closed and _lost(caplog)[0].startswith("recording transactional acks failed: server closed")
