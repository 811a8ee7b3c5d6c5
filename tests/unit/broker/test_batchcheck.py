"""The stored-batch check (issue #20 finding 1): structure, count and sequence range."""

from __future__ import annotations

import pytest

from magnetar_broker.partition.batchcheck import BatchProblem, BatchShape, batch_problem, checked_batch
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol import pulsar_api_pb2 as pb_pulsar
from magnetar_protocol.pulsar import stored


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


def _chunk(chunk_id: int, chunks: int = 3, seq: int = 4) -> bytes:
    metadata = pb_pulsar.MessageMetadata(producer_name="p", sequence_id=seq, publish_time=1, uuid=f"p-{seq}",
                                         chunk_id=chunk_id, num_chunks_from_msg=chunks, total_chunk_msg_size=30)
    return stored.envelope_batch(metadata.SerializeToString(), metadata, b"x" * 10)


def test_a_pulsar_entry_stored_as_sent_counts_for_its_messages_and_is_indivisible():
    metadata = pb_pulsar.MessageMetadata(producer_name="p", sequence_id=10, publish_time=1, num_messages_in_batch=5,
                                         encryption_keys=[pb_pulsar.EncryptionKeys(key="k", value=b"v")])
    data = stored.envelope_batch(metadata.SerializeToString(), metadata, b"sealed")
    assert checked_batch(data, 5, 10, 14) == BatchShape(indivisible=True, judged=True)
    assert "holds 5 messages but num_messages is 1" in batch_problem(data, 1, 10, 10)
    assert "run 10..14" in batch_problem(data, 5, 10, 12)


def test_only_a_messages_last_chunk_is_judged_for_dedup():
    assert checked_batch(_chunk(0), 1, 4, 4) == BatchShape(indivisible=True, judged=False)
    assert checked_batch(_chunk(1), 1, 4, 4).judged is False
    assert checked_batch(_chunk(2), 1, 4, 4).judged is True
    two = pb.MessageBatch.FromString(_chunk(0)).messages[:] + pb.MessageBatch.FromString(_chunk(1)).messages[:]
    joined = pb.MessageBatch(messages=two).SerializeToString()
    with pytest.raises(BatchProblem, match="travels alone"):
        checked_batch(joined, 2, 4, 4)
