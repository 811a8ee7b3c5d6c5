"""What survives compaction (partition/survivors.py): Pulsar's latest-per-key rule with
tombstones, keyless messages, encrypted messages and chunked ones."""

from __future__ import annotations

from magnetar_broker.partition.survivors import Candidate, Survivors, candidates, compact_batch
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol import pulsar_api_pb2 as pulsar_pb
from magnetar_protocol.pulsar import batches, stored


def run(log: list[list[Candidate]], retain_null_key: bool = False) -> dict[int, list[int]]:
    """Both passes over entries 0..n-1: {entry id: kept indices} of the entries kept."""
    s = Survivors(retain_null_key=retain_null_key)
    for entry_id, entry in enumerate(log):
        for i, c in enumerate(entry):
            s.note((entry_id, i), c)
    return {e: kept for e, entry in enumerate(log) if (kept := s.kept(e, entry))}


def k(key: str | None, tombstone: bool = False) -> Candidate:
    return Candidate(key, tombstone=tombstone)


def test_the_latest_message_of_each_key_survives():
    log = [[k("a"), k("b")], [k("a")], [k("c"), k("b"), k("a")]]
    assert run(log) == {2: [0, 1, 2]}
    assert run([[k("a"), k("b")], [k("a")]]) == {0: [1], 1: [0]}


def test_a_tombstone_removes_its_key_and_itself():
    assert run([[k("a"), k("b")], [k("a", tombstone=True)]]) == {0: [1]}
    # A value after the tombstone is the key's latest again.
    assert run([[k("a")], [k("a", tombstone=True)], [k("a")]]) == {2: [0]}


def test_messages_without_a_key_go_unless_kept_on_purpose():
    log = [[k(None), k("a")], [k(None)]]
    assert run(log) == {0: [1]}
    assert run(log, retain_null_key=True) == {0: [0, 1], 1: [0]}


def test_encrypted_messages_are_never_compacted():
    enc = Candidate("a", encrypted=True)
    assert run([[enc, enc], [k("a")], [k("a", tombstone=True)]]) == {0: [0, 1]}
    assert run([[k("a")], [enc]]) == {0: [0], 1: [0]}   # it hides nothing of its key


def test_a_chunked_message_counts_once_and_its_chunks_go_together():
    def chunk(uuid: str, i: int, n: int, key: str = "a") -> list[Candidate]:
        return [Candidate(key, chunk=(uuid, i, n))]
    older = [chunk("m1", 0, 2), chunk("m1", 1, 2)]
    newer = [chunk("m2", 0, 2), chunk("m2", 1, 2)]
    assert run(older + newer) == {2: [0], 3: [0]}
    assert run(older + [[k("a")]]) == {2: [0]}
    assert run(newer + [[k("a", tombstone=True)]]) == {}
    # A message whose last chunk is not below the horizon keeps its chunks.
    assert run([[k("a")]] + [chunk("m3", 0, 3), chunk("m3", 1, 3)]) == {0: [0], 1: [0], 2: [0]}


def test_candidates_read_plain_messages_and_pulsar_entries_stored_as_sent():
    plain = pb.MessageBatch(messages=[pb.SingleMessage(payload=b"v", partition_key="a"),
                                      pb.SingleMessage(partition_key="b", null_value=True),
                                      pb.SingleMessage(payload=b"", partition_key="c"),
                                      pb.SingleMessage(payload=b"x")]).SerializeToString()
    assert candidates(plain) == [k("a"), k("b", True), k("c", True), k(None)]
    meta = pulsar_pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1, partition_key="e",
                                     num_messages_in_batch=2,
                                     encryption_keys=[pulsar_pb.EncryptionKeys(key="r", value=b"w")])
    sealed = stored.envelope_batch(meta.SerializeToString(), meta, b"ciphertext")
    assert candidates(sealed) == [Candidate("e", encrypted=True)] * 2


def test_the_compacted_batch_empties_what_goes_and_keeps_indices():
    batch = pb.MessageBatch(messages=[pb.SingleMessage(payload=f"m{i}".encode(), partition_key=f"k{i}",
                                                       sequence_id=i) for i in range(3)])
    out = pb.MessageBatch.FromString(compact_batch(batch.SerializeToString(), [1]))
    assert [m.payload for m in out.messages] == [b"", b"m1", b""]
    # A Pulsar batch stored as sent is opened to empty some of it.
    meta, payload = batches.to_pulsar_entry(batch, producer_name="p", publish_time=1, batched=True)
    env = stored.envelope_batch(meta.SerializeToString(), meta, payload)
    opened = pb.MessageBatch.FromString(compact_batch(env, [0, 2]))
    assert [m.payload for m in opened.messages] == [b"m0", b"", b"m2"]
    assert pb.MessageBatch.FromString(compact_batch(env, [0, 1, 2])).messages[0].pulsar_metadata
