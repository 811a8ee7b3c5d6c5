"""Graceful shutdown, as Kubernetes does it (SIGTERM, then SIGKILL after the pod's
terminationGracePeriodSeconds): a broker gives its leases back at once, even with
consumers' long polls open on it, so its partitions move in seconds rather than after the
lease TTL; a coordinator finishes the commit it is driving before it exits."""

from __future__ import annotations

import signal
import time
import urllib.error
import urllib.request

import pytest

import magnetar
from magnetar import _partition_consumer
from magnetar_protocol import magnetar_pb2 as pb
from tests.e2e.helpers import commit_in_background, read_all
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e

# Leases of 30 s: a takeover through lease expiry would take at least that long.
LONG_LEASE = {"MAGNETAR_LEASE_TTL_MS": "30000", "MAGNETAR_HEARTBEAT_INTERVAL_MS": "1000",
              "MAGNETAR_SESSION_TIMEOUT_MS": "60000"}
HANDOVER_S = 5.0
SLOW_FANOUT_S = 2.0
COMMITTING, COMMITTED = pb.TXN_COMMITTING, pb.TXN_COMMITTED


def _status(cluster, txn_id) -> int | None:
    rows = cluster.query("SELECT status FROM transactions WHERE coordinator_id = $1 AND txn_id = $2",
                         txn_id.most_bits, txn_id.least_bits)
    return rows[0][0] if rows else None


def _exited(cluster, name: str, timeout: float) -> int:
    process = cluster.services[name].process
    return process.wait(timeout)


@pytest.mark.cluster(brokers=2, env=LONG_LEASE)
def test_sigterm_broker_hands_partitions_over_long_before_the_lease_ttl(cluster, monkeypatch):
    # Consumers long-poll for 20 s (the client's default is 2 s): a broker that waited for
    # its open requests before letting go would hold its partitions that long.
    monkeypatch.setattr(_partition_consumer, "FETCH_WAIT_MS", 20_000)
    client = magnetar.Client(",".join(cluster.broker_urls))
    try:
        topics = [f"persistent://public/default/handover-{i}" for i in range(6)]
        producers = [client.create_producer(t) for t in topics]
        # Subscribed consumers keep long-poll fetches open on their topics' brokers.
        consumers = [client.subscribe(t, "s", initial_position=magnetar.InitialPosition.Earliest)
                     for t in topics]
        for i, p in enumerate(producers):
            p.send(f"before-{i}".encode())
        owners = {t: cluster.owner_of(t) for t in topics}
        victim = owners[topics[0]]
        survivor = next(n for n in cluster.names("broker") if n != victim)
        moved = [t for t in topics if owners[t] == victim]

        started = time.monotonic()
        cluster.kill(victim, signal.SIGTERM)  # does not wait: the broker is shutting down
        sent_after = 0
        while any(cluster.owner_of(t) != survivor for t in moved):
            elapsed = time.monotonic() - started
            assert elapsed < HANDOVER_S, (
                f"{victim}'s partitions were not taken over within {HANDOVER_S}s of SIGTERM "
                f"(lease TTL 30 s): owners now {[cluster.owner_of(t) for t in moved]}")
            for t, p in zip(topics, producers):
                if t in moved:
                    p.send(f"after-{sent_after}".encode())  # a re-lookup finds the survivor
            sent_after += 1
        handover = time.monotonic() - started  # a send above may have blocked past the check
        assert handover < HANDOVER_S, f"{victim}'s partitions moved only {handover:.1f}s after SIGTERM"
        assert _exited(cluster, victim, 15) in (0, -signal.SIGTERM)

        # Nothing was lost on the way (redelivery after the move may repeat a message).
        for i, (t, c) in enumerate(zip(topics, consumers)):
            expected = {f"before-{i}".encode()} | (
                {f"after-{n}".encode() for n in range(sent_after)} if t in moved else set())
            got: set[bytes] = set()
            while not expected <= got:
                msg = c.receive(timeout_millis=10000)
                got.add(msg.data())
                c.acknowledge(msg)
        print(f"{len(moved)} partitions of {victim} owned by {survivor} {handover:.2f}s after SIGTERM")
    finally:
        client.close()


def _healthz_refused(url: str) -> bool:
    try:
        urllib.request.urlopen(f"{url}/healthz", timeout=1).close()
        return False
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return True


@pytest.mark.cluster(brokers=2)
def test_sigterm_coordinator_finishes_the_commit_in_flight(cluster):
    client = magnetar.Client(",".join(cluster.broker_urls))
    try:
        topic = "persistent://public/default/commit-through-sigterm"
        producer = client.create_producer(topic)
        _commit_through_sigterm(cluster, client, producer, topic, "coordinator-0")
    finally:
        client.close()


@pytest.mark.cluster(brokers=2, coordinator_in_broker=True)
def test_sigterm_broker_hosting_the_coordinator_finishes_the_commit_in_flight(cluster):
    """The hosting broker hands its partitions over at once, as any broker does; its
    coordinator still drives the commit in flight to the end."""
    client = magnetar.Client(",".join(cluster.broker_urls))
    try:
        topic = "persistent://public/default/hosted-sigterm"
        producer = client.create_producer(topic)
        _commit_through_sigterm(cluster, client, producer, topic, None)
    finally:
        client.close()


def _commit_through_sigterm(cluster, client, producer, topic: str, coordinator: str | None) -> None:
    """Commit with the partition's broker frozen, SIGTERM the process driving the commit
    (``coordinator``, or the broker hosting the transaction's coordinator), thaw: the
    commit completes and the client gets its answer."""
    owner = cluster.owner_of(topic)
    txn = client.new_transaction()
    while coordinator is None and f"broker-{txn.txn_id.most_bits}" == owner:
        txn.abort()  # hosted by the partition's own broker; the next is the other's
        txn = client.new_transaction()
    coordinator = coordinator or f"broker-{txn.txn_id.most_bits}"
    for i in range(3):
        producer.send(f"m{i}".encode(), txn=txn)
    # Freeze the partition's broker so the coordinator's commit fan-out is still
    # waiting on it when SIGTERM arrives.
    cluster.freeze(owner)
    committer, outcome = commit_in_background(txn)
    wait_until(lambda: _status(cluster, txn.txn_id) == COMMITTING, 20, "the commit becoming COMMITTING")

    url = cluster.url(coordinator)
    cluster.kill(coordinator, signal.SIGTERM)
    # It has stopped taking new connections.
    wait_until(lambda: _healthz_refused(url), 10, f"{coordinator} beginning to shut down")
    # The fan-out stays stuck for SLOW_FANOUT_S of the coordinator's shutdown (the
    # scenario's length, not a wait for something to settle): longer than uvicorn
    # would keep an open request if it did not wait for it.
    time.sleep(SLOW_FANOUT_S)
    assert committer.is_alive(), f"the commit ended while its broker was frozen: {outcome}"
    cluster.thaw(owner)

    committer.join(30)
    assert "ok" in outcome, f"the commit did not complete through SIGTERM: {outcome}"
    assert _exited(cluster, coordinator, 30) in (0, -signal.SIGTERM)
    assert _status(cluster, txn.txn_id) == COMMITTED
    assert read_all(client, topic) == [b"m0", b"m1", b"m2"]
