"""Issue #20 finding 1 end to end: a batch that is not a valid MessageBatch is refused
with 400 and stores nothing; an undecodable entry that is in the log anyway (planted
through SQL, as an older broker or corruption would leave it) is skipped by consumers
and readers, which keep consuming the entries after it."""

from __future__ import annotations

import os
import urllib.error
import urllib.request

import pytest

import magnetar
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.topics import canonical

pytestmark = pytest.mark.e2e

PROTOBUF = {"content-type": "application/x-protobuf"}


def _post(url: str, message) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=message.SerializeToString(), method="POST", headers=PROTOBUF)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def _batch(*seqs: int) -> bytes:
    return pb.MessageBatch(messages=[pb.SingleMessage(payload=b"m%d" % s, sequence_id=s)
                                     for s in seqs]).SerializeToString()


def _entries(cluster, topic: str) -> list:
    return cluster.query("SELECT e.entry_id FROM entries e JOIN topics t USING (topic_id) "
                         "WHERE t.topic = $1 ORDER BY e.entry_id", canonical(topic))


def _entries_with_poison(cluster, client, topic: str, payloads: list[bytes], poisoned: int):
    """Store one entry per payload, then make entry ``poisoned`` undecodable in the
    database and unload the topic so no broker cache still holds the good bytes."""
    producer = client.create_producer(topic, batching_enabled=False)
    for payload in payloads:
        producer.send(payload)
    cluster.query("UPDATE entries SET payload = $2 FROM topics t WHERE entries.topic_id = "
                  "t.topic_id AND t.topic = $1 AND entry_id = $3", canonical(topic),
                  os.urandom(64), poisoned)
    req = urllib.request.Request(
        cluster.broker_urls[0] + "/internal/v1/unload?topic=" + canonical(topic), method="POST")
    urllib.request.urlopen(req, timeout=10).close()
    return producer


MALFORMED = {
    "random bytes": (os.urandom(64), 3, 0, 2),
    "count above the batch's": (_batch(0, 1), 3, 0, 2),
    "count below the batch's": (_batch(0, 1, 2), 2, 0, 1),
    "sequence ids not the request's": (_batch(5, 6, 7), 3, 0, 2),
    "truncated batch": (_batch(0, 1, 2)[:-3], 3, 0, 2),
    "invalid UTF-8 in a key": (pb.MessageBatch(messages=[pb.SingleMessage(
        payload=b"x", sequence_id=0)]).SerializeToString() + b"\x0a\x04\x12\x02\xff\xfe", 2, 0, 0),
}


def test_a_malformed_batch_is_refused_with_400_and_nothing_is_stored(cluster, client):
    topic = "poison-refused"
    producer = client.create_producer(topic, producer_name="p")
    producer.send(b"before")
    part = producer._p.parts[0]
    for what, (batch, n, lowest, highest) in MALFORMED.items():
        status, body = _post(part.url + "/v1/producers/send", pb.SendRequest(
            producer_id=part.producer_id, batch=batch, num_messages=n, sequence_id=lowest,
            highest_sequence_id=highest))
        err = pb.Error.FromString(body)
        assert (status, err.code) == (400, pb.BAD_REQUEST), what
        assert "nothing was stored" in err.message and topic in err.message, (what, err.message)
    assert len(_entries(cluster, topic)) == 1  # only "before"
    # The same checks on the batched route: refused per batch, nothing stored.
    status, body = _post(part.url + "/v1/producers/send-batches", pb.SendBatchesRequest(batches=[
        pb.SendRequest(producer_id=part.producer_id, batch=os.urandom(64), num_messages=3,
                       sequence_id=100, highest_sequence_id=102)]))
    result = pb.SendBatchesResponse.FromString(body).results[0]
    assert status == 200 and result.error.code == pb.BAD_REQUEST
    assert len(_entries(cluster, topic)) == 1
    producer.send(b"after")  # the producer goes on (its dedup state was not moved)
    reader = client.create_reader(topic, magnetar.MessageId.earliest)
    assert [reader.read_next(10000).data() for _ in range(2)] == [b"before", b"after"]


@pytest.mark.cluster(brokers=1)
def test_consumers_and_readers_skip_an_undecodable_entry_and_keep_consuming(cluster, client):
    topic = "poison-planted"
    producer = _entries_with_poison(cluster, client, topic, [b"a", b"b", b"c"], 1)

    consumer = client.subscribe(topic, "s", initial_position=magnetar.InitialPosition.Earliest)
    shared = client.subscribe(topic, "k", consumer_type=magnetar.ConsumerType.KeyShared,
                              initial_position=magnetar.InitialPosition.Earliest)
    reader = client.create_reader(topic, magnetar.MessageId.earliest)
    producer.send(b"d")  # written after the poison: must arrive too
    for who in (consumer, shared):
        got = [who.receive(10000) for _ in range(3)]
        assert [m.data() for m in got] == [b"a", b"c", b"d"]
        assert who.undecodable_entries() == 1
        for m in got:
            who.acknowledge(m)
    assert [reader.read_next(10000).data() for _ in range(3)] == [b"a", b"c", b"d"]
    assert reader.undecodable_entries() == 1
    assert not reader.has_message_available()
    # The durable consumer acknowledged the undecodable entry (as Pulsar's does), so it
    # is not redelivered to a new consumer of the subscription: the backlog drains.
    consumer.close()
    again = client.subscribe(topic, "s")
    with pytest.raises(magnetar.Timeout):
        again.receive(1000)
    assert again.undecodable_entries() == 0



@pytest.mark.cluster(brokers=1)
def test_spark_reads_a_range_that_ends_with_an_undecodable_entry(cluster, client):
    """Spark's reading task (``read_range``, a client reader) ends a range whose last
    entry does not decode there, instead of waiting for it until pollTimeoutMs and
    failing the query."""
    from magnetar.spark._broker import read_range
    from magnetar.spark._options import Connection

    topic = canonical("poison-spark")
    _entries_with_poison(cluster, client, topic, [b"a", b"b"], 1)
    conn = Connection(service_url=cluster.broker_urls[0], auth_token=None, admin_url=None)
    assert [m.data() for m in read_range(conn, topic, 0, 2, poll_timeout_ms=15_000)] == [b"a"]
