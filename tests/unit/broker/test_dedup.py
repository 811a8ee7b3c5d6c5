from magnetar_broker.partition.dedup import Verdict, drop_persisted, judge
from magnetar_protocol import magnetar_pb2 as pb


def test_new_batch_is_admitted():
    assert judge(-1, 0, 9) is Verdict.ADMIT
    assert judge(9, 10, 10) is Verdict.ADMIT


def test_gaps_are_allowed():
    assert judge(5, 100, 200) is Verdict.ADMIT


def test_at_or_below_highest_is_duplicate():
    assert judge(9, 0, 9) is Verdict.DUPLICATE
    assert judge(9, 3, 3) is Verdict.DUPLICATE


def test_straddling_batch_keeps_only_new_messages():
    assert judge(4, 3, 6) is Verdict.PARTIAL
    batch = pb.MessageBatch(messages=[pb.SingleMessage(payload=b"%d" % i, sequence_id=i)
                                      for i in range(3, 7)]).SerializeToString()
    kept, n, lo, hi = drop_persisted(batch, 4)
    assert (n, lo, hi) == (2, 5, 6)
    assert [m.payload for m in pb.MessageBatch.FromString(kept).messages] == [b"5", b"6"]
