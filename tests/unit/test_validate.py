"""magnetar_protocol.validate: the edge range checks every protobuf route and the admin's
JSON bodies run (issue 20, finding 5)."""

from __future__ import annotations

import pytest

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import BadRequest
from magnetar_protocol.validate import INT32_MAX, INT64_MAX, check_json, check_message, check_text


@pytest.mark.parametrize("msg, where", [
    (pb.SendRequest(producer_id=INT64_MAX + 1), "SendRequest.producer_id = 9223372036854775808"),
    (pb.SendRequest(sequence_id=2**64 - 1), "SendRequest.sequence_id"),
    (pb.SendRequest(highest_sequence_id=2**63), "SendRequest.highest_sequence_id"),
    (pb.SendRequest(num_messages=INT32_MAX + 1), "SendRequest.num_messages"),
    (pb.SendBatchesRequest(batches=[pb.SendRequest(), pb.SendRequest(txn=pb.TxnId(least_bits=2**63))]),
     "SendBatchesRequest.batches[1].txn.least_bits"),
    (pb.AckRequest(positions=[pb.Position(batch_index=3), pb.Position(batch_index=-2)]),
     "AckRequest.positions[1].batch_index = -2"),
    (pb.AckRequest(positions=[pb.Position(entry_id=2**64 - 1)]), "AckRequest.positions[0].entry_id"),
    (pb.SeekRequest(position=pb.Position(batch_index=-(2**31))), "SeekRequest.position.batch_index"),
    (pb.SubscribeRequest(start_position=pb.Position(batch_index=-7)), "SubscribeRequest.start_position"),
    (pb.AckRequest(ack_type=9), "AckRequest.ack_type = 9 is not a AckType value"),
    (pb.EndTxnRequest(action=5), "EndTxnRequest.action"),
    (pb.NewTxnRequest(timeout_ms=2**63), "NewTxnRequest.timeout_ms"),
    (pb.FetchRequest(wait_ms=2**32 - 1), "FetchRequest.wait_ms"),
    (pb.CreateProducerRequest(producer_name="p\x00"), "CreateProducerRequest.producer_name contains a NUL"),
    (pb.AddPartitionToTxnRequest(topics=["ok", "b\x00d"]), "AddPartitionToTxnRequest.topics[1]"),
    (pb.AddSubscriptionToTxnRequest(subscriptions=[pb.TxnSubscription(subscription="\x00")]),
     "AddSubscriptionToTxnRequest.subscriptions[0].subscription"),
    (pb.DeleteKeyRequest(owner="a\x00"), "DeleteKeyRequest.owner"),
    (pb.BatchRequest(calls=[pb.BatchCall(path="/v1/\x00")]), "BatchRequest.calls[0].path"),
    (pb.SubscribeRequest(priority_level=-1), "SubscribeRequest.priority_level"),
    (pb.EndTxnRequest(txn=pb.TxnId(most_bits=INT32_MAX + 1)), "EndTxnRequest.txn.most_bits"),
])
def test_refused_values_name_the_field(msg, where):
    with pytest.raises(BadRequest) as raised:
        check_message(msg)
    assert where in str(raised.value)


@pytest.mark.parametrize("msg", [
    pb.SendRequest(producer_id=INT64_MAX, sequence_id=0, highest_sequence_id=INT64_MAX,
                   num_messages=INT32_MAX, batch=b"\x00\xff" * 10,
                   txn=pb.TxnId(most_bits=INT32_MAX, least_bits=INT64_MAX)),
    pb.AckRequest(consumer_id=1, ack_type=pb.ACK_CUMULATIVE,
                  positions=[pb.Position(entry_id=i, batch_index=i - 1) for i in range(100)]),
    pb.SeekRequest(position=pb.Position(batch_index=-1)),
    pb.ConnectKeyRequest(transaction_key="ünï/☃ key", epoch=-1),  # -1: a new connection
    pb.NewTxnRequest(key_epoch=-(2**63)),  # signed fields keep their wire range
    pb.SendRequest(batch=pb.MessageBatch(messages=[pb.SingleMessage(
        payload=b"\x00", partition_key="k\x00", properties={"a\x00": "b"})]).SerializeToString()),
    pb.LookupCoordinatorsRequest(),
])
def test_valid_requests_pass(msg):
    check_message(msg)  # payloads (bytes) are not the edge's business, even with NULs inside


def test_a_message_with_a_map_is_walked():
    single = pb.SingleMessage(properties={"k": "v"})
    check_message(single)
    with pytest.raises(BadRequest, match=r"SingleMessage.properties\['k'\] contains a NUL"):
        check_message(pb.SingleMessage(properties={"k": "v\x00"}))
    with pytest.raises(BadRequest, match=r"SingleMessage.properties\[key\]"):
        check_message(pb.SingleMessage(properties={"\x00": "v"}))


def test_text_and_json():
    assert check_text("owner", "bob") == "bob"
    with pytest.raises(BadRequest, match="owner contains a NUL"):
        check_text("owner", "b\x00b")
    with pytest.raises(BadRequest, match="not valid Unicode"):
        check_text("owner", "\ud800")
    body = {"adminRoles": ["a", "b"], "n": INT64_MAX, "x": [1.5, None, True]}
    assert check_json(body) is body
    with pytest.raises(BadRequest, match=r"the body.adminRoles\[1\] contains a NUL"):
        check_json({"adminRoles": ["a", "b\x00"]})
    with pytest.raises(BadRequest, match="a key of the body"):
        check_json({"\x00": 1})
    with pytest.raises(BadRequest, match="does not fit a signed 64-bit"):
        check_json({"replicas": 2**64})
