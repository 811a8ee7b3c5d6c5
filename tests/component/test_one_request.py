"""One-request transactions, the broker's side, in process against real PostgreSQL: a
coordinator hosted by the broker (CoordinatorService with the broker's OneRequestEnds
behind its LocalOneRequest protocol) commits a transaction whose sends travel with its
commit and whose acks the broker held since acknowledge(), in one SQL transaction
(docs/transactions.md, "One-request transactions")."""

from __future__ import annotations

import asyncio

import pytest

from magnetar_broker import metrics as broker_metrics
from magnetar_broker.commands import Ack, Position, Redeliver
from magnetar_broker.onerequest import OneRequestEnds
from magnetar_broker.txnend import LocalEnds
from magnetar_coordinator.service import CoordinatorService
from magnetar_coordinator.settings import CoordinatorSettings
from magnetar_coordinator.store import CoordinatorStore
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import (
    ExpiredTransactionError,
    InvalidTxnStatusError,
    NotOwner,
    TransactionConflict,
    TransactionHasOperationFailed,
)
from magnetar_protocol.txnid import TxnID
from tests.component.conftest import batch

IN = "persistent://public/default/component-one-request-in"
OUT = "persistent://public/default/component-one-request-out"


@pytest.fixture
async def coordinator(broker, pool, database_url):
    settings = CoordinatorSettings(database_url=database_url, coordinator_id=0)
    store = CoordinatorStore(pool, 0, "component")
    service = broker.service
    one_request = OneRequestEnds(service.ownership, service.store, service.authz, service.producer,
                                 service.settings.max_batch_messages)
    coordinator = CoordinatorService(store, settings, local=LocalEnds(service.ownership),
                                     one_request=one_request)
    service.holds_acks = True
    await coordinator.claim_or_heartbeat()
    assert coordinator.ready
    yield coordinator
    await coordinator.stop()


async def _new_txn(coordinator) -> pb.TxnId:
    return (await coordinator.new_txn(pb.NewTxnRequest(timeout_ms=60000))).txn


async def _hold(broker, consumer: int, entry_id: int, txn: pb.TxnId, cumulative: bool = False) -> None:
    """A one-request transaction's ack: held by the broker, nothing written."""
    await broker.service.ack(Ack(consumer_id=consumer, session_id=broker.session,
                                 positions=(Position(entry_id),), cumulative=cumulative,
                                 txn=TxnID.from_wire(txn), hold_ms=60000))


def _commit(txn: pb.TxnId, sends=(), acks=(), action=pb.TXN_COMMIT) -> pb.EndTxnOneRequestRequest:
    return pb.EndTxnOneRequestRequest(txn=txn, action=action, sends=list(sends), acks=list(acks))


def _send(broker, producer: int, *payloads: bytes, first_seq: int = 0, topic: str = OUT) -> pb.KeptSend:
    data, n, lowest, highest = batch(*payloads, first_seq=first_seq)
    return pb.KeptSend(topic=topic, producer_id=producer, session_id=broker.session, batch=data,
                       num_messages=n, sequence_id=lowest, highest_sequence_id=highest)


def _acks(entry_id: int, topic: str = IN, subscription: str = "s") -> pb.HeldAcks:
    return pb.HeldAcks(topic=topic, subscription=subscription, positions=[pb.Position(entry_id=entry_id,
                                                                                       batch_index=-1)])


async def _consume_one(broker) -> tuple[int, int, int]:
    """A consumer on IN with one message fetched, and a producer on OUT: (consumer,
    fetched entry id, producer)."""
    source = await broker.producer(IN, "source")
    await broker.send(source, b"in", first_seq=0)
    consumer = await broker.subscribe(IN, "s")
    [entry] = await broker.fetch(consumer)
    return consumer, entry.entry_id, await broker.producer(OUT, "out")


async def _payloads(broker, topic: str, subscription: str) -> list[bytes]:
    consumer = await broker.subscribe(topic, subscription)
    return [m.payload for e in await broker.fetch(consumer) for m in pb.MessageBatch.FromString(e.batch).messages]


async def test_a_one_request_commit_writes_its_sends_acks_and_status_in_one_sql_transaction(
        broker, coordinator, pool):
    consumer, entry_id, producer = await _consume_one(broker)
    txn = await _new_txn(coordinator)
    await _hold(broker, consumer, entry_id, txn)
    assert await pool.fetchval("SELECT count(*) FROM pending_acks") == 0  # held, not written

    reply = await coordinator.end_one_request(_commit(txn, [_send(broker, producer, b"a", b"b", first_seq=0),
                                                            _send(broker, producer, b"c", first_seq=2)],
                                                      [_acks(entry_id)]))

    assert reply.status == pb.TXN_COMMITTED
    assert _group_metrics()[0] >= 1
    assert await pool.fetchval("SELECT status FROM transactions") == pb.TXN_COMMITTED
    # Written once, into the log, as one committed entry holding both batches (no buffer
    # row, no marker, no outcome, no registration).
    rows = await pool.fetch("SELECT e.entry_id, e.num_messages, e.txn_most FROM entries e "
                            "JOIN topics t USING (topic_id) WHERE t.topic = $1", OUT)
    assert [(r["num_messages"], r["txn_most"]) for r in rows] == [(3, None)]
    for table in ("txn_entries", "txn_outcomes", "txn_partitions", "txn_subscriptions", "pending_acks"):
        assert await pool.fetchval(f"SELECT count(*) FROM {table}") == 0, table
    assert await pool.fetchval("SELECT mark_delete_entry FROM subscriptions WHERE subscription = 's'") == entry_id
    assert await pool.fetchval("SELECT last_sequence_id FROM producer_sequences WHERE producer_name = 'out'") == 2
    assert await _payloads(broker, OUT, "reader") == [b"a", b"b", b"c"]
    # In memory too: the log head, the cursor; the acked message is not redelivered.
    plog = await broker.partition(IN)
    assert plog.subscriptions.get("s").cursor.mark_delete == entry_id
    assert not plog.subscriptions.get("s").txn.held
    await broker.service.redeliver(Redeliver(consumer_id=consumer, session_id=broker.session))
    assert await broker.fetch(consumer) == []


async def test_a_repeated_one_request_commit_writes_nothing_twice(broker, coordinator, pool):
    consumer, entry_id, producer = await _consume_one(broker)
    txn = await _new_txn(coordinator)
    await _hold(broker, consumer, entry_id, txn)
    request = _commit(txn, [_send(broker, producer, b"once")], [_acks(entry_id)])
    assert (await coordinator.end_one_request(request)).status == pb.TXN_COMMITTED

    # The same request again (its answer was lost): the status compare-and-set finds
    # COMMITTED and nothing is written, even though its ack is acknowledged now.
    assert (await coordinator.end_one_request(request)).status == pb.TXN_COMMITTED
    # And twice at once, with another transaction's commit in the same group.
    other = await _new_txn(coordinator)
    both = await asyncio.gather(coordinator.end_one_request(request),
                                coordinator.end_one_request(_commit(other, [_send(broker, producer, b"other",
                                                                                  first_seq=1)])),
                                coordinator.end_one_request(request))
    assert [r.status for r in both] == [pb.TXN_COMMITTED] * 3
    # A commit with sends only, repeated: its statement runs, and the compare-and-set
    # alone keeps its data from being written again.
    again = _commit(other, [_send(broker, producer, b"other", first_seq=1)])
    assert (await coordinator.end_one_request(again)).status == pb.TXN_COMMITTED
    assert await _payloads(broker, OUT, "reader") == [b"once", b"other"]
    assert await pool.fetchval("SELECT count(*) FROM entries e JOIN topics t USING (topic_id) "
                               "WHERE t.topic = $1", OUT) == 2
    with pytest.raises(InvalidTxnStatusError):
        await coordinator.end_one_request(_commit(txn, action=pb.TXN_ABORT))


async def test_a_held_ack_conflicts_at_acknowledge_and_holds_its_message(broker, coordinator):
    producer = await broker.producer(IN, "source")
    await broker.send(producer, b"m", first_seq=0)
    consumer = await broker.subscribe(IN, "s", sub_type=pb.SUB_SHARED)
    [entry] = await broker.fetch(consumer)
    txn, other = await _new_txn(coordinator), await _new_txn(coordinator)
    await _hold(broker, consumer, entry.entry_id, txn)

    with pytest.raises(TransactionConflict):  # another one-request transaction
        await _hold(broker, consumer, entry.entry_id, other)
    with pytest.raises(TransactionConflict):  # a classic one
        await broker.ack(consumer, entry.entry_id, txn=other)
    await broker.ack(consumer, entry.entry_id)  # a plain ack of a held message is ignored
    await broker.service.redeliver(Redeliver(consumer_id=consumer, session_id=broker.session))
    assert await broker.fetch(consumer) == []  # held: not redelivered
    plog = await broker.partition(IN)
    assert plog.subscriptions.get("s").cursor.mark_delete < entry.entry_id


async def test_an_abort_releases_held_acks_for_redelivery(broker, coordinator, pool):
    consumer, entry_id, _ = await _consume_one(broker)
    txn = await _new_txn(coordinator)
    await _hold(broker, consumer, entry_id, txn)

    reply = await coordinator.end_one_request(_commit(txn, acks=[_acks(entry_id)], action=pb.TXN_ABORT))

    assert reply.status == pb.TXN_ABORTED
    assert await pool.fetchval("SELECT status FROM transactions") == pb.TXN_ABORTED
    [again] = await broker.fetch(consumer)
    assert (again.entry_id, list(again.redelivery_counts)) == (entry_id, [1])


async def test_a_refused_send_aborts_the_transaction_and_nothing_is_written(broker, coordinator, pool):
    consumer, entry_id, producer = await _consume_one(broker)
    txn = await _new_txn(coordinator)
    await _hold(broker, consumer, entry_id, txn)
    data, n, _, _ = batch(b"x", first_seq=0)
    bad = pb.KeptSend(topic=OUT, producer_id=producer, session_id=broker.session, batch=data,
                      num_messages=n + 1, sequence_id=0, highest_sequence_id=n)  # a count that lies

    with pytest.raises(TransactionHasOperationFailed) as refused:
        await coordinator.end_one_request(_commit(txn, [_send(broker, producer, b"ok"), bad], [_acks(entry_id)]))

    assert "num_messages" in str(refused.value)  # the cause travels with it
    assert await pool.fetchval("SELECT status FROM transactions") == pb.TXN_ABORTED
    assert await pool.fetchval("SELECT count(*) FROM entries e JOIN topics t USING (topic_id) "
                               "WHERE t.topic = $1", OUT) == 0
    [again] = await broker.fetch(consumer)  # the held ack was released
    assert (again.entry_id, list(again.redelivery_counts)) == (entry_id, [1])


async def test_a_terminated_topic_refuses_a_one_request_commit(broker, coordinator, pool):
    producer = await broker.producer(OUT, "out")
    plog = await broker.partition(OUT)
    await plog.terminate(1.0)
    txn = await _new_txn(coordinator)
    with pytest.raises(TransactionHasOperationFailed, match="terminated"):
        await coordinator.end_one_request(_commit(txn, [_send(broker, producer, b"late")]))
    assert await pool.fetchval("SELECT status FROM transactions") == pb.TXN_ABORTED


async def test_a_participant_served_elsewhere_is_NotOwner_and_nothing_changes(broker, coordinator, pool):
    producer = await broker.producer(OUT, "out")
    plog = await broker.partition(OUT)
    # Another broker takes the partition over (its lease epoch moves on).
    await pool.execute("UPDATE topic_owners SET broker_id = 'b-other', epoch = epoch + 1 "
                       "WHERE topic_id = $1", plog.topic_id)
    txn = await _new_txn(coordinator)

    with pytest.raises(NotOwner):
        await coordinator.end_one_request(_commit(txn, [_send(broker, producer, b"x")]))

    assert await pool.fetchval("SELECT status FROM transactions") == pb.TXN_OPEN  # the client goes classic
    assert await pool.fetchval("SELECT count(*) FROM entries e JOIN topics t USING (topic_id) "
                               "WHERE t.topic = $1", OUT) == 0
    assert plog.closed  # the lease check failed: the partition is reloaded on its next request


async def test_a_classic_ack_of_a_holding_transaction_makes_its_held_acks_durable(broker, coordinator, pool):
    producer = await broker.producer(IN, "source")
    await broker.send(producer, b"m0", first_seq=0)
    await broker.send(producer, b"m1", first_seq=1)
    consumer = await broker.subscribe(IN, "s")
    first, second = await broker.fetch(consumer)
    txn = await _new_txn(coordinator)
    await _hold(broker, consumer, first.entry_id, txn)

    await broker.ack(consumer, second.entry_id, txn=txn)  # it spilled: the classic way now

    rows = await pool.fetch("SELECT entry_id FROM pending_acks ORDER BY entry_id")
    assert [r["entry_id"] for r in rows] == [first.entry_id, second.entry_id]
    reply = await coordinator.end(pb.EndTxnRequest(txn=txn, action=pb.TXN_COMMIT))
    assert reply.status == pb.TXN_COMMITTED
    assert await pool.fetchval("SELECT mark_delete_entry FROM subscriptions WHERE subscription = 's'") \
        == second.entry_id


async def test_a_fenced_key_fails_the_one_request_commit_as_expired(broker, coordinator, pool):
    await pool.execute("INSERT INTO transaction_keys (owner, transaction_key, epoch, coordinator_id) "
                       "VALUES ('anonymous', 'k', 1, 0)")
    txn = (await coordinator.new_txn(pb.NewTxnRequest(timeout_ms=60000, transaction_key="k",
                                                      key_epoch=1))).txn
    producer = await broker.producer(OUT, "out")
    await pool.execute("UPDATE transaction_keys SET epoch = 2")  # a newer connection took the key

    with pytest.raises(ExpiredTransactionError):
        await coordinator.end_one_request(_commit(txn, [_send(broker, producer, b"fenced")]))

    row = await pool.fetchrow("SELECT status, expired FROM transactions")
    assert (row["status"], row["expired"]) == (pb.TXN_ABORTED, True)
    assert await pool.fetchval("SELECT count(*) FROM entries e JOIN topics t USING (topic_id) "
                               "WHERE t.topic = $1", OUT) == 0


async def test_concurrent_one_request_commits_share_one_statement(broker, coordinator, pool):
    producer = await broker.producer(OUT, "out")
    txns = [await _new_txn(coordinator) for _ in range(8)]
    statements, commits = _group_metrics()

    replies = await asyncio.gather(*(coordinator.end_one_request(_commit(txn, [_send(
        broker, producer, b"m%d" % i, first_seq=i)])) for i, txn in enumerate(txns)))

    assert [r.status for r in replies] == [pb.TXN_COMMITTED] * 8
    statements_after, commits_after = _group_metrics()
    assert commits_after == commits + 8
    assert statements_after - statements < 8  # grouped: fewer statements than commits
    # Each transaction's entry at its commit point, in one log: every message once.
    assert sorted(await _payloads(broker, OUT, "reader")) == sorted(b"m%d" % i for i in range(8))


def _group_metrics() -> tuple[float, float]:
    """(statements written, commits they carried) by one-request groups so far."""
    samples = {s.name: s.value for m in broker_metrics.ONE_REQUEST_GROUP.collect() for s in m.samples}
    return samples["magnetar_txn_one_request_group_size_count"], samples["magnetar_txn_one_request_group_size_sum"]


async def test_a_hold_of_another_message_does_not_wait_for_a_commits_statement(broker, coordinator, pool):
    """A one-request commit holds the subscription's lock through its statement (fsync
    included); an ack of another transaction on another message is checked and held
    meanwhile, not after it (the commit changes nothing a hold reads until its apply)."""
    source = await broker.producer(IN, "source")
    for seq in range(3):
        await broker.send(source, b"in%d" % seq, first_seq=seq)
    consumer = await broker.subscribe(IN, "s", sub_type=pb.SUB_SHARED)
    first, second, third = [e.entry_id for e in await broker.fetch(consumer)]
    committing, other = await _new_txn(coordinator), await _new_txn(coordinator)
    await _hold(broker, consumer, first, committing)
    statement_started, go_on = asyncio.Event(), asyncio.Event()
    commit_one_request = broker.service.store.commit_one_request

    async def gated(*args, **kwargs):
        statement_started.set()
        await go_on.wait()  # the statement (and its fsync) "in flight"
        return await commit_one_request(*args, **kwargs)

    broker.service.store.commit_one_request = gated
    try:
        commit = asyncio.ensure_future(coordinator.end_one_request(_commit(committing, acks=[_acks(first)])))
        await asyncio.wait_for(statement_started.wait(), 10)
        await asyncio.wait_for(_hold(broker, consumer, second, other), 10)  # does not wait for it
        assert not commit.done()
        go_on.set()
        assert (await commit).status == pb.TXN_COMMITTED
    finally:
        broker.service.store.commit_one_request = commit_one_request
    reply = await coordinator.end_one_request(_commit(other, acks=[_acks(second)]))
    assert reply.status == pb.TXN_COMMITTED
    assert await pool.fetchval("SELECT mark_delete_entry FROM subscriptions WHERE subscription = 's'") == second
    assert third == second + 1
