"""Clients whose cached address stops answering (issue 19, item 1).

On Kubernetes a deleted pod's IP vanishes: a client still holding it (a topic's owner,
a transaction's coordinator, or a name whose old IP its DNS cache keeps) sends SYNs
that nobody answers and nobody refuses.  With only a total timeout per request, such a
connect hung for the whole operation timeout (30.1 s measured on a real cluster), and a
commit in flight ended in ``Timeout ... /v1/txn/end`` although its coordinator's
replacement knew the answer.

Here the dead address is made with :func:`tests.blackhole.blackhole`: the killed
process's port becomes a listening socket whose accept queue is full, so the kernel
drops every SYN to it unanswered and the client sits in SYN-SENT, as it does for a
vanished pod IP (the module says why a plain kill or SIGSTOP would not do this).  A
replacement comes up elsewhere (the other broker takes the partitions over; the
coordinator restarts on a new port, as a rescheduled pod gets a new IP), and each test
measures how long after the replacement could serve the clients resumed, waiting with
a deadline.  Without the connect timeout they stay stuck until the operation timeout.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest

import magnetar
from tests.blackhole import blackhole, hangs
from tests.e2e.conftest import TEST_ENV
from tests.e2e.helpers import commit_in_background
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e


def _backlog(cluster, topic: str, subscription: str) -> int:
    path = topic.replace("persistent://", "/admin/v2/persistent/") + "/stats"
    with urllib.request.urlopen(cluster.admin_url + path, timeout=10) as resp:
        return json.loads(resp.read())["subscriptions"][subscription]["msgBacklog"]


LEASE_TTL_S = int(TEST_ENV["MAGNETAR_LEASE_TTL_MS"]) / 1000
CONNECT_TIMEOUT_S = 5.0  # the client's default connection_timeout_ms
# "The replacement is ready plus a few seconds": one connect timeout already under way
# when it became ready, the retry backoff's last pause (1 s), and room for a loaded
# 2-core machine.  The operation timeout (30 s) is far beyond it.
GRACE_S = CONNECT_TIMEOUT_S + 1.0 + 4.0


def test_producer_and_consumer_resume_soon_after_their_brokers_address_goes_dead(cluster):
    client = magnetar.Client(",".join(cluster.broker_urls))
    try:
        topic = "persistent://public/default/dead-owner-address"
        producer = client.create_producer(topic, send_timeout_millis=60000)
        consumer = client.subscribe(topic, "audit",
                                    initial_position=magnetar.InitialPosition.Earliest)
        producer.send(b"before")
        consumer.acknowledge(consumer.receive(timeout_millis=10000))
        # Plain acks are grouped and sent later: kill the owner only once this one is
        # durable, or "before" is (rightly, at least once) redelivered after the move.
        wait_until(lambda: _backlog(cluster, topic, "audit") == 0, 15,
                   "the ack of 'before' to be durable")
        owner = cluster.owner_of(topic)
        cluster.kill(owner)
        killed = time.monotonic()
        with blackhole(cluster.services[owner].port) as port:
            assert hangs("127.0.0.1", port)  # the cached owner address: SYN-SENT, no answer
            sent = threading.Event()
            results = []
            producer.send_async(b"after", lambda result, msg_id: (results.append(result), sent.set()))
            # The other broker may serve the partition once the dead one's lease lapsed.
            ready = killed + LEASE_TTL_S
            assert sent.wait(ready + GRACE_S - time.monotonic()), (
                f"the send was still stuck {time.monotonic() - ready:.1f}s after another "
                "broker could serve the partition")
            assert results == [magnetar.Result.Ok]
            print(f"send resumed {time.monotonic() - ready:.2f}s after another broker could serve")
            msg = consumer.receive(timeout_millis=max(int((ready + GRACE_S - time.monotonic()) * 1000), 1))
            assert msg.data() == b"after"
        assert cluster.owner_of(topic) != owner
    finally:
        client.close()


def test_a_commit_in_flight_gets_its_answer_from_the_coordinators_replacement(cluster):
    """The coordinator dies once COMMITTING is durable; its replacement (same TCID, new
    address) finishes the commit, and the client's repeated EndTxn — idempotent — gets
    COMMITTED from it instead of a Timeout."""
    cluster.restart("coordinator-0", extra_env={"MAGNETAR_FAILPOINTS": "coordinator.after_ending_durable"})
    client = magnetar.Client(cluster.service_url)
    committer = None
    try:
        producer = client.create_producer("dead-coordinator-address")
        txn = client.new_transaction()
        for i in range(3):
            producer.send(f"m{i}".encode(), txn=txn)
        committer, outcome = commit_in_background(txn)
        coordinator = cluster.services["coordinator-0"]
        coordinator.process.wait(30)  # it killed itself at the failpoint
        with blackhole(coordinator.port) as port:
            assert hangs("127.0.0.1", port)
            cluster.move("coordinator-0")
            cluster.start("coordinator-0")  # waits until it answers /readyz
            ready = time.monotonic()
            committer.join(GRACE_S)
            assert outcome, (f"the commit was still waiting {GRACE_S:.0f}s after the "
                             "coordinator's replacement was ready")
            assert "ok" in outcome, outcome
            print(f"commit answered {outcome['ok'] - ready:.2f}s after the replacement was ready")
        assert txn.state is magnetar.TransactionState.COMMITTED
        reader = client.create_reader("dead-coordinator-address", magnetar.MessageId.earliest)
        assert [reader.read_next(10000).data() for _ in range(3)] == [b"m0", b"m1", b"m2"]
    finally:
        if committer is not None:  # a commit still stuck ends at its operation timeout
            committer.join(60)
        client.close()


@pytest.mark.cluster(registry=True)
def test_a_keyed_client_reaches_the_registrys_replacement_soon(cluster):
    """The registry a keyed client cached is gone (its address dead); the client's
    next key connect finds the replacement (new address) instead of waiting out its
    operation timeout."""
    client = magnetar.Client(cluster.service_url, transaction_key="dead-registry-key")
    try:
        epoch = client.connect_transaction_key()
        cluster.kill("registry")
        with blackhole(cluster.services["registry"].port) as port:
            assert hangs("127.0.0.1", port)
            cluster.move("registry")
            cluster.start("registry")
            ready = time.monotonic()
            connected, held = threading.Event(), []
            threading.Thread(target=lambda: (held.append(client.connect_transaction_key()),
                                             connected.set()), daemon=True).start()
            assert connected.wait(GRACE_S), (
                f"the key connect was still waiting {GRACE_S:.0f}s after the registry's "
                "replacement was ready")
            print(f"key connect answered {time.monotonic() - ready:.2f}s after the replacement was ready")
        assert held == [epoch]  # the same client reconnecting keeps its epoch
    finally:
        client.close()
