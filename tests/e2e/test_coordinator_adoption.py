"""A coordinator whose process is gone does not strand its work: a live coordinator
adopts its TCID (a lease with an epoch on the `coordinators` row), times out its OPEN
transactions at their deadlines, drives its COMMITTING ones to the end and answers for
it; keys bound to it move on their next connect; its own process, back, claims the TCID
again and the adopter lets go.  Real processes, SIGKILL at a failpoint, no restart until
the test says so (docs/transactions.md, "A coordinator that disappears")."""

from __future__ import annotations

import time
import zlib

import pytest

import magnetar
from magnetar import TxnID
from magnetar_protocol import magnetar_pb2 as pb
from tests.e2e.helpers import commit_in_background, key_binding, read_all
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e

# TEST_ENV's lease TTL is 2 s: a gone coordinator is adopted about that long after it died.
ADOPTED_WITHIN_S = 15
# A keyed client whose coordinator died gets its next transaction within this (the old
# behaviour: `Timeout ... coordinator 1 ... is not running` after the 30 s default).
KEYED_OPERATION_TIMEOUT_S = 12


def open_on(client: magnetar.Client, coordinator_url: str, timeout_ms: int):
    """A transaction opened on one chosen coordinator, used through ``client``."""
    reply = client._io.run(client._client.core.call(
        coordinator_url, "/v1/txn/new", pb.NewTxnRequest(timeout_ms=timeout_ms), pb.NewTxnResponse))
    return client.transaction_from_id(TxnID(reply.txn.most_bits, reply.txn.least_bits), timeout_ms)


def lookup(cluster) -> dict[int, str]:
    """What a client's coordinator lookup (at a broker) answers: TCID -> URL."""
    client = magnetar.Client(cluster.service_url)
    try:
        return client._io.run(client._client.core.coordinators(fresh=True))
    finally:
        client.close()


def status(cluster, txn) -> tuple[int, bool]:
    [row] = cluster.query("SELECT status, timed_out FROM transactions WHERE coordinator_id = $1 "
                          "AND txn_id = $2", txn.txn_id.most_bits, txn.txn_id.least_bits)
    return row["status"], row["timed_out"]


def key_bound_to(coordinator: int, count: int) -> str:
    # The registry's rule for new keys (registry/binding.py): crc32 of "owner&key".
    return next(k for k in (f"adopt-key-{i}" for i in range(100))
                if zlib.crc32(f"anonymous&{k}".encode()) % count == coordinator)


@pytest.mark.cluster(coordinators=2, registry=True)
def test_a_killed_coordinator_is_adopted_and_nothing_it_held_is_stranded(cluster):
    cluster.restart("coordinator-1",
                    extra_env={"MAGNETAR_FAILPOINTS": "coordinator.after_ending_durable"})
    c0, c1 = cluster.coordinator_urls
    wait_until(lambda: lookup(cluster).get(1) == c1, 20, "coordinator 1 serving its own TCID")
    client = magnetar.Client(cluster.service_url)
    key = key_bound_to(1, 2)
    keyed = magnetar.Client(cluster.service_url, transaction_key=key,
                            operation_timeout_seconds=KEYED_OPERATION_TIMEOUT_S)
    try:
        producer = client.create_producer("adopt-out")
        assert keyed.connect_transaction_key() == 0
        assert key_binding(cluster, key) == (1, 0)
        abandoned = open_on(client, c1, timeout_ms=4000)  # its client never ends it
        producer.send(b"abandoned", txn=abandoned)
        abandoned_deadline = time.monotonic() + 4
        kept = open_on(client, c1, timeout_ms=120_000)  # its client commits after the crash
        producer.send(b"kept", txn=kept)
        committing = open_on(client, c1, timeout_ms=120_000)
        producer.send(b"committing", txn=committing)
        assert {t.txn_id.most_bits for t in (abandoned, kept, committing)} == {1}

        # Coordinator 1 SIGKILLs itself once COMMITTING is durable, before any
        # participant is told.  It is not restarted.
        committer, outcome = commit_in_background(committing)
        cluster.services["coordinator-1"].process.wait(30)

        # The keyed client bound to coordinator 1 opens its next transaction within its
        # operation timeout (before adoption: Timeout, "coordinator 1 ... is not running").
        txn = keyed.new_transaction()
        keyed.create_producer("adopt-out").send(b"keyed", txn=txn)
        txn.commit()

        # Coordinator 0 adopts TCID 1: lookups answer it for TCID 1.
        wait_until(lambda: lookup(cluster).get(1) == c0, ADOPTED_WITHIN_S,
                   "coordinator 0 answering for the killed coordinator 1")
        # The COMMITTING transaction is driven to COMMITTED by the adopter, and the
        # client's commit, retried, gets its answer there.
        committer.join(60)
        assert "ok" in outcome, outcome
        assert status(cluster, committing) == (pb.TXN_COMMITTED, False)
        # An OPEN transaction of TCID 1 whose client lives on commits through the adopter.
        kept.commit()
        assert status(cluster, kept) == (pb.TXN_COMMITTED, False)
        # The abandoned one is aborted at its deadline (re-armed from its row).
        wait_until(lambda: status(cluster, abandoned) == (pb.TXN_ABORTED, True),
                   max(abandoned_deadline - time.monotonic(), 0) + 10,
                   "the adopter timing out coordinator 1's abandoned transaction")

        assert sorted(read_all(client, "adopt-out")) == [b"committing", b"kept", b"keyed"]

        # The key's next connect (its job restarted) re-binds it to a live coordinator,
        # one epoch on, and fences the previous holder as always.
        restarted = magnetar.Client(cluster.service_url, transaction_key=key)
        try:
            assert restarted.connect_transaction_key() == 1
            assert key_binding(cluster, key) == (0, 1)
            with pytest.raises(magnetar.NotAllowedError):
                keyed.new_transaction()
            again = restarted.new_transaction()
            assert again.txn_id.most_bits == 0
            again.commit()
        finally:
            restarted.close()
    finally:
        keyed.close()
        client.close()


@pytest.mark.cluster(coordinators=2)
def test_the_killed_coordinator_comes_back_and_the_adopter_lets_go(cluster):
    c0, c1 = cluster.coordinator_urls
    client = magnetar.Client(cluster.service_url)
    try:
        producer = client.create_producer("reclaim-out")
        kept = open_on(client, c1, timeout_ms=120_000)
        producer.send(b"kept", txn=kept)
        # Long enough to outlive the adoption and the restart: it must time out at
        # coordinator 1, back, and only there.
        late = open_on(client, c1, timeout_ms=20_000)
        late_deadline = time.monotonic() + 20
        producer.send(b"late", txn=late)
        cluster.kill("coordinator-1")
        wait_until(lambda: lookup(cluster).get(1) == c0, ADOPTED_WITHIN_S,
                   "coordinator 0 adopting coordinator 1")
        [adopted] = cluster.query("SELECT fence_epoch, adopted_by FROM coordinators "
                                  "WHERE coordinator_id = 1")
        assert adopted["adopted_by"] == 0

        cluster.start("coordinator-1")  # its readiness needs the TCID: it claimed it back
        [back] = cluster.query("SELECT fence_epoch, adopted_by, url FROM coordinators "
                               "WHERE coordinator_id = 1")
        assert (back["adopted_by"], back["url"]) == (None, c1)
        assert back["fence_epoch"] == adopted["fence_epoch"] + 1
        wait_until(lambda: "letting go" in cluster.log_tail("coordinator-0", 400), 10,
                   "coordinator 0 letting go of TCID 1")
        assert lookup(cluster)[1] == c1
        # The adopter no longer acts for TCID 1: asked directly, it says so.
        with pytest.raises(magnetar.TransactionCoordinatorNotFoundError):
            client._io.run(client._client.core.call(
                c0, "/v1/txn/status", pb.TxnStatusRequest(txn=kept.txn_id.to_wire()),
                pb.TxnStatusResponse))
        assert time.monotonic() < late_deadline, "the restart took longer than the test allows"

        kept.commit()
        assert status(cluster, kept) == (pb.TXN_COMMITTED, False)
        wait_until(lambda: status(cluster, late) == (pb.TXN_ABORTED, True),
                   late_deadline - time.monotonic() + 10, "coordinator 1 timing out its transaction")
        # Timed out by its owner, once: the adopter's timeout loop for TCID 1 had stopped.
        late_str = f"({late.txn_id.most_bits},{late.txn_id.least_bits}) timed out"
        assert late_str in cluster.log_tail("coordinator-1", 400)
        assert late_str not in cluster.log_tail("coordinator-0", 400)
        assert read_all(client, "reclaim-out") == [b"kept"]
    finally:
        client.close()


def test_brokers_hosting_coordinators_adopt_a_killed_brokers_tcid(cluster_factory):
    cluster = cluster_factory(brokers=2, coordinator_in_broker=True)
    b0, b1 = cluster.broker_urls
    client = magnetar.Client(b0)
    try:
        producer = client.create_producer("hosted-adopt-out")
        txn = open_on(client, b1, timeout_ms=120_000)
        assert txn.txn_id.most_bits == 1
        producer.send(b"hosted", txn=txn)
        cluster.kill("broker-1")
        wait_until(lambda: lookup(cluster).get(1) == b0, ADOPTED_WITHIN_S,
                   "broker 0's coordinator adopting TCID 1")
        txn.commit()
        assert status(cluster, txn) == (pb.TXN_COMMITTED, False)
        assert read_all(client, "hosted-adopt-out") == [b"hosted"]
    finally:
        client.close()
