"""Brokers that host the transaction coordinator (MAGNETAR_HOST_COORDINATOR): the same
transactions, the same fencing and recovery, with EndTxnOnParticipants to the hosting
broker made in process and to any other broker over HTTP.  (A SIGKILL of a hosting
broker: test_transaction_crashes.py and the copier chaos test.)"""

from __future__ import annotations

import jwt
import pytest

import magnetar
from tests.e2e.helpers import grant, read_all

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
