"""A delivered entry (a stored batch) expands into Messages."""

from magnetar._message import expand
from magnetar._types import MessageId
from magnetar_protocol import magnetar_pb2 as pb

TOPIC = "persistent://public/default/t-partition-2"


def entry(n=3, indices=(), counts=(), entry_id=40):
    batch = pb.MessageBatch(messages=[
        pb.SingleMessage(payload=f"m{i}".encode(), sequence_id=100 + i,
                         partition_key=f"k{i}" if i == 1 else None,
                         properties={"i": str(i)}, event_time=1000 + i)
        for i in range(n)])
    return pb.DeliveredEntry(entry_id=entry_id, batch=batch.SerializeToString(), num_messages=n,
                             publish_time=1700000000123, producer_name="prod-1",
                             indices=list(indices), redelivery_counts=list(counts))


def test_empty_indices_deliver_every_message_for_the_first_time():
    msgs = expand(entry(), 2, TOPIC)
    assert [m.data() for m in msgs] == [b"m0", b"m1", b"m2"]
    assert [m.message_id() for m in msgs] == [MessageId(2, 40, i, 3) for i in range(3)]
    assert [m.message_id().batch_size() for m in msgs] == [3, 3, 3]
    assert [m.redelivery_count() for m in msgs] == [0, 0, 0]


def test_listed_indices_deliver_only_those_with_their_redelivery_counts():
    msgs = expand(entry(n=4, indices=[1, 3], counts=[2, 5]), 2, TOPIC)
    assert [m.data() for m in msgs] == [b"m1", b"m3"]
    assert [m.message_id().batch_index() for m in msgs] == [1, 3]
    assert [m.redelivery_count() for m in msgs] == [2, 5]


def test_missing_counts_mean_zero_and_indices_past_the_batch_are_skipped():
    msgs = expand(entry(n=2, indices=[0, 1, 7], counts=[4]), 2, TOPIC)
    assert [(m.data(), m.redelivery_count()) for m in msgs] == [(b"m0", 4), (b"m1", 0)]


def test_message_accessors():
    m = expand(entry(), 2, TOPIC)[1]
    assert m.partition_key() == "k1"
    assert m.properties() == {"i": "1"}
    assert m.publish_timestamp() == 1700000000123
    assert m.event_timestamp() == 1001
    assert m.topic_name() == TOPIC
    assert m.producer_name() == "prod-1"
    assert m.sequence_id() == 101
    assert m.value() == m.data() == b"m1"
    assert expand(entry(), 2, TOPIC)[0].partition_key() == ""


def test_non_partitioned_topic_ids_have_partition_minus_one():
    assert expand(entry(n=1), -1, "t")[0].message_id() == MessageId(-1, 40, 0, 1)
