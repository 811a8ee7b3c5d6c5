"""Issue #27: delayed messages survive the SIGKILL of the broker that holds them, and an
unload that moves their partition to another broker: the subscription's cursor had
passed them (their rows were stored with it), and they are delivered by the next owner
at their time, once, after a message sent later that was due at once."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

import magnetar
from tests.e2e.test_consumer_features_e2e import cli
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e

TOPIC = "persistent://public/default/delayed-restarts"

STORED = """
SELECT (SELECT count(*) FROM delayed_deliveries d JOIN topics t USING (topic_id) WHERE t.topic = $1) AS rows,
       (SELECT s.mark_delete_entry FROM subscriptions s JOIN topics t USING (topic_id)
        WHERE t.topic = $1 AND s.subscription = 's') AS mark_delete,
       (SELECT max(e.entry_id) FROM entries e JOIN topics t USING (topic_id) WHERE t.topic = $1) AS last
"""


def stored(cluster) -> tuple[int, int, int]:
    [row] = cluster.query(STORED, TOPIC)
    return row["rows"], row["mark_delete"], row["last"]


def wait_for_rows(cluster, rows: int) -> None:
    """Until ``rows`` delayed rows are stored and the cursor is past every entry: what
    comes next can only come from the rows, not from reading the log again."""
    wait_until(lambda: (lambda r, m, last: r == rows and m == last)(*stored(cluster)), 15,
               f"{rows} delayed rows stored and the cursor past them", explain=lambda: str(stored(cluster)))


def receive(consumer, count: int) -> list[bytes]:
    got = []
    for _ in range(count):
        msg = consumer.receive(timeout_millis=20_000)
        consumer.acknowledge(msg)
        got.append(msg.data())
    return got


@pytest.mark.cluster(brokers=2)
def test_delayed_messages_survive_a_broker_sigkill_and_an_unload(cluster):
    client = magnetar.Client(",".join(cluster.broker_urls))
    try:
        consumer = client.subscribe(TOPIC, "s", consumer_type=magnetar.ConsumerType.Shared,
                                    initial_position=magnetar.InitialPosition.Earliest)
        producer = client.create_producer(TOPIC, batching_enabled=False)
        at = int(time.time() * 1000) + 8000
        for i in range(3):
            producer.send(f"delayed-{i}".encode(), deliver_at=at)
        producer.send(b"now")
        assert receive(consumer, 1) == [b"now"]
        wait_for_rows(cluster, 3)

        cluster.kill(cluster.owner_of(TOPIC))  # SIGKILL: nothing in its memory survives
        producer.send(b"after the kill")       # on the broker that took the partition over
        assert receive(consumer, 1) == [b"after the kill"]
        assert sorted(receive(consumer, 3)) == [b"delayed-0", b"delayed-1", b"delayed-2"]
        assert int(time.time() * 1000) >= at  # they came at their time (not at once on takeover)
        for name, svc in cluster.services.items():
            if not svc.alive:
                cluster.start(name)

        producer.send(b"moves", deliver_after=timedelta(seconds=4))
        producer.send(b"now again")
        assert receive(consumer, 1) == [b"now again"]
        wait_for_rows(cluster, 1)
        owner = cluster.owner_of(TOPIC)
        code, out = cli(cluster, "topics", "unload", TOPIC)
        assert code == 0, out
        wait_until(lambda: cluster.owner_of(TOPIC) not in (None, owner), 15, "another broker serving the topic",
                   explain=lambda: str(cluster.owner_of(TOPIC)))
        assert receive(consumer, 1) == [b"moves"]
        with pytest.raises(magnetar.Timeout):  # once
            consumer.receive(timeout_millis=1000)
        wait_until(lambda: stored(cluster)[0] == 0, 10, "the acknowledged rows deleted")
    finally:
        client.close()
