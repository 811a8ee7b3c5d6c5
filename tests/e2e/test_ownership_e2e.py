"""Leases end to end: a broker stopped with SIGTERM gives its partitions back at once,
and exclusive producers keep their guarantees across partitions and broker crashes."""

from __future__ import annotations

import json
import signal
import time
import urllib.request

import pytest

import magnetar
from magnetar import ProducerAccessMode as Mode
from tests.e2e.helpers import exclusive_producer_process, read_all, send_line

pytestmark = pytest.mark.e2e




def test_sigterm_releases_leases_so_partitions_move_at_once(cluster):
    client = magnetar.Client(",".join(cluster.broker_urls))
    try:
        topic = "persistent://public/default/graceful"
        producer = client.create_producer(topic)
        producer.send(b"before")
        owner = cluster.owner_of(topic)
        cluster.stop(owner)  # SIGTERM: the broker releases its leases before it exits
        assert cluster.owner_of(topic) is None
        started = time.monotonic()
        producer.send(b"after")  # re-lookup: another broker takes it without waiting for a lease TTL
        assert time.monotonic() - started < 2.0  # the test cluster's lease TTL is 2 s
        assert cluster.owner_of(topic) not in (None, owner)
        assert read_all(client, topic) == [b"before", b"after"]
    finally:
        client.close()


def test_access_mode_applies_per_partition(cluster, client):
    req = urllib.request.Request(f"{cluster.admin_url}/admin/v2/persistent/public/default/excl-parts/partitions",
                                 data=b"2", method="PUT", headers={"content-type": "application/json"})
    urllib.request.urlopen(req, timeout=10).close()
    producer = client.create_producer("excl-parts", access_mode=Mode.Exclusive)
    for i in range(2):
        with urllib.request.urlopen(
                f"{cluster.admin_url}/admin/v2/persistent/public/default/excl-parts-partition-{i}/stats",
                timeout=10) as resp:
            stats = json.loads(resp.read())
        assert stats["accessMode"] == "Exclusive" and stats["topicEpoch"] == 1
        assert stats["exclusiveProducer"] == producer.producer_name()
    with pytest.raises(magnetar.ProducerBusy):
        client.create_producer("excl-parts")




def test_frozen_holder_is_fenced_after_owning_broker_sigkill(cluster, client):
    topic = "persistent://public/default/leader-crash"
    old = exclusive_producer_process(",".join(cluster.broker_urls), topic)
    try:
        assert send_line(old, "old-1") == "ok"
        old.send_signal(signal.SIGSTOP)
        cluster.kill(cluster.owner_of(topic), signal.SIGKILL)  # exclusivity must survive only in the epoch
        successor = client.create_producer(topic, access_mode=Mode.WaitForExclusive)
        successor.send(b"new-1")
        old.send_signal(signal.SIGCONT)
        for line in ("old-2", "old-3"):
            assert send_line(old, line) == "ProducerFenced"
        assert read_all(client, topic) == [b"old-1", b"new-1"]
    finally:
        old.kill()
        old.wait()
