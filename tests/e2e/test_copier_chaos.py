"""The end-to-end copier: consume-transform-produce in transactions of 10 from 2 input
partitions, every third transaction aborted and retried, while brokers and the
coordinator are SIGKILLed and restarted (coordinator processes, or the brokers hosting
the coordinators).  Output equals input exactly once; nothing from an aborted
transaction is ever read.

With the broker's shipped retention (0, no namespace policy), and the input loaded
before the copier subscribes, with the lifecycle run over it in between: the shape that
lost 3,810 of 4,000 inputs when data without a subscription was trimmed at once (issue
#30); the output is read back from Earliest with a reader, which holds nothing either."""

from __future__ import annotations

import json
import random
import signal
import threading
import time
import urllib.request

import pytest

import magnetar
from tests.e2e.helpers import SHIPPED_RETENTION, two_more_passes

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
INPUTS = 300


def _create_partitioned(cluster, topic: str, partitions: int) -> None:
    req = urllib.request.Request(f"{cluster.admin_url}/admin/v2/persistent/public/default/{topic}/partitions",
                                 data=json.dumps(partitions).encode(), method="PUT",
                                 headers={"content-type": "application/json"})
    urllib.request.urlopen(req, timeout=10).close()


def _copy(client, aborted: set, done: threading.Event, errors: list) -> None:
    consumer = client.subscribe("copy-in", "copier", consumer_type=magnetar.ConsumerType.Failover,
                                initial_position=magnetar.InitialPosition.Earliest)
    out = client.create_producer("copy-out", send_timeout_millis=60000)
    attempt = 0
    batch: list = []
    while not done.is_set():
        try:
            while len(batch) < 10:
                batch.append(consumer.receive(timeout_millis=1000))
        except magnetar.Timeout:
            if not batch:
                continue
        attempt += 1
        # Delivery is at least once: after a failover a message already handed out can
        # come again.  Exactly-once processing means each message id once per transaction.
        unique: dict = {}
        for msg in batch:
            unique.setdefault(msg.message_id(), msg)
        batch = list(unique.values())
        txn = None
        try:
            txn = client.new_transaction(timeout_ms=15000)
            kept = []
            for msg in batch:
                try:
                    consumer.acknowledge(msg, txn=txn)
                    kept.append(msg)
                except magnetar.TransactionConflict:
                    pass  # already acknowledged by an earlier, committed attempt
            for msg in kept:
                out.send(f"{msg.data().decode()}|{txn.txn_id}".encode(), txn=txn)
            if attempt % 3 == 0:
                txn.abort()  # its messages come back with redelivery count + 1
                aborted.add(str(txn.txn_id))
            else:
                txn.commit()
            batch = []  # committed, or aborted on purpose: the redelivery brings them back
        except magnetar.MagnetarError as exc:
            errors.append(repr(exc))
            if txn is not None:
                try:
                    txn.abort()
                    aborted.add(str(txn.txn_id))
                except magnetar.MagnetarError:
                    pass  # committed after all, or it times out on its own
            batch = []  # unacknowledged messages are redelivered


@pytest.mark.parametrize("deployment", ["coordinator process", "coordinators in brokers"])
def test_copier_is_exactly_once_under_sigkill(cluster_factory, deployment):
    hosted = deployment == "coordinators in brokers"
    cluster = cluster_factory(coordinator_in_broker=hosted, env=SHIPPED_RETENTION)
    _create_partitioned(cluster, "copy-in", 2)
    client = magnetar.Client(",".join(cluster.broker_urls), operation_timeout_seconds=20)
    try:
        producer = client.create_producer("copy-in")
        for i in range(INPUTS):
            producer.send(str(i).encode(), partition_key=str(i))
        two_more_passes(cluster)  # the input waits, unsubscribed, while the lifecycle runs
        aborted: set = set()
        errors: list = []
        done = threading.Event()
        copier = threading.Thread(target=_copy, args=(client, aborted, done, errors))
        copier.start()
        rng = random.Random(7)
        # Hosted, a broker's SIGKILL takes its partitions and its coordinator down at once.
        victims = ["broker-0", "broker-1" if hosted else "coordinator-0", "broker-1",
                   rng.choice(["broker-0", "broker-1"])]
        for victim in victims:
            time.sleep(2)
            cluster.kill(victim, signal.SIGKILL)
            time.sleep(0.5)
            cluster.start(victim)
        reader = client.create_reader("copy-out", magnetar.MessageId.earliest)
        seen: dict[int, str] = {}
        deadline = time.monotonic() + 120
        duplicates = []
        while len(seen) < INPUTS and time.monotonic() < deadline:
            try:
                value, txn_id = reader.read_next(timeout_millis=1000).data().decode().split("|")
            except magnetar.Timeout:
                continue
            if int(value) in seen:
                duplicates.append(f"{value} in {seen[int(value)]} and {txn_id}")
            seen[int(value)] = txn_id
        done.set()
        copier.join(60)
        assert not duplicates, f"copied twice: {duplicates[:10]}"
        assert sorted(seen) == list(range(INPUTS)), f"missing {sorted(set(range(INPUTS)) - set(seen))[:10]}"
        read_from_aborted = [v for v, t in seen.items() if t in aborted]
        assert not read_from_aborted, f"read output of aborted transactions: {read_from_aborted[:10]}"
        assert len(aborted) >= 5  # the scenario really aborted and retried
    finally:
        client.close()
