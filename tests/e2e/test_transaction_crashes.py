"""Crash tests: services SIGKILL themselves at exact points (MAGNETAR_FAILPOINTS), are
restarted, and every transaction still ends exactly once."""

from __future__ import annotations

import pytest

import magnetar
from magnetar_protocol import magnetar_pb2 as pb
from tests.e2e.helpers import commit_in_background, read_all
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("victim", ["coordinator-0", "broker-0 hosting coordinator 0"])
def test_coordinator_killed_after_committing_is_durable_completes_after_restart(cluster_factory, victim):
    """SIGKILL once COMMITTING is durable, before any participant is told; after the
    restart (same TCID, no failpoint) recovery re-drives the commit: every message once.
    A broker hosting the coordinator takes its partition down with it."""
    hosted = victim.startswith("broker")
    cluster = cluster_factory(brokers=1, coordinator_in_broker=True) if hosted else cluster_factory()
    victim = victim.split()[0]
    cluster.restart(victim, extra_env={"MAGNETAR_FAILPOINTS": "coordinator.after_ending_durable"})
    client = magnetar.Client(cluster.service_url)
    try:
        producer = client.create_producer("crash-after-committing")
        txn = client.new_transaction()
        for i in range(5):
            producer.send(f"m{i}".encode(), txn=txn)
        committer, outcome = commit_in_background(txn)  # retried until the victim is back
        cluster.services[victim].process.wait(30)  # it killed itself at the failpoint
        if not hosted:  # (hosted, the partition's broker is the one down)
            assert read_all(client, "crash-after-committing") == []  # not yet told to anyone
        cluster.start(victim)
        committer.join(60)
        assert "ok" in outcome, outcome
        assert read_all(client, "crash-after-committing") == [f"m{i}".encode() for i in range(5)]
        status = cluster.query("SELECT status FROM transactions WHERE coordinator_id = $1 "
                               "AND txn_id = $2", txn.txn_id.most_bits, txn.txn_id.least_bits)
        assert [r["status"] for r in status] == [pb.TXN_COMMITTED]
    finally:
        client.close()


def test_coordinator_killed_before_committing_times_out_and_nothing_is_visible(cluster):
    cluster.restart("coordinator-0", extra_env={"MAGNETAR_FAILPOINTS": "coordinator.before_ending_durable"})
    client = magnetar.Client(cluster.service_url, operation_timeout_seconds=2)
    try:
        producer = client.create_producer("crash-before-committing")
        txn = client.new_transaction(timeout_ms=3000)
        producer.send(b"never", txn=txn)
        with pytest.raises((magnetar.Timeout, magnetar.ConnectError)):
            txn.commit()
        cluster.services["coordinator-0"].process.wait(30)
        cluster.start("coordinator-0")
        producer.send(b"plain")
        # The transaction stayed OPEN, so the restarted coordinator times it out.
        late = magnetar.Client(cluster.service_url)
        try:
            with pytest.raises(magnetar.InvalidTxnStatusError):
                _commit_when_coordinator_answers(late, txn)
        finally:
            late.close()
        assert read_all(client, "crash-before-committing") == [b"plain"]
    finally:
        client.close()


def _commit_when_coordinator_answers(client, txn) -> None:
    """Wait until the restarted coordinator has timed the transaction out, then commit."""
    from magnetar._transaction import Transaction as AsyncTxn
    from magnetar_protocol import magnetar_pb2 as pb

    core = client._client.core
    status_req = pb.TxnStatusRequest(txn=txn.txn_id.to_wire())

    def timed_out() -> bool:
        try:
            reply = client._io.run(core.call(txn._t.coordinator_url, "/v1/txn/status", status_req,
                                             pb.TxnStatusResponse))
        except (magnetar.ConnectError, magnetar.ServiceNotReady):
            return False
        return reply.status == pb.TXN_ABORTED

    wait_until(timed_out, 20, "the restarted coordinator timing the transaction out", interval=0.1)
    again = AsyncTxn(core, txn.txn_id, txn._t.coordinator_url, txn._t.timeout_ms)
    client._io.run(again.commit())


def test_broker_killed_during_end_txn_on_partition_completes_on_new_owner_once(cluster):
    client = magnetar.Client(",".join(cluster.broker_urls))
    try:
        topic = "persistent://public/default/crash-end-on-partition"
        producer = client.create_producer(topic)
        producer.send(b"before")
        owner = cluster.owner_of(topic)
        # Restart the owner armed; rendezvous hashing hands the topic back to it.
        cluster.restart(owner, extra_env={"MAGNETAR_FAILPOINTS": "broker.end_txn_on_partition"})
        txn = client.new_transaction()
        for i in range(3):
            producer.send(f"t{i}".encode(), txn=txn)
        assert cluster.owner_of(topic) == owner
        txn.commit()  # the owner dies writing the marker; the coordinator retries elsewhere
        assert not cluster.services[owner].alive
        assert cluster.owner_of(topic) != owner
        assert read_all(client, topic) == [b"before", b"t0", b"t1", b"t2"]
    finally:
        client.close()


@pytest.mark.parametrize("point", ["coordinator.one_phase_before_commit",
                                   "coordinator.one_phase_after_commit"])
def test_broker_hosting_the_coordinator_killed_around_its_one_phase_commit(cluster_factory, point):
    """A consume-transform-produce transaction on one broker hosting its coordinator ends
    in one SQL transaction (issue 18).  SIGKILL just before its COMMIT: nothing of it is
    durable (still OPEN, no outcome anywhere), and the client's retried commit applies
    it after the restart; just after: all of it is durable (COMMITTED, the partition's
    and the subscription's outcomes).  Either way every message once, the ack final."""
    cluster = cluster_factory(brokers=1, coordinator_in_broker=True)
    cluster.restart("broker-0", extra_env={"MAGNETAR_FAILPOINTS": point})
    # The classic path's one-phase end (a one-request commit, issue 26, writes no
    # outcome rows: test_one_request_txns.py kills it the same way).
    client = magnetar.Client(cluster.service_url, one_request_txn_max_bytes=0)
    try:
        client.create_producer("one-phase-in").send(b"in")
        consumer = client.subscribe("one-phase-in", "ctp",
                                    initial_position=magnetar.InitialPosition.Earliest)
        producer = client.create_producer("one-phase-out")
        message = consumer.receive(timeout_millis=10000)
        txn = client.new_transaction()
        for i in range(3):
            producer.send(f"o{i}".encode(), txn=txn)
        consumer.acknowledge(message, txn=txn)
        committer, outcome = commit_in_background(txn)  # retried until the broker is back
        cluster.services["broker-0"].process.wait(30)  # it killed itself at the failpoint
        ids = (txn.txn_id.most_bits, txn.txn_id.least_bits)
        status = cluster.query("SELECT status FROM transactions WHERE coordinator_id = $1 "
                               "AND txn_id = $2", *ids)[0]["status"]
        outcomes = cluster.query("SELECT count(*) FROM txn_outcomes WHERE txn_most = $1 "
                                 "AND txn_least = $2", *ids)[0][0]
        if point.endswith("before_commit"):
            assert (status, outcomes) == (pb.TXN_OPEN, 0)  # nothing
        else:
            assert (status, outcomes) == (pb.TXN_COMMITTED, 2)  # all
        cluster.start("broker-0")
        committer.join(60)
        assert "ok" in outcome, outcome
        assert read_all(client, "one-phase-out") == [b"o0", b"o1", b"o2"]
        status = cluster.query("SELECT status FROM transactions WHERE coordinator_id = $1 "
                               "AND txn_id = $2", *ids)
        assert [r["status"] for r in status] == [pb.TXN_COMMITTED]
        consumer.close()
        with pytest.raises(magnetar.Timeout):  # the ack is final: "in" is not redelivered
            client.subscribe("one-phase-in", "ctp").receive(timeout_millis=500)
    finally:
        client.close()
