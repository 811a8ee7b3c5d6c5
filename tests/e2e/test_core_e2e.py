"""Issue #2 end to end: real PostgreSQL, real broker processes, the real client."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

import magnetar
from tests.e2e.helpers import SHIPPED_RETENTION

pytestmark = pytest.mark.e2e


def _admin(cluster, method: str, path: str, body=None):
    req = urllib.request.Request(
        cluster.admin_url + path, method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        raw = resp.read()
        return json.loads(raw) if raw else None


def _drain(consumer, expected: int, deadline_s: float = 30.0) -> list:
    got = []
    deadline = time.monotonic() + deadline_s
    while len(got) < expected and time.monotonic() < deadline:
        try:
            msg = consumer.receive(timeout_millis=500)
        except magnetar.Timeout:
            continue
        got.append(msg)
        consumer.acknowledge(msg)
    return got


def test_partitioned_topic_across_two_brokers(cluster):
    _admin(cluster, "PUT", "/admin/v2/persistent/public/default/orders/partitions", 4)
    client = magnetar.Client(",".join(cluster.broker_urls))
    try:
        consumer = client.subscribe("orders", "audit", consumer_type=magnetar.ConsumerType.Shared,
                                    initial_position=magnetar.InitialPosition.Earliest)
        producer = client.create_producer("orders")
        sent = {producer.send(f"m{i}".encode(), partition_key=f"k{i % 17}").partition()
                for i in range(400)}
        assert sent == {0, 1, 2, 3}  # keys spread over every partition
        got = _drain(consumer, 400)
        assert sorted(m.data() for m in got) == sorted(f"m{i}".encode() for i in range(400))
        owners = {_admin(cluster, "GET", f"/admin/v2/persistent/public/default/orders-partition-{p}/internal-stats")
                  .get("ownerBroker") for p in range(4)}
        assert len(owners) == 2, "partitions should be spread over both brokers"
    finally:
        client.close()


# The broker's shipped retention (0, no namespace policy): the reader from Earliest after
# the run must still find every acknowledged message (issue #30: it once found only the
# last 57 of 9,972, the rest trimmed from a topic with no subscription).
@pytest.mark.cluster(env=SHIPPED_RETENTION)
def test_broker_sigkill_mid_stream_keeps_every_acknowledged_message_once(cluster):
    client = magnetar.Client(",".join(cluster.broker_urls))
    acked: list[int] = []
    lock = threading.Lock()
    try:
        producer = client.create_producer("killed-mid-stream", producer_name="steady",
                                          send_timeout_millis=60000)

        def on_sent(result, msg_id, i):
            if result is None or result == "Ok" or getattr(result, "name", "") == "Ok":
                with lock:
                    acked.append(i)

        stop = threading.Event()

        def produce():
            i = 0
            while not stop.is_set() and i < 20000:
                producer.send_async(str(i).encode(), lambda r, m, i=i: on_sent(r, m, i))
                i += 1
                if i % 200 == 0:
                    time.sleep(0.01)

        writer = threading.Thread(target=produce)
        writer.start()
        deadline = time.monotonic() + 30
        while len(acked) < 2000 and time.monotonic() < deadline:
            time.sleep(0.01)
        owner = cluster.owner_of("persistent://public/default/killed-mid-stream")
        cluster.kill(owner, signal.SIGKILL)
        deadline = time.monotonic() + 60
        before = len(acked)
        while len(acked) < before + 2000 and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        writer.join()
        producer.flush()
        assert len(acked) >= before + 2000, "production did not resume after the takeover"
        reader = client.create_reader("killed-mid-stream", magnetar.MessageId.earliest)
        seen = []
        while reader.has_message_available():
            seen.append(int(reader.read_next(timeout_millis=10000).data()))
        assert len(seen) == len(set(seen)), "a message was stored twice"
        assert set(acked) <= set(seen), "an acknowledged message was lost"
    finally:
        client.close()


CONSUMER_SCRIPT = """
import sys, magnetar
client = magnetar.Client(sys.argv[1])
consumer = client.subscribe("shared-work", "workers", consumer_type=magnetar.ConsumerType.Shared,
                            initial_position=magnetar.InitialPosition.Earliest)
for _ in range(int(sys.argv[2])):
    consumer.receive(timeout_millis=20000)  # received, never acknowledged
print("holding", flush=True)
sys.stdin.read()
"""


def test_killed_consumer_unacked_messages_go_to_another_consumer(cluster):
    client = magnetar.Client(cluster.broker_urls[0])
    try:
        survivor = client.subscribe("shared-work", "workers", consumer_type=magnetar.ConsumerType.Shared,
                                    initial_position=magnetar.InitialPosition.Earliest, receiver_queue_size=1)
        producer = client.create_producer("shared-work", batching_enabled=False)
        for i in range(50):
            producer.send(f"job{i}".encode())
        doomed = subprocess.Popen([sys.executable, "-c", CONSUMER_SCRIPT, cluster.broker_urls[0], "20"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert doomed.stdout.readline().strip() == "holding"
        doomed.send_signal(signal.SIGKILL)
        doomed.wait()
        got = _drain(survivor, 50, deadline_s=60)
        assert sorted(m.data() for m in got) == sorted(f"job{i}".encode() for i in range(50))
        assert any(m.redelivery_count() > 0 for m in got)
    finally:
        client.close()


def test_bad_input_gets_a_clear_error_and_changes_nothing(cluster):
    client = magnetar.Client(cluster.broker_urls[0])
    try:
        with pytest.raises(magnetar.InvalidTopicName):
            client.create_producer("bad topic name")
        producer = client.create_producer("limits")
        with pytest.raises(magnetar.MessageTooBig):
            producer.send(b"x" * (5 * 1024 * 1024 + 1))
        producer.send(b"fine")
        # Malformed protobuf: 400 with a reason; the producer keeps working.
        req = urllib.request.Request(cluster.broker_urls[0] + "/v1/producers/send", data=b"\xff\xff\xff",
                                     method="POST", headers={"content-type": "application/x-protobuf"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=5)
        assert err.value.code == 400
        producer.send(b"still fine")
        stats = _admin(cluster, "GET", "/admin/v2/persistent/public/default/limits/internal-stats")
        assert stats["numberOfEntries"] == 2
    finally:
        client.close()
