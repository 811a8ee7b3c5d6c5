"""Issue #4 end to end: access modes, topic epochs and fencing, with real processes."""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.request

import pytest

import magnetar
from magnetar import ProducerAccessMode as Mode
from tests.e2e.helpers import exclusive_producer_process, read_all, send_line
from tests.waiting import wait_until

# One cluster for the module (tests/e2e/conftest.py): each test has its own topics, and
# the one that kills a broker has a cluster of its own.
pytestmark = [pytest.mark.e2e, pytest.mark.shared_cluster]


def _stats(cluster, topic: str) -> dict:
    with urllib.request.urlopen(f"{cluster.admin_url}/admin/v2/persistent/public/default/{topic}/stats",
                                timeout=10) as resp:
        return json.loads(resp.read())




def test_exclusive_rules(cluster, client):
    first = client.create_producer("excl", access_mode=Mode.Exclusive)
    with pytest.raises(magnetar.ProducerFenced):
        client.create_producer("excl", access_mode=Mode.Exclusive)
    with pytest.raises(magnetar.ProducerBusy):
        client.create_producer("excl")
    first.send(b"one")
    stats = _stats(cluster, "excl")
    assert stats["accessMode"] == "Exclusive"
    assert stats["exclusiveProducer"] == first.producer_name()
    assert stats["topicEpoch"] == 1
    shared = client.create_producer("excl-over-shared")
    with pytest.raises(magnetar.ProducerFenced):
        client.create_producer("excl-over-shared", access_mode=Mode.Exclusive)
    shared.send(b"still fine")


def test_wait_for_exclusive_waiters_are_fifo_and_do_not_time_out(cluster):
    client = magnetar.Client(",".join(cluster.broker_urls), operation_timeout_seconds=1)
    try:
        holder = client.create_producer("fifo", access_mode=Mode.Exclusive)
        order: list[str] = []
        producers = {}

        def wait(name: str) -> None:
            producers[name] = client.create_producer("fifo", producer_name=name,
                                                     access_mode=Mode.WaitForExclusive)
            order.append(name)

        w1 = threading.Thread(target=wait, args=("w1",))
        w1.start()
        _until(lambda: _stats(cluster, "fifo")["waitingProducers"] == ["w1"])
        w2 = threading.Thread(target=wait, args=("w2",))
        w2.start()
        _until(lambda: _stats(cluster, "fifo")["waitingProducers"] == ["w1", "w2"])
        time.sleep(2)  # longer than the operation timeout: waiting must not time out
        assert order == []
        holder.close()
        w1.join(30)
        assert order == ["w1"]
        producers["w1"].send(b"from w1")
        producers["w1"].close()
        w2.join(30)
        assert order == ["w1", "w2"]
        assert _stats(cluster, "fifo")["topicEpoch"] == 3
    finally:
        client.close()


def test_exclusive_with_fencing_takes_over_at_once(cluster, client):
    old = client.create_producer("fence", access_mode=Mode.Exclusive)
    old.send(b"old")
    boss = client.create_producer("fence", access_mode=Mode.ExclusiveWithFencing)
    boss.send(b"boss")
    for _ in range(2):  # on the next send and every send after
        with pytest.raises(magnetar.ProducerFenced):
            old.send(b"zombie")
    assert read_all(client, "fence") == [b"old", b"boss"]


@pytest.mark.cluster()  # kills a broker: a cluster of its own
def test_reconnect_keeps_epoch_through_broker_sigkill(cluster, client):
    topic = "persistent://public/default/epoch-survives"
    producer = client.create_producer(topic, access_mode=Mode.Exclusive)
    producer.send(b"before")
    cluster.kill(cluster.owner_of(topic), signal.SIGKILL)
    producer.send(b"after")  # reconnects to the new owner with its epoch
    assert _stats(cluster, "epoch-survives")["topicEpoch"] == 1
    with pytest.raises(magnetar.ProducerBusy):
        client.create_producer(topic)
    assert read_all(client, topic) == [b"before", b"after"]




def test_frozen_exclusive_producer_is_fenced_after_takeover(cluster, client):
    old = exclusive_producer_process(",".join(cluster.broker_urls), "leader")
    try:
        assert send_line(old, "old-1") == "ok"
        old.send_signal(signal.SIGSTOP)  # past its session lease: exclusivity lapses
        successor = client.create_producer("leader", access_mode=Mode.WaitForExclusive)
        successor.send(b"new-1")
        old.send_signal(signal.SIGCONT)
        for line in ("old-2", "old-3"):
            assert send_line(old, line) == "ProducerFenced"
        successor.send(b"new-2")
        assert read_all(client, "leader") == [b"old-1", b"new-1", b"new-2"]
    finally:
        old.kill()
        old.wait()


def _until(condition, timeout: float = 15.0) -> None:
    wait_until(condition, timeout, "condition met")
