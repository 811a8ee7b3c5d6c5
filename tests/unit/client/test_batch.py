"""Batch building: sequence ids, the rules that seal a batch, and the wire encoding."""

import pytest

from magnetar._batch import Batcher, message_fields
from magnetar_protocol import magnetar_pb2 as pb


class Collecting(Batcher):
    """A Batcher whose sealed batches are kept for inspection."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sealed = []
        self.opened = 0

    def _opened(self, batch):
        self.opened += 1

    def _sealed(self, batch):
        self.sealed.append(batch)


def seqs(batch):
    return [m.sequence_id for m in pb.MessageBatch.FromString(batch.data).messages]


def test_sequence_ids_continue_from_the_counter():
    b = Collecting(max_messages=10, max_bytes=1 << 20)
    b.next_seq = 42
    for _ in range(3):
        b.add(b"x", None)
    b.seal_all()
    assert seqs(b.sealed[0]) == [42, 43, 44]
    assert (b.sealed[0].lowest, b.sealed[0].highest) == (42, 44)
    assert b.next_seq == 45


def test_a_given_sequence_id_moves_the_counter_past_it():
    b = Collecting(max_messages=10, max_bytes=1 << 20)
    b.add(b"a", None, seq=100)
    b.add(b"b", None)
    b.seal_all()
    assert seqs(b.sealed[0]) == [100, 101]


def test_a_given_sequence_id_not_above_the_batch_highest_starts_a_new_batch():
    b = Collecting(max_messages=10, max_bytes=1 << 20)
    b.add(b"a", None, seq=5)
    b.add(b"b", None, seq=7)
    b.add(b"c", None, seq=7)   # equal: not strictly increasing
    b.add(b"d", None, seq=3)   # lower
    b.seal_all()
    assert [seqs(x) for x in b.sealed] == [[5, 7], [7], [3]]
    assert [(x.lowest, x.highest) for x in b.sealed] == [(5, 7), (7, 7), (3, 3)]


def test_a_lower_given_id_does_not_move_the_counter_back():
    b = Collecting(max_messages=10, max_bytes=1 << 20)
    b.add(b"a", None)            # 0
    b.add(b"b", None, seq=50)
    b.add(b"c", None, seq=10)    # new batch, counter stays at 51
    b.add(b"d", None)
    b.seal_all()
    assert [seqs(x) for x in b.sealed] == [[0, 50], [10, 51]]


def test_batch_seals_at_max_messages():
    b = Collecting(max_messages=3, max_bytes=1 << 20)
    for _ in range(7):
        b.add(b"x", None)
    assert [len(x) for x in b.sealed] == [3, 3]
    assert b.current is not None and len(b.current) == 1


def test_batch_seals_before_exceeding_max_bytes_and_a_large_message_travels_alone():
    b = Collecting(max_messages=100, max_bytes=10)
    b.add(b"aaaa", None)
    b.add(b"bbbb", None)
    b.add(b"cccc", None)            # 12 > 10: seals [a, b]
    b.add(b"z" * 50, None)          # larger than the limit: alone
    b.add(b"d", None)
    b.seal_all()
    assert [[m.payload for m in pb.MessageBatch.FromString(x.data).messages] for x in b.sealed] == [
        [b"aaaa", b"bbbb"], [b"cccc"], [b"z" * 50], [b"d"]]


def test_batching_disabled_sends_every_message_alone():
    b = Collecting(max_messages=1000, max_bytes=1 << 20, batching=False)
    for _ in range(3):
        b.add(b"x", None)
    assert [len(x) for x in b.sealed] == [1, 1, 1]
    assert b.current is None


def test_transactional_messages_are_batched_per_transaction():
    b = Collecting(max_messages=100, max_bytes=1 << 20)
    t1, t2 = object(), object()
    b.add(b"plain", None)
    b.add(b"one", None, txn=t1)
    b.add(b"two", None, txn=t2)
    b.add(b"one-again", None, txn=t1)
    b.seal_all()
    by_txn = {x.txn: [m.payload for m in pb.MessageBatch.FromString(x.data).messages] for x in b.sealed}
    assert by_txn == {None: [b"plain"], t1: [b"one", b"one-again"], t2: [b"two"]}


def test_callbacks_follow_their_messages_in_order():
    b = Collecting(max_messages=2, max_bytes=1 << 20)
    for name in "abcd":
        b.add(name.encode(), name)
    assert [x.callbacks for x in b.sealed] == [["a", "b"], ["c", "d"]]


def test_sealing_twice_sends_once():
    b = Collecting(max_messages=10, max_bytes=1 << 20)
    batch = b.add(b"x", None)
    b.seal(batch)
    b.seal(batch)
    assert len(b.sealed) == 1


def test_encoding_carries_optional_fields_only_where_given():
    b = Collecting(max_messages=10, max_bytes=1 << 20)
    b.add(b"plain", None)
    b.add(b"keyed", None, message_fields({"k": "v", "n": 1}, "key-1", 1700000000000))
    b.seal_all()
    plain, keyed = pb.MessageBatch.FromString(b.sealed[0].data).messages
    assert not plain.HasField("partition_key") and not plain.properties and plain.event_time == 0
    assert keyed.partition_key == "key-1"
    assert dict(keyed.properties) == {"k": "v", "n": "1"}
    assert keyed.event_time == 1700000000000


def test_message_fields_validation():
    assert message_fields() is None
    assert message_fields({}, None, 0) is None
    with pytest.raises(TypeError):
        message_fields(partition_key=b"bytes-key")
    with pytest.raises(ValueError):
        message_fields(event_timestamp=-1)


def test_an_ordering_key_is_bytes_on_the_wire():
    assert message_fields(ordering_key="o") == {"ordering_key": b"o"}
    assert message_fields(ordering_key=b"") == {"ordering_key": b""}    # empty is still a key
    with pytest.raises(TypeError):
        message_fields(ordering_key=7)
    b = Collecting(max_messages=10, max_bytes=1 << 20)
    b.add(b"ordered", None, message_fields(ordering_key=b"\x00o"))
    b.add(b"plain", None)
    b.seal_all()
    ordered, plain = pb.MessageBatch.FromString(b.sealed[0].data).messages
    assert ordered.ordering_key == b"\x00o" and not plain.HasField("ordering_key")


def test_a_producers_schema_version_is_on_every_message_even_when_a_kept_batch_is_renumbered():
    b = Collecting(max_messages=10, max_bytes=1000)
    b.schema_version = 3
    for _ in range(2):
        b.add(b"m", None)
    b.seal_all()
    [batch] = b.sealed
    versions = [m.schema_version for m in pb.MessageBatch.FromString(batch.data).messages]
    assert versions == [3, 3]
    batch.renumber(40)   # a one-request transaction's kept batch, sent later
    decoded = pb.MessageBatch.FromString(batch.data).messages
    assert [(m.sequence_id, m.schema_version) for m in decoded] == [(40, 3), (41, 3)]
    plain = Collecting(max_messages=10, max_bytes=1000)
    plain.add(b"m", None)
    plain.seal_all()
    assert not pb.MessageBatch.FromString(plain.sealed[0].data).messages[0].HasField("schema_version")
