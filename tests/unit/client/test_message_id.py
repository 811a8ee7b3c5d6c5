"""MessageId: accessors, ordering (as Pulsar orders ids), serialization."""

import pytest

import magnetar
from magnetar import MessageId
from magnetar_protocol import magnetar_pb2 as pb


def test_accessors():
    m = MessageId(2, 17, 3, 10)
    assert (m.partition(), m.entry_id(), m.batch_index(), m.batch_size()) == (2, 17, 3, 10)
    assert m.ledger_id() == 0


def test_order_is_entry_then_partition_then_batch_index():
    ids = [MessageId(0, 5, 1), MessageId(-1, 5, 0), MessageId(0, 4, 9), MessageId(0, 5, 0), MessageId(1, 5, 0)]
    assert sorted(ids) == [MessageId(0, 4, 9), MessageId(-1, 5, 0), MessageId(0, 5, 0),
                           MessageId(0, 5, 1), MessageId(1, 5, 0)]
    assert MessageId(0, 5, 0) < MessageId(0, 5, 1) <= MessageId(0, 5, 1)
    assert MessageId(0, 6, 0) > MessageId(0, 5, 9) >= MessageId(0, 5, 9)


def test_earliest_and_latest_bound_every_message():
    for m in [MessageId(-1, 0, 0), MessageId(3, 0, 0), MessageId(0, 2**40, 999)]:
        assert MessageId.earliest < m < MessageId.latest
    assert MessageId.latest.entry_id() == 2**63 - 1


def test_equality_and_hash_ignore_batch_size():
    assert MessageId(1, 2, 3, 10) == MessageId(1, 2, 3, 0)
    assert hash(MessageId(1, 2, 3, 10)) == hash(MessageId(1, 2, 3, 0))
    assert MessageId(1, 2, 3) != MessageId(1, 2, 4)
    assert len({MessageId(1, 2, 3), MessageId(1, 2, 3, 5)}) == 1


def test_comparing_with_other_types():
    assert MessageId(1, 2, 3) != "(1,2,3)"
    with pytest.raises(TypeError):
        _ = MessageId(1, 2, 3) < (1, 2, 3)


@pytest.mark.parametrize("mid", [
    MessageId(3, 12345678901, 7, 100), MessageId(-1, 0, -1), MessageId.earliest, MessageId.latest,
    MessageId(-1, -1, -1), MessageId(0, 5, -1, 0),
])
def test_serialize_round_trip(mid):
    back = MessageId.deserialize(mid.serialize())
    assert back == mid
    assert (back.partition(), back.entry_id(), back.batch_index(), back.batch_size()) == (
        mid.partition(), mid.entry_id(), mid.batch_index(), mid.batch_size())


def test_serialized_form_is_message_id_data():
    wire = pb.MessageIdData.FromString(MessageId(2, 9, 1, 4).serialize())
    assert (wire.partition, wire.entry_id, wire.batch_index, wire.batch_size) == (2, 9, 1, 4)


def test_deserialize_reads_the_first_release_format_of_entry_minus_one():
    legacy = pb.MessageIdData(partition=1, entry_id=0, batch_index=-1).SerializeToString() + b"\x00"
    assert MessageId.deserialize(legacy).entry_id() == -1


def test_str_and_repr():
    assert str(MessageId(1, 2, 3)) == "(1,2,3)"
    assert "entry_id=2" in repr(MessageId(1, 2, 3))
    assert magnetar.MessageId is MessageId
