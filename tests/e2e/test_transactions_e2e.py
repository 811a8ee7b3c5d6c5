"""Issue #3 end to end: Pulsar's transaction scenarios and crash tests with SIGKILL."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

import magnetar

# No test here stops a service or changes a cluster-wide setting, and each has its own
# topics: one cluster for the module (tests/e2e/conftest.py).
pytestmark = [pytest.mark.e2e, pytest.mark.shared_cluster]


def _receive_all(consumer, limit: int = 1000, quiet_ms: int = 1500) -> list:
    got = []
    while len(got) < limit:
        try:
            got.append(consumer.receive(timeout_millis=quiet_ms))
        except magnetar.Timeout:
            break
    return got


def test_produce_commit(cluster, client):
    consumer = client.subscribe("tx-commit", "s", initial_position=magnetar.InitialPosition.Earliest)
    producer = client.create_producer("tx-commit")
    txn = client.new_transaction()
    for i in range(10):
        producer.send(f"m{i}".encode(), txn=txn)
    producer.send(b"plain")
    # The open transaction holds nothing back: the plain message arrives at once.
    assert consumer.receive(timeout_millis=5000).data() == b"plain"
    with pytest.raises(magnetar.Timeout):
        consumer.receive(timeout_millis=500)
    txn.commit()
    got = [consumer.receive(timeout_millis=5000) for _ in range(10)]
    assert [m.data() for m in got] == [f"m{i}".encode() for i in range(10)]
    # Contiguous at the commit point: one entry, indices 0..9.
    assert {m.message_id().entry_id() for m in got} == {got[0].message_id().entry_id()}


def test_produce_abort_is_never_delivered_on_any_path(cluster, client):
    consumer = client.subscribe("tx-abort", "s", initial_position=magnetar.InitialPosition.Earliest)
    producer = client.create_producer("tx-abort")
    txn = client.new_transaction()
    producer.send(b"aborted", txn=txn)
    txn.abort()
    producer.send(b"after")
    assert consumer.receive(timeout_millis=5000).data() == b"after"
    reader = client.create_reader("tx-abort", magnetar.MessageId.earliest)
    assert [m.data() for m in _receive_all_reader(reader)] == [b"after"]


def _receive_all_reader(reader) -> list:
    out = []
    while reader.has_message_available():
        out.append(reader.read_next(timeout_millis=5000))
    return out


def test_ack_commit_and_ack_abort_redelivers(cluster, client):
    producer = client.create_producer("tx-acks")
    for i in range(3):
        producer.send(f"m{i}".encode())
    consumer = client.subscribe("tx-acks", "s", initial_position=magnetar.InitialPosition.Earliest)
    msgs = [consumer.receive(timeout_millis=5000) for _ in range(3)]
    aborted = client.new_transaction()
    consumer.acknowledge(msgs[0], txn=aborted)
    aborted.abort()
    committed = client.new_transaction()
    consumer.acknowledge(msgs[1], txn=committed)
    committed.commit()
    again = consumer.receive(timeout_millis=5000)
    assert again.data() == b"m0" and again.redelivery_count() == 1
    consumer.acknowledge(again)
    consumer.acknowledge(msgs[2])
    consumer.close()
    later = client.subscribe("tx-acks", "s")
    with pytest.raises(magnetar.Timeout):
        later.receive(timeout_millis=1000)  # m1's transactional ack was committed


@pytest.mark.parametrize("sub_type", [magnetar.ConsumerType.Exclusive, magnetar.ConsumerType.Failover],
                         ids=["Exclusive", "Failover"])
def test_an_aborted_cumulative_ack_gives_back_everything_after_the_durable_position(cluster, client, sub_type):
    # Pulsar's: the client drops its queue, the broker rewinds the consumer to the
    # mark-delete position.  A retry loop that reprocesses from the last committed
    # position gets every message it had received again, in order, each once.
    topic = f"tx-cumulative-abort-{sub_type.name}"
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(10):
        producer.send(f"m{i}".encode())
    consumer = client.subscribe(topic, "s", consumer_type=sub_type, consumer_name="a",
                                initial_position=magnetar.InitialPosition.Earliest)
    standby = (client.subscribe(topic, "s", consumer_type=sub_type, consumer_name="b")
               if sub_type == magnetar.ConsumerType.Failover else None)
    first = [consumer.receive(timeout_millis=5000) for _ in range(2)]
    with client.new_transaction() as committed:
        consumer.acknowledge_cumulative(first[1], txn=committed)  # the durable position: m1
    received = [consumer.receive(timeout_millis=5000) for _ in range(5)]  # m2..m6; m7..m9 queued
    txn = client.new_transaction()
    consumer.acknowledge_cumulative(received[2], txn=txn)  # m2..m4 pending in it
    txn.abort()
    again = [consumer.receive(timeout_millis=5000) for _ in range(8)]
    assert [m.data() for m in again] == [f"m{i}".encode() for i in range(2, 10)]
    assert [m.redelivery_count() for m in again[:5]] == [1] * 5  # those it had received
    with pytest.raises(magnetar.Timeout):
        consumer.receive(timeout_millis=500)  # each once: nothing queued before the abort
    if standby is not None:
        with pytest.raises(magnetar.Timeout):
            standby.receive(timeout_millis=100)
        standby.close()
    consumer.close()


def test_conflicting_acks(cluster, client):
    producer = client.create_producer("tx-conflict")
    producer.send(b"one")
    consumer = client.subscribe("tx-conflict", "s", initial_position=magnetar.InitialPosition.Earliest)
    msg = consumer.receive(timeout_millis=5000)
    t1, t2 = client.new_transaction(), client.new_transaction()
    consumer.acknowledge(msg, txn=t1)
    with pytest.raises(magnetar.TransactionConflict):
        consumer.acknowledge(msg, txn=t2)
    with pytest.raises(magnetar.TransactionConflict):
        consumer.acknowledge_cumulative(msg, txn=t2)
    t1.commit()
    t3 = client.new_transaction()
    with pytest.raises(magnetar.TransactionConflict):
        consumer.acknowledge(msg, txn=t3)  # already acknowledged


def test_ended_transactions(cluster, client):
    producer = client.create_producer("tx-ended")
    txn = client.new_transaction()
    producer.send(b"x", txn=txn)
    txn.commit()
    txn.commit()  # idempotent
    with pytest.raises(magnetar.InvalidTxnStatusError):
        txn.abort()
    with pytest.raises(magnetar.InvalidTxnStatusError):
        producer.send(b"y", txn=txn)
    with pytest.raises(ValueError):
        client.new_transaction(timeout_ms=0)


def test_timeout_aborts_within_timeout_plus_one_second(cluster, client):
    consumer = client.subscribe("tx-timeout", "s", initial_position=magnetar.InitialPosition.Earliest)
    producer = client.create_producer("tx-timeout")
    txn = client.new_transaction(timeout_ms=1000)
    producer.send(b"late", txn=txn)
    started = time.monotonic()
    deadline = started + 10
    while time.monotonic() < deadline:
        try:
            producer.send(b"probe", txn=txn)
        except (magnetar.InvalidTxnStatusError, magnetar.TransactionNotFound):
            break
        time.sleep(0.05)
    assert time.monotonic() - started <= 2.0 + 0.5  # timeout + 1 s, plus test slack
    with pytest.raises(magnetar.InvalidTxnStatusError):
        txn.commit()
    with pytest.raises(magnetar.Timeout):
        consumer.receive(timeout_millis=500)


def test_spoiled_transaction_aborts_on_commit(cluster, client):
    producer = client.create_producer("tx-spoiled")
    producer.send(b"seed")
    consumer = client.subscribe("tx-spoiled", "s", initial_position=magnetar.InitialPosition.Earliest)
    msg = consumer.receive(timeout_millis=5000)
    t1, t2 = client.new_transaction(), client.new_transaction()
    consumer.acknowledge(msg, txn=t1)
    producer.send(b"from-t2", txn=t2)
    with pytest.raises(magnetar.TransactionConflict):
        consumer.acknowledge(msg, txn=t2)
    with pytest.raises(magnetar.TransactionHasOperationFailed):
        t2.commit()
    reader = client.create_reader("tx-spoiled", magnetar.MessageId.earliest)
    assert [m.data() for m in _receive_all_reader(reader)] == [b"seed"]


CLIENT_WITH_OPEN_TXN = """
import sys, magnetar
client = magnetar.Client(sys.argv[1])
consumer = client.subscribe("tx-client-dies", "work", consumer_type=magnetar.ConsumerType.Shared,
                            initial_position=magnetar.InitialPosition.Earliest)
txn = client.new_transaction(timeout_ms=3000)
msg = consumer.receive(timeout_millis=10000)
consumer.acknowledge(msg, txn=txn)
print("acked", msg.data().decode(), flush=True)
sys.stdin.read()
"""


def test_client_killed_with_open_transaction_releases_its_acks(cluster, client):
    producer = client.create_producer("tx-client-dies")
    producer.send(b"job")
    doomed = subprocess.Popen([sys.executable, "-c", CLIENT_WITH_OPEN_TXN, cluster.broker_urls[0]],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert doomed.stdout.readline().strip() == "acked job"
    doomed.send_signal(signal.SIGKILL)
    doomed.wait()
    survivor = client.subscribe("tx-client-dies", "work", consumer_type=magnetar.ConsumerType.Shared)
    msg = survivor.receive(timeout_millis=20000)
    assert msg.data() == b"job" and msg.redelivery_count() >= 1


def test_one_request_ends_many_participants_and_names_the_ones_that_failed(cluster, client):
    """EndTxnOnParticipants (a coordinator's call to one broker): applies every end it
    can and reports the others per participant, so the coordinator retries only those."""
    from magnetar_protocol import magnetar_pb2 as pb

    topic = "persistent://public/default/tx-batch-end"
    consumer = client.subscribe(topic, "s", initial_position=magnetar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    producer.send(b"input")
    msg = consumer.receive(timeout_millis=5000)
    txn = client.new_transaction()
    producer.send(b"output", txn=txn)
    consumer.acknowledge(msg, txn=txn)
    owner = cluster.url(cluster.owner_of(topic))
    request = pb.EndTxnOnParticipantsRequest(
        txn=txn.txn_id.to_wire(), action=pb.TXN_COMMIT,
        partitions=[topic, "persistent://public/default/tx-batch-unknown"],
        subscriptions=[pb.TxnSubscription(topic=topic, subscription="s")])
    reply = client._io.run(client._client.core.call(
        owner, "/v1/txn/end-on-participants", request, pb.EndTxnOnParticipantsResponse))
    assert [(e.topic, e.subscription) for e in reply.errors] == [
        ("persistent://public/default/tx-batch-unknown", "")]
    assert reply.errors[0].error.code in (pb.NOT_OWNER, pb.TOPIC_NOT_FOUND)
    # Both participants applied the commit: the output is visible, the input acked.
    assert consumer.receive(timeout_millis=5000).data() == b"output"
    txn.commit()  # the coordinator's own fan-out finds them done (idempotent)
    with pytest.raises(magnetar.Timeout):
        consumer.receive(timeout_millis=500)


def test_a_busy_client_takes_pooled_transactions_and_aborts_the_unused(cluster, client):
    """NewTxn for many (docs/transactions.md): a client opening transactions back to
    back leases blocks and hands them out without a round trip; every message commits
    once, and what it leased but never used is aborted when it closes."""
    from magnetar_protocol import magnetar_pb2 as pb

    busy = magnetar.Client(cluster.service_url)
    producer = busy.create_producer("tx-pooled")
    txn_ids = []
    for i in range(60):
        txn = busy.new_transaction()
        producer.send(b"%d" % i, txn=txn)
        txn.commit()
        txn_ids.append(txn.txn_id)
    pool = busy._client.core.txn_pool
    assert pool.leased > 0
    leased_but_unused = [entry[0] for entry in pool.ready]
    busy.close()
    got = sorted(int(m.data()) for m in _receive_all(
        client.subscribe("tx-pooled", "s", initial_position=magnetar.InitialPosition.Earliest)))
    assert got == list(range(60))
    statuses = {(r["txn_id"]): r["status"] for r in cluster.query(
        "SELECT txn_id, status FROM transactions WHERE txn_id = ANY($1::bigint[])",
        [t.least_bits for t in txn_ids + leased_but_unused])}
    assert all(statuses[t.least_bits] == pb.TXN_COMMITTED for t in txn_ids)
    assert all(statuses[t.least_bits] == pb.TXN_ABORTED for t in leased_but_unused)


def test_newtxn_for_many_holds_its_deadlines_and_checks_its_limits(cluster, client):
    from magnetar_protocol import magnetar_pb2 as pb

    core = client._client.core
    url = cluster.coordinator_urls[0]

    def new(**fields):
        return client._io.run(core.call(url, "/v1/txn/new", pb.NewTxnRequest(**fields),
                                        pb.NewTxnResponse))

    reply = new(timeout_ms=10000, count=5, hold_ms=1000)
    ids = [reply.txn.least_bits, *reply.more_least_bits]
    assert len(set(ids)) == 5
    rows = cluster.query("SELECT status, timeout_ms, extract(epoch FROM deadline_at - opened_at) "
               "AS span FROM transactions WHERE txn_id = ANY($1::bigint[])", ids)
    assert len(rows) == 5 and all(r["status"] == pb.TXN_OPEN and r["timeout_ms"] == 10000 for r in rows)
    assert all(10.9 < r["span"] < 11.5 for r in rows)  # timeout + hold
    for fields, why in [(dict(count=65), "maximum of 64"), (dict(count=2, hold_ms=60000), "hold_ms"),
                        (dict(count=2, transaction_key="k", key_epoch=0), "one transaction at a time")]:
        with pytest.raises(magnetar.BadRequest, match=why):
            new(timeout_ms=10000, **fields)
