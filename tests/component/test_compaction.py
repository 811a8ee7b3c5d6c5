"""Topic compaction in process against real PostgreSQL: the compactor's two passes and
its switch, readers of the compacted view then the tail, transactions (committed
messages compacted, aborted never, open ones later), trimming (the view outlives the
log), a second run over the first's view, and a run that dies half way."""

from __future__ import annotations

import pytest

from magnetar_broker.commands import Fetch, Position, Subscribe
from magnetar_broker.partition.sends import Batch
from magnetar_broker.partition.trimpace import TrimBudget
from magnetar_broker.txnend import LocalEnds
from magnetar_coordinator.service import CoordinatorService
from magnetar_coordinator.settings import CoordinatorSettings
from magnetar_coordinator.store import CoordinatorStore
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import NotAllowedError
from magnetar_protocol.policies import Retention
from magnetar_protocol.topics import TopicName
from magnetar_protocol.txnid import TxnID

TOPIC = "persistent://public/default/compaction"


def keyed(*messages: tuple[str | None, bytes | None], first_seq: int = 0) -> tuple[bytes, int, int, int]:
    """A batch of (key, value) messages; a None value is a tombstone (a null value)."""
    out = []
    for i, (key, value) in enumerate(messages):
        m = pb.SingleMessage(payload=value or b"", sequence_id=first_seq + i, null_value=value is None)
        if key is not None:
            m.partition_key = key
        out.append(m)
    return pb.MessageBatch(messages=out).SerializeToString(), len(out), first_seq, first_seq + len(out) - 1


class Producer:
    def __init__(self, broker, producer_id: int) -> None:
        self.broker, self.producer_id, self.seq = broker, producer_id, 0

    async def send(self, *messages: tuple[str | None, bytes | None], txn: pb.TxnId | None = None) -> None:
        data, n, lowest, highest = keyed(*messages, first_seq=self.seq)
        self.seq += n
        [result] = await self.broker.service.publish(self.broker.session, [Batch(
            self.producer_id, data, n, lowest, highest, txn=None if txn is None else TxnID.from_wire(txn))])
        if isinstance(result, Exception):
            raise result


async def read_all(broker, read_compacted: bool, start_entry: int = 0) -> list[tuple[str | None, bytes]]:
    """Everything a reader from ``start_entry`` gets: (key, value) in order."""
    consumer = await broker.service.subscribe(Subscribe(
        session_id=broker.session, topic=TOPIC, subscription="", sub_type=pb.SUB_EXCLUSIVE, durable=False,
        start=Position(start_entry),
        start_inclusive=True, read_compacted=read_compacted))
    got = []
    while True:
        fetched = await broker.service.fetch(Fetch(consumer_id=consumer.consumer_id, session_id=broker.session,
                                                   max_messages=1000))
        if not fetched.entries:
            return got
        for entry in fetched.entries:
            messages = pb.MessageBatch.FromString(entry.batch).messages
            for i in (entry.indices or range(len(messages))):
                m = messages[i]
                got.append((m.partition_key if m.HasField("partition_key") else None, m.payload))


async def compact(broker) -> None:
    plog = await broker.partition(TOPIC)
    await broker.service.compactor.run(plog)


async def test_a_reader_with_read_compacted_sees_the_latest_of_each_key_then_the_tail(broker, pool):
    p = Producer(broker, await broker.producer(TOPIC, "p"))
    await p.send(("a", b"a1"), ("b", b"b1"), (None, b"keyless"), ("d", b"d1"))
    await p.send(("a", b"a2"), ("c", b"c1"))
    await p.send(("b", None))                      # a tombstone: b is gone
    await compact(broker)
    await p.send(("a", b"a3"))                     # after the horizon: the tail, whole
    assert await read_all(broker, read_compacted=True) == [("d", b"d1"), ("a", b"a2"), ("c", b"c1"), ("a", b"a3")]
    # Without read_compacted a reader gets every message, as before.
    assert [v for _, v in await read_all(broker, read_compacted=False)] == \
        [b"a1", b"b1", b"keyless", b"d1", b"a2", b"c1", b"", b"a3"]
    status = await broker.service.compaction_status(TopicName.parse(TOPIC))
    assert status == {"status": "SUCCESS", "lastError": ""}
    # The view holds the one entry that keeps messages, its batch indices intact.
    rows = await pool.fetch("SELECT entry_id, kept FROM compacted_entries ORDER BY entry_id")
    assert [(r[0], list(r[1])) for r in rows] == [(0, [3]), (1, [0, 1])]


async def test_a_second_run_compacts_the_first_ones_view_with_the_new_messages(broker, pool):
    p = Producer(broker, await broker.producer(TOPIC, "p"))
    await p.send(("a", b"a1"), ("b", b"b1"))
    await compact(broker)
    await p.send(("a", None), ("c", b"c1"))
    await compact(broker)
    assert await read_all(broker, read_compacted=True) == [("b", b"b1"), ("c", b"c1")]
    # Only the view's generation is left.
    assert [tuple(r) for r in await pool.fetch("SELECT DISTINCT generation FROM compacted_entries")] == [(2,)]
    assert await pool.fetchval("SELECT horizon FROM compactions") == 2


async def test_only_committed_messages_are_compacted(broker, pool, database_url):
    settings = CoordinatorSettings(database_url=database_url, coordinator_id=0)
    coordinator = CoordinatorService(CoordinatorStore(pool, 0, "component"), settings,
                                     local=LocalEnds(broker.service.ownership))
    await coordinator.claim_or_heartbeat()
    try:
        p = Producer(broker, await broker.producer(TOPIC, "p"))
        await p.send(("a", b"a1"), ("b", b"b1"))
        committed = (await coordinator.new_txn(pb.NewTxnRequest(timeout_ms=60000))).txn
        aborted = (await coordinator.new_txn(pb.NewTxnRequest(timeout_ms=60000))).txn
        still_open = (await coordinator.new_txn(pb.NewTxnRequest(timeout_ms=60000))).txn
        await p.send(("a", b"a-committed"), txn=committed)
        await p.send(("b", b"b-aborted"), txn=aborted)
        await p.send(("c", b"c-open"), txn=still_open)
        await coordinator.end(pb.EndTxnRequest(txn=committed, action=pb.TXN_COMMIT))
        await coordinator.end(pb.EndTxnRequest(txn=aborted, action=pb.TXN_ABORT))
        await compact(broker)
        assert await read_all(broker, read_compacted=True) == [("b", b"b1"), ("a", b"a-committed")]
        # The open transaction commits after the run: its message is in the tail.
        await coordinator.end(pb.EndTxnRequest(txn=still_open, action=pb.TXN_COMMIT))
        assert (await read_all(broker, read_compacted=True))[-1] == ("c", b"c-open")
    finally:
        await coordinator.stop()


async def test_the_view_outlives_retention_and_what_is_past_it_stays(broker, pool):
    p = Producer(broker, await broker.producer(TOPIC, "p"))
    for i in range(4):
        await p.send((f"k{i % 2}", f"v{i}".encode()))
    await compact(broker)
    await p.send(("k0", b"v4"))
    await p.send(("k1", b"v5"))
    plog = await broker.partition(TOPIC)
    lifecycle = broker.service.lifecycle
    lifecycle.min_age_ms = 0   # no minimum age (MAGNETAR_TRIM_MIN_AGE_S): trim what retention lets go
    # Retention keeps nothing acknowledged (no subscription: nothing is unacknowledged).
    await lifecycle.trim(plog, Retention(0, 0), TrimBudget(lifecycle.pace))
    # The log below the horizon went; what is past it is not compacted yet and stays.
    assert [r[0] for r in await pool.fetch("SELECT entry_id FROM entries ORDER BY entry_id")] == [4, 5]
    assert await read_all(broker, read_compacted=True) == [("k0", b"v2"), ("k1", b"v3"), ("k0", b"v4"),
                                                           ("k1", b"v5")]


async def test_a_run_that_dies_half_way_leaves_the_previous_view_and_the_next_run_finishes(broker, pool):
    p = Producer(broker, await broker.producer(TOPIC, "p"))
    await p.send(("a", b"a1"), ("b", b"b1"))
    await compact(broker)
    await p.send(("a", b"a2"))
    plog = await broker.partition(TOPIC)
    compactor = broker.service.compactor
    real_finish = plog.store.finish_compaction

    async def dies(*args, **kwargs):
        raise ConnectionError("the database went away before the switch")
    plog.store.finish_compaction = dies
    with pytest.raises(ConnectionError):
        await compactor.run(plog)
    plog.store.finish_compaction = real_finish
    # A failed write loses the partition (outcome unknown); half written, never
    # switched: readers keep the previous view.
    assert plog.closed
    assert [tuple(r) for r in await pool.fetch(
        "SELECT generation, count(*) FROM compacted_entries GROUP BY 1 ORDER BY 1")] == [(1, 1), (2, 2)]
    assert (await read_all(broker, read_compacted=True)) == [("a", b"a1"), ("b", b"b1"), ("a", b"a2")]
    plog = await broker.partition(TOPIC)   # served again, from the database
    assert compactor.status(plog)["status"] == "ERROR" and "interrupted" in compactor.status(plog)["lastError"]
    await compactor.run(plog)
    assert await read_all(broker, read_compacted=True) == [("b", b"b1"), ("a", b"a2")]
    assert [tuple(r) for r in await pool.fetch("SELECT DISTINCT generation FROM compacted_entries")] == [(2,)]


async def test_read_compacted_is_refused_on_shared_subscriptions(broker):
    await broker.partition(TOPIC)
    with pytest.raises(NotAllowedError, match="Exclusive and Failover"):
        await broker.service.subscribe(Subscribe(session_id=broker.session, topic=TOPIC, subscription="s",
                                                 sub_type=pb.SUB_SHARED, durable=True, read_compacted=True))
