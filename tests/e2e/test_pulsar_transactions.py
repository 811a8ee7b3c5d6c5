"""Transactions over Pulsar's binary protocol, driven frame by frame (tests/e2e/pulsar_wire.py:
no Python Pulsar client has transactions): discovery of the coordinators through the
assignment topic, commit and abort across two topics and a subscription, interop with
Magnetar's own client both ways, bad inputs, auth, and a coordinator SIGKILL mid-commit."""

from __future__ import annotations

import itertools
import threading

import pytest

import magnetar
from magnetar_protocol import pulsar_api_pb2 as pb
from tests.e2e.helpers import read_all
from tests.e2e.pulsar_wire import TC_ASSIGN, Wire, WireError, coordinators
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.shared_cluster, pytest.mark.cluster(brokers=1)]

AUTH_SECRET = "pulsar-txn-test-secret-0123456789abcdef"
_names = itertools.count()


def new_topic(prefix: str) -> str:
    return f"persistent://public/default/ptxn-{prefix}-{next(_names)}"


@pytest.fixture
def wire(cluster):
    w = Wire(cluster.pulsar_service_url)
    yield w
    w.close()


def _tc(wire: Wire) -> Wire:
    tcs = coordinators(wire)
    assert list(tcs) == [0]   # one coordinator: one partition, TCID 0
    assert wire.partitions(f"{TC_ASSIGN}-partition-0") == 0   # a partition is not partitioned
    return tcs[0]


def _drain(wire: Wire, consumer_id: int, count: int) -> list[bytes]:
    return [wire.receive(consumer_id)[1] for _ in range(count)]


def test_commit_and_abort_across_two_topics_and_a_subscription(cluster, wire):
    a, b, src = new_topic("a"), new_topic("b"), new_topic("src")
    tc = _tc(wire)
    for i, topic in enumerate((a, b, src)):
        wire.producer(topic, i + 1, f"p{i}")
    wire.publish(3, "p2", 0, b"in-0")
    wire.publish(3, "p2", 1, b"in-1")
    wire.subscribe(src, "work", consumer_id=1)
    (id0, m0), (id1, m1) = wire.receive(1), wire.receive(1)
    assert (m0, m1) == (b"in-0", b"in-1")

    # Consume-transform-produce, committed: both outputs and the ack land together.
    txn = tc.new_txn()
    assert txn[0] == 0   # most bits = the TCID
    tc.add_partitions(txn, a, b)
    tc.add_subscription(txn, src, "work")
    wire.publish(1, "p0", 0, b"a-1", txn=txn)
    wire.publish(2, "p1", 0, b"b-1", txn=txn)
    wire.ack(1, id0, txn=txn)
    assert read_all_magnetar(cluster, a) == []          # not visible before the commit
    tc.end_txn(txn, commit=True)
    assert read_all_magnetar(cluster, a) == [b"a-1"]
    assert read_all_magnetar(cluster, b) == [b"b-1"]

    # Aborted: its sends never appear and its ack is undone (redelivered after a reconnect).
    txn2 = tc.new_txn()
    tc.add_partitions(txn2, a)
    tc.add_subscription(txn2, src, "work")
    wire.publish(1, "p0", 1, b"a-aborted", txn=txn2)
    wire.ack(1, id1, txn=txn2)
    tc.end_txn(txn2, commit=False)
    assert read_all_magnetar(cluster, a) == [b"a-1"]
    other = Wire(cluster.pulsar_service_url)
    try:
        wire.request(pb.CommandCloseConsumer(consumer_id=1), pb.BaseCommand.SUCCESS)
        other.subscribe(src, "work", consumer_id=9)
        assert other.receive(9)[1] == b"in-1"             # in-0's ack was committed, in-1's aborted
    finally:
        other.close()
    tc.close()


@pytest.mark.parametrize("sub_type", ["Exclusive", "Failover"])
def test_an_aborted_cumulative_ack_rewinds_the_consumer_to_the_durable_position(cluster, wire, sub_type):
    # The broker's half of Pulsar's abort (the Java client drops its queue): every message
    # after the mark-delete position is pushed again, in order, redelivery count 1, not
    # only the range the transaction acknowledged.
    topic = new_topic(f"cumulative-abort-{sub_type.lower()}")
    tc = _tc(wire)
    wire.producer(topic, 1, "p")
    for i in range(6):
        wire.publish(1, "p", i, f"m{i}".encode())
    wire.subscribe(topic, "work", consumer_id=1, sub_type=getattr(pb.CommandSubscribe, sub_type))
    got = [wire.receive_counted(1) for _ in range(6)]
    assert [(payload, count) for _, payload, count in got] == [(f"m{i}".encode(), 0) for i in range(6)]
    durable = tc.new_txn()
    tc.add_subscription(durable, topic, "work")
    wire.ack(1, got[0][0], txn=durable, cumulative=True)
    tc.end_txn(durable, commit=True)   # the durable position: m0
    aborted = tc.new_txn()
    tc.add_subscription(aborted, topic, "work")
    wire.ack(1, got[2][0], txn=aborted, cumulative=True)   # m1..m2 pending in it; m3..m5 held
    tc.end_txn(aborted, commit=False)
    again = [wire.receive_counted(1) for _ in range(5)]
    assert [(payload, count) for _, payload, count in again] == [(f"m{i}".encode(), 1) for i in range(1, 6)]
    tc.close()


def read_all_magnetar(cluster, topic: str) -> list[bytes]:
    client = magnetar.Client(cluster.service_url)
    try:
        return read_all(client, topic)
    finally:
        client.close()


def test_a_pulsar_commit_is_seen_once_in_order_by_magnetar_and_back(cluster, wire):
    topic = new_topic("interop")
    tc = _tc(wire)
    wire.producer(topic, 1, "wire-p")
    txn = tc.new_txn()
    tc.add_partitions(txn, topic)
    for i in range(5):
        wire.publish(1, "wire-p", i, f"w{i}".encode(), txn=txn)
    client = magnetar.Client(cluster.service_url)
    try:
        consumer = client.subscribe(topic, "m", initial_position=magnetar.InitialPosition.Earliest)
        assert read_all(client, topic) == []           # open: nothing visible yet
        tc.end_txn(txn, commit=True)
        tc.end_txn(txn, commit=True)   # a client's retry of a lost answer: the same outcome
        got = [consumer.receive(timeout_millis=10_000).data() for _ in range(5)]
        assert got == [f"w{i}".encode() for i in range(5)]
        # ... and Magnetar's transaction, committed, reaches a Pulsar-protocol consumer once, in order.
        producer = client.create_producer(topic)
        mtxn = client.new_transaction()
        for i in range(3):
            producer.send(f"m{i}".encode(), txn=mtxn)
        wire.subscribe(topic, "p", consumer_id=7)
        assert _drain(wire, 7, 5) == [f"w{i}".encode() for i in range(5)]
        mtxn.commit()
        assert _drain(wire, 7, 3) == [b"m0", b"m1", b"m2"]
        assert read_all(client, topic) == [f"w{i}".encode() for i in range(5)] + [b"m0", b"m1", b"m2"]
    finally:
        client.close()
    tc.close()


def test_bad_transaction_requests_get_error_frames_and_the_connection_serves_on(cluster, wire):
    topic = new_topic("bad")
    tc = _tc(wire)
    with pytest.raises(WireError) as err:
        tc.tc_connect(7)                                   # no coordinator 7
    assert err.value.name == "TransactionCoordinatorNotFound"
    with pytest.raises(WireError) as err:
        tc.new_txn(tc_id=7)
    assert err.value.name == "TransactionCoordinatorNotFound"
    with pytest.raises(WireError) as err:
        tc.end_txn((7, 1), commit=True)                    # a foreign TCID
    assert err.value.name == "TransactionCoordinatorNotFound"
    with pytest.raises(WireError) as err:
        tc.end_txn((0, 987_654_321), commit=True)          # no such transaction
    assert err.value.name == "TransactionNotFound"
    with pytest.raises(WireError) as err:
        tc.add_partitions((0, 987_654_321), topic)
    assert err.value.name in ("TransactionNotFound", "InvalidTxnStatus")
    txn = tc.new_txn()
    tc.end_txn(txn, commit=True)
    with pytest.raises(WireError) as err:
        tc.end_txn(txn, commit=False)                      # ended the other way already
    assert err.value.name == "InvalidTxnStatus"
    wire.producer(topic, 1, "bad-p")
    with pytest.raises(WireError) as err:
        wire.publish(1, "bad-p", 0, b"late", txn=txn)      # a send in an ended transaction
    assert err.value.name == "InvalidTxnStatus"
    # The same connections still serve.
    txn = tc.new_txn()
    tc.add_partitions(txn, topic)
    wire.publish(1, "bad-p", 1, b"ok", txn=txn)
    tc.end_txn(txn, commit=True)
    assert read_all_magnetar(cluster, topic) == [b"ok"]
    tc.close()


def test_transactions_act_as_the_connection_role(cluster_factory):
    import jwt

    auth = cluster_factory(brokers=1, admin=False, registry=False, env={
        "MAGNETAR_AUTH_ENABLED": "true", "MAGNETAR_AUTH_JWT_SECRET": AUTH_SECRET,
        "MAGNETAR_AUTH_SUPERUSER_ROLES": "admin"})

    def token(role: str) -> str:
        return jwt.encode({"sub": role}, AUTH_SECRET, algorithm="HS256")

    topic = new_topic("auth")
    admin, other = Wire(auth.pulsar_service_url, token("admin")), Wire(auth.pulsar_service_url, token("eve"))
    try:
        tc_admin, tc_other = _tc(admin), coordinators(other)[0]
        txn = tc_admin.new_txn()
        with pytest.raises(WireError) as err:
            tc_other.end_txn(txn, commit=False)           # not eve's transaction
        assert err.value.name == "AuthorizationError"
        with pytest.raises(WireError) as err:
            tc_other.add_partitions(txn, new_topic("eve"))
        assert err.value.name == "AuthorizationError"
        admin.producer(topic, 1, "auth-p")
        admin.publish(1, "auth-p", 0, b"x", txn=txn)
        tc_admin.end_txn(txn, commit=True)                # its owner may
        mine = tc_other.new_txn()
        with pytest.raises(WireError) as err:
            other.producer(topic, 1, "eve-p")             # no produce grant: as without a txn
        assert err.value.name == "AuthorizationError"
        tc_other.end_txn(mine, commit=False)              # eve's own: she may
        tc_admin.close()
        tc_other.close()
    finally:
        admin.close()
        other.close()


@pytest.mark.cluster(brokers=1)
def test_a_coordinator_killed_mid_commit_ends_the_transaction_once_after_recovery(cluster):
    topic = new_topic("crash")
    cluster.restart("coordinator-0", extra_env={"MAGNETAR_FAILPOINTS": "coordinator.after_ending_durable"})
    wire = Wire(cluster.pulsar_service_url)
    tc = _tc(wire)
    wire.producer(topic, 1, "crash-p")
    txn = tc.new_txn()
    for i in range(4):
        wire.publish(1, "crash-p", i, f"c{i}".encode(), txn=txn)
    outcome: dict = {}

    def commit():
        try:
            tc.end_txn(txn, commit=True)
            outcome["ok"] = True
        except Exception as exc:  # the assertions below report it
            outcome["error"] = exc

    committer = threading.Thread(target=commit)
    committer.start()
    cluster.services["coordinator-0"].process.wait(30)   # killed itself once COMMITTING was durable
    committer.join(60)
    assert isinstance(outcome.get("error"), WireError), outcome
    assert outcome["error"].name == "TransactionCoordinatorNotFound"   # the client looks it up again
    assert read_all_magnetar(cluster, topic) == []       # no participant told yet
    cluster.start("coordinator-0")                       # recovery re-drives the commit
    wait_until(lambda: read_all_magnetar(cluster, topic) == [f"c{i}".encode() for i in range(4)], 60,
               "the recovered coordinator to finish the commit", interval=0.5)
    tc.close()
    tc = _tc(wire)                                       # reconnect, as a Pulsar client does
    tc.end_txn(txn, commit=True)                         # the client's retry: already committed
    with pytest.raises(WireError) as err:
        tc.end_txn(txn, commit=False)
    assert err.value.name == "InvalidTxnStatus"
    assert read_all_magnetar(cluster, topic) == [f"c{i}".encode() for i in range(4)]
    tc.close()
    wire.close()
