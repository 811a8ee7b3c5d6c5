"""Consumer seek end to end: what is delivered next after a seek while a fetch is under way.

A consumer always has a long-polling fetch at its broker.  A seek wakes that fetch, which
then chose entries from the new position, counted them delivered, and answered a
request whose reply the client drops (it predates the seek): the sought messages never
came (`receive` timed out).  Now each fetch carries the consumer's seek count and one
sent before the latest seek is answered empty.
"""

from __future__ import annotations

import time

import pytest

import magnetar

pytestmark = pytest.mark.e2e


def _batch_of_three_then_one(client, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=True, batching_max_messages=3,
                                      batching_max_publish_delay_ms=50)
    for i in range(3):
        producer.send_async(f"m{i}".encode(), lambda result, msg_id: None)
    producer.flush()
    producer.send(b"m3")  # a second entry


@pytest.mark.cluster(brokers=1)
def test_a_seek_delivers_from_the_position_sought_even_right_after_a_receive(client):
    topic = "persistent://public/default/seek-into-batch"
    _batch_of_three_then_one(client, topic)
    consumer = client.subscribe(topic, "s", initial_position=magnetar.InitialPosition.Earliest)
    first = consumer.receive(10000)
    assert first.data() == b"m0"
    entry = first.message_id()
    consumer.seek(magnetar.MessageId(entry.partition(), entry.entry_id(), 2, 3))
    assert [consumer.receive(10000).data() for _ in range(2)] == [b"m2", b"m3"]
    with pytest.raises(magnetar.Timeout):  # and nothing else: the seek acked m0 and m1
        consumer.receive(300)

    # Seeks back and forth, by id and by time, each deliver from their position (one
    # cluster for both parts: starting one costs more than the test).
    topic = "persistent://public/default/seek-back-and-forth"
    _batch_of_three_then_one(client, topic)
    consumer = client.subscribe(topic, "s", initial_position=magnetar.InitialPosition.Earliest)
    ids = [consumer.receive(10000).message_id() for _ in range(4)]
    for target, expected in ((ids[3], [b"m3"]), (ids[0], [b"m0", b"m1", b"m2", b"m3"]),
                             (ids[1], [b"m1", b"m2", b"m3"])):
        consumer.seek(target)
        assert [consumer.receive(10000).data() for _ in expected] == expected
    consumer.seek(int(time.time() * 1000) + 60_000)  # by time, after everything: nothing
    with pytest.raises(magnetar.Timeout):
        consumer.receive(300)
    consumer.seek(0)  # by time, before everything: all again
    assert [consumer.receive(10000).data() for _ in range(4)] == [b"m0", b"m1", b"m2", b"m3"]
