"""Brokers that host the transaction coordinator (MAGNETAR_HOST_COORDINATOR): the same
transactions, the same fencing and recovery, with EndTxnOnParticipants to the hosting
broker made in process and to any other broker over HTTP.  (A SIGKILL of a hosting
broker: test_transaction_crashes.py and the copier chaos test.)"""

from __future__ import annotations

import urllib.request

import jwt
import pytest
from prometheus_client.parser import text_string_to_metric_families

import magnetar
from magnetar_protocol import magnetar_pb2 as pb
from tests.e2e.helpers import commit_in_background, grant, read_all
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e

SECRET = "test-secret-of-at-least-32-bytes-long"
AUTH_ENV = {"MAGNETAR_AUTH_ENABLED": "true", "MAGNETAR_AUTH_JWT_SECRET": SECRET,
            "MAGNETAR_AUTH_SUPERUSER_ROLES": "admin"}


def _topics_on_each_broker(cluster, client, prefix: str) -> dict[str, str]:
    """broker name -> a topic it owns (ownership is rendezvous hashing over the live
    brokers, so fixed names land on fixed brokers)."""
    found: dict[str, str] = {}
    for i in range(32):
        topic = f"persistent://public/default/{prefix}-{i}"
        client.create_producer(topic).close()
        found.setdefault(cluster.owner_of(topic), topic)
        if len(found) == len(cluster.names("broker")):
            return found
    raise AssertionError(f"no topic landed on every broker: {found}")


@pytest.mark.cluster(brokers=2, coordinator_in_broker=True)
def test_transactions_commit_and_abort_across_brokers_through_hosted_coordinators(cluster, client):
    assert cluster.coordinator_urls == []  # no coordinator processes: the brokers host them
    topics = _topics_on_each_broker(cluster, client, "hosted")
    source = "hosted-source"
    client.create_producer(source).send(b"in")
    consumer = client.subscribe(source, "copier", initial_position=magnetar.InitialPosition.Earliest)
    outputs = {name: client.create_producer(topic) for name, topic in topics.items()}
    for attempt in ("abort", "commit", "commit"):
        message = consumer.receive(timeout_millis=10000)
        txn = client.new_transaction()
        for producer in outputs.values():
            producer.send(attempt.encode() + b"-" + message.data(), txn=txn)
        consumer.acknowledge(message, txn=txn)
        if attempt == "abort":
            txn.abort()
            continue
        txn.commit()
        break
    assert message.redelivery_count() == 1  # the aborted transaction's ack was released
    for topic in topics.values():
        assert read_all(client, topic) == [b"commit-in"]
    consumer.close()
    again = client.subscribe(source, "copier")
    with pytest.raises(magnetar.Timeout):
        again.receive(timeout_millis=500)  # the committed ack is final
    tcids = {row["coordinator_id"] for row in cluster.query(
        "SELECT coordinator_id FROM coordinators WHERE url = ANY($1::text[])", cluster.broker_urls)}
    assert tcids == {0, 1}


@pytest.mark.cluster(brokers=1, coordinator_in_broker=True, env=AUTH_ENV)
def test_a_hosted_coordinator_tells_its_broker_as_itself_not_as_the_client(cluster):
    """The in-process EndTxnOnParticipants acts as the broker's own (superuser) role: a
    commit by an ordinary role completes, though that role may not end participants."""
    grant(cluster, "public/default", "alice", jwt.encode({"sub": "admin"}, SECRET, algorithm="HS256"))
    alice = magnetar.Client(cluster.service_url,
                            auth_token=jwt.encode({"sub": "alice"}, SECRET, algorithm="HS256"))
    try:
        producer = alice.create_producer("hosted-auth")
        with alice.new_transaction() as txn:
            producer.send(b"from alice", txn=txn)
        assert txn.state is magnetar.TransactionState.COMMITTED
        assert read_all(alice, "hosted-auth") == [b"from alice"]
    finally:
        alice.close()


# ---------------------------------------------------------------- one-phase commit (issue 18)


def _one_phase_count(cluster, broker: str) -> float:
    with urllib.request.urlopen(cluster.url(broker) + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "magnetar_txn_one_phase_total")


def _txn_on(cluster, client, broker: str):
    """A transaction whose coordinator is the one ``broker`` hosts (the client takes
    the coordinators round robin); the others are aborted."""
    url = cluster.url(broker)
    tcid = cluster.query("SELECT coordinator_id FROM coordinators WHERE url = $1", url)[0][0]
    for _ in range(8):
        txn = client.new_transaction()
        if txn.txn_id.most_bits == tcid:
            return txn
        txn.abort()
    raise AssertionError(f"no transaction landed on {broker}'s coordinator {tcid}")


@pytest.mark.cluster(brokers=2, coordinator_in_broker=True)
def test_one_phase_only_where_every_participant_is_served_by_the_coordinator_s_broker(cluster, client):
    """A consume-transform-produce transaction on the hosting broker alone ends in one
    SQL transaction (its messages and its ack exactly as with two phases); one with a
    partition on the other broker too takes the two-phase path; and so does one whose
    partition moved away between its registration and its commit."""
    topics = _topics_on_each_broker(cluster, client, "one-phase")
    here, there = sorted(topics)
    local, remote = topics[here], topics[there]
    client.create_producer(local).send(b"in")
    consumer = client.subscribe(local, "ctp", initial_position=magnetar.InitialPosition.Earliest)
    producer = client.create_producer(local)
    before = _one_phase_count(cluster, here)

    message = consumer.receive(timeout_millis=10000)
    txn = _txn_on(cluster, client, here)
    producer.send(b"local-1", txn=txn)
    consumer.acknowledge(message, txn=txn)
    txn.commit()
    assert _one_phase_count(cluster, here) == before + 1
    assert read_all(client, local) == [b"in", b"local-1"]
    consumer.close()
    again = client.subscribe(local, "ctp")  # the ack of "in" committed with it
    assert again.receive(timeout_millis=10000).data() == b"local-1"
    again.close()

    # One participant here, one on the other broker: two phases, both applied.
    to_remote = client.create_producer(remote)
    txn = _txn_on(cluster, client, here)
    producer.send(b"local-2", txn=txn)
    to_remote.send(b"remote-2", txn=txn)
    txn.commit()
    assert _one_phase_count(cluster, here) == before + 1
    assert read_all(client, local)[-1] == b"local-2"
    assert read_all(client, remote) == [b"remote-2"]

    # Registered here, then the partition moves to the other broker before the commit.
    txn = _txn_on(cluster, client, here)
    producer.send(b"moved-3", txn=txn)
    _admin(cluster, "PUT", "/admin/v2/persistent/" + local.split("://")[1] + "/unload")
    wait_until(lambda: cluster.owner_of(local) not in (None, here), 15, "the partition's new owner")
    txn.commit()
    assert _one_phase_count(cluster, here) == before + 1
    assert read_all(client, local) == [b"in", b"local-1", b"local-2", b"moved-3"]
    status = cluster.query("SELECT status FROM transactions WHERE coordinator_id = $1 "
                           "AND txn_id = $2", txn.txn_id.most_bits, txn.txn_id.least_bits)
    assert [r["status"] for r in status] == [pb.TXN_COMMITTED]


def _admin(cluster, method: str, path: str) -> None:
    req = urllib.request.Request(cluster.admin_url + path, method=method)
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status in (200, 204)


@pytest.mark.cluster(brokers=1, coordinator_in_broker=True)
def test_concurrent_one_phase_commits_on_the_same_participants_each_apply_once(cluster, client):
    """One-phase ends queued together share one SQL transaction (group commit): several
    transactions' markers on one partition in one statement, their acks on one
    subscription in another.  Every transaction's messages appear once, every ack holds."""
    topic, count = "one-phase-group", 8
    source = client.create_producer(topic + "-in")
    for i in range(count):
        source.send(f"in-{i}".encode())
    consumer = client.subscribe(topic + "-in", "ctp",
                                initial_position=magnetar.InitialPosition.Earliest)
    producer = client.create_producer(topic)
    before = _one_phase_count(cluster, "broker-0")
    txns = []
    for _ in range(count):
        message = consumer.receive(timeout_millis=10000)
        txn = client.new_transaction()
        producer.send(b"out-" + message.data(), txn=txn)
        consumer.acknowledge(message, txn=txn)
        txns.append(txn)
    committers = [commit_in_background(txn) for txn in txns]
    for thread, outcome in committers:
        thread.join(60)
        assert "ok" in outcome, outcome
    assert _one_phase_count(cluster, "broker-0") == before + count
    assert sorted(read_all(client, topic)) == sorted(f"out-in-{i}".encode() for i in range(count))
    consumer.close()
    with pytest.raises(magnetar.Timeout):  # every ack committed
        client.subscribe(topic + "-in", "ctp").receive(timeout_millis=500)
