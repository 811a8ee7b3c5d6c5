"""Issue #20 finding 3 end to end: a batch index that names no message of its entry is
refused with 400 on every route that takes one (ack, transactional ack, redeliver, seek,
reader start), before it becomes a bit of a mask; the subscription works on after."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

import magnetar
from magnetar_protocol import magnetar_pb2 as pb

pytestmark = pytest.mark.e2e

HUGE = 2**31 - 1  # per bit, this seek or reader start would have held a broker for hours


def _call(url: str, path: str, message, reply_type=None):
    """(status, reply or Error) of one protobuf call."""
    req = urllib.request.Request(url + path, data=message.SerializeToString(), method="POST",
                                 headers={"content-type": "application/x-protobuf"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            body = resp.read()
            return resp.status, reply_type.FromString(body) if reply_type else body
    except urllib.error.HTTPError as err:
        return err.code, pb.Error.FromString(err.read())


def _refused(status_and_error, *words: str) -> None:
    status, err = status_and_error
    assert status == 400 and err.code == pb.BAD_REQUEST, (status, err)
    for word in words:
        assert word in err.message, err.message


@pytest.mark.cluster(brokers=1)
def test_batch_indexes_past_the_entry_are_refused_everywhere(cluster, client):
    topic = "bounds"
    producer = client.create_producer(topic, batching_max_publish_delay_ms=50)
    for i in range(3):
        producer.send_async(b"m%d" % i, lambda result, msg_id: None)
    producer.flush()  # one entry of 3 messages
    consumer = client.subscribe(topic, "s", initial_position=magnetar.InitialPosition.Earliest)
    first = consumer.receive(10000)
    assert first.message_id().batch_size() == 3
    entry = first.message_id().entry_id()
    part = consumer._c.parts[0]
    url, cid = part.url, part.consumer_id

    def ack(index: int, **more):
        return _call(url, "/v1/consumers/ack", pb.AckRequest(
            consumer_id=cid, positions=[pb.Position(entry_id=entry, batch_index=index)], **more))

    _refused(ack(2**27), "batch_index 134217728", "holds 3 message(s)")
    _refused(ack(3), "holds 3")
    # Negatives below -1 are refused by the edge check of every request's fields first.
    _refused(ack(-2), "batch_index = -2 is out of range [-1")
    _refused(ack(HUGE, ack_type=pb.ACK_CUMULATIVE), "holds 3")
    _refused(_call(url, "/v1/consumers/redeliver", pb.RedeliverRequest(
        consumer_id=cid, positions=[pb.Position(entry_id=entry, batch_index=2**20)])), "holds 3")
    _refused(_call(url, "/v1/consumers/seek", pb.SeekRequest(
        consumer_id=cid, position=pb.Position(entry_id=entry, batch_index=HUGE))), "seek", "holds 3")
    _refused(_call(url, "/v1/consumers/seek", pb.SeekRequest(
        consumer_id=cid, position=pb.Position(entry_id=entry, batch_index=-5))), "batch_index = -5 is out of range [-1")
    txn = client.new_transaction()
    txn_id = pb.TxnId(most_bits=txn.txn_id.most_bits, least_bits=txn.txn_id.least_bits)
    _refused(ack(1000, txn=txn_id), "transactional ack", "holds 3")
    txn.abort()

    # A reader starting at an index past the entry, on a session of its own.
    status, session = _call(url, "/v1/sessions/open", pb.OpenSessionRequest(client_name="t"),
                            pb.OpenSessionResponse)
    assert status == 200
    for index, reason in ((HUGE, "reader start"), (3, "reader start"),
                          (-7, "batch_index = -7 is out of range [-1")):
        _refused(_call(url, "/v1/consumers/subscribe", pb.SubscribeRequest(
            session_id=session.session_id, topic=topic, durable=False,
            start_position=pb.Position(entry_id=entry, batch_index=index), start_inclusive=True)),
            reason)

    # Nothing half-done: valid indexes still work and the stored cursor stays small.
    assert ack(1)[0] == 200
    assert _call(url, "/v1/consumers/seek", pb.SeekRequest(
        consumer_id=cid, position=pb.Position(entry_id=entry, batch_index=2)))[0] == 200
    sizes = cluster.query("SELECT length(acked_state) FROM subscriptions WHERE subscription = 's'")
    assert sizes and all(row[0] < 100 for row in sizes), sizes
    reader = client.create_reader(topic, magnetar.MessageId(-1, entry, 1, 3),
                                  start_message_id_inclusive=True)
    assert reader.read_next(10000).data() == b"m1"
