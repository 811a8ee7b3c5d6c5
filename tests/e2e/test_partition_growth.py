"""Producers and consumers that are running take on the partitions
``update-partitioned-topic`` adds (Pulsar's autoUpdatePartitions; issue 16)."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest

import magnetar
import magnetar.asyncio as aio
from magnetar._routing import partition_for_key
from tests.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.shared_cluster]

NS = "public/default"


def admin(cluster, method: str, path: str, body=None):
    req = urllib.request.Request(
        f"{cluster.admin_url}/admin/v2/persistent/{NS}/{path}", method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        raw = resp.read()
        return json.loads(raw) if raw else None


def key_for(partition: int, partitions: int) -> str:
    return next(k for k in (f"key-{i}" for i in range(1000)) if partition_for_key(k, partitions) == partition)


def test_running_producer_and_consumer_take_on_added_partitions(cluster):
    admin(cluster, "PUT", "growing/partitions", 2)
    client = magnetar.Client(cluster.service_url, partitions_update_interval_seconds=0.2)
    try:
        consumer = client.subscribe(f"persistent://{NS}/growing", "s")
        producer = client.create_producer(f"persistent://{NS}/growing", batching_enabled=False)
        admin(cluster, "POST", "growing/partitions", 3)

        def both_on_partition_2():
            stats = admin(cluster, "GET", "growing-partition-2/stats")
            return stats["publishers"] and stats["subscriptions"].get("s", {}).get("consumers")
        wait_until(both_on_partition_2, 30, "the running producer and consumer on the added partition 2")

        msg_id = producer.send(b"to-the-new-partition", partition_key=key_for(2, 3))
        assert msg_id.partition() == 2
        msg = consumer.receive(timeout_millis=15000)
        assert msg.data() == b"to-the-new-partition" and msg.message_id().partition() == 2
        consumer.acknowledge(msg)
    finally:
        client.close()


def test_an_added_partition_is_read_from_its_first_message(cluster):
    """What was sent to a new partition before a reader at Latest noticed it is not
    skipped.  (A durable subscription is safe anyway: the admin creates the topic's
    subscriptions on the new partitions from their start.)"""
    async def scenario():
        admin(cluster, "PUT", "noticed-late/partitions", 2)
        topic = f"persistent://{NS}/noticed-late"
        async with aio.Client(cluster.service_url, partitions_update_interval_seconds=0) as late, \
                aio.Client(cluster.service_url) as sender:
            reader = await late.create_reader(topic, aio.MessageId.latest)
            admin(cluster, "POST", "noticed-late/partitions", 3)
            producer = await sender.create_producer(topic, batching_enabled=False)
            await producer.send(b"before-it-noticed", partition_key=key_for(2, 3))
            await reader._consumer.watch.check()  # one round of the watch, now
            msg = await reader.read_next(timeout_millis=15000)
            assert msg.data() == b"before-it-noticed" and msg.message_id().partition() == 2
    asyncio.run(scenario())
