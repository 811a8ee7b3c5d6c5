"""The stored-batch check (issue #20 finding 1): structure, count and sequence range."""

from __future__ import annotations

import pytest

from magnetar_broker.partition.batchcheck import batch_problem
from magnetar_protocol import magnetar_pb2 as pb


def _batch(*seqs: int, key: str | None = None) -> bytes:
    return pb.MessageBatch(messages=[pb.SingleMessage(payload=b"p", sequence_id=s, partition_key=key)
                                     for s in seqs]).SerializeToString()


def test_a_batch_the_client_makes_passes():
    assert batch_problem(_batch(3, 4, 5, key="k"), 3, 3, 5) is None
    assert batch_problem(_batch(7), 1, 7, 7) is None


@pytest.mark.parametrize("batch, n, lowest, highest, says", [
    (b"\xff" * 64, 3, 0, 2, "not a valid"),
    (_batch(0, 1, 2)[:-2], 3, 0, 2, "not a valid"),                 # truncated
    (_batch(0, 1), 3, 0, 2, "holds 2 messages but num_messages is 3"),
    (_batch(0, 1, 2), 2, 0, 1, "holds 3 messages"),
    (b"", 1, 0, 0, "holds 0 messages"),
    (_batch(5, 6), 2, 0, 1, "run 5..6"),                            # ids not the request's
    (_batch(0, 9), 2, 0, 1, "run 0..9"),
    (_batch(0) + b"\x0a\x04\x12\x02\xff\xfe", 2, 0, 0, "not a valid"),  # key not UTF-8
])
def test_a_malformed_batch_is_named(batch, n, lowest, highest, says):
    problem = batch_problem(batch, n, lowest, highest)
    assert problem is not None and says in problem
