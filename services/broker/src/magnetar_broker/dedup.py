"""PIP-6 deduplication rules.  Pure: no I/O.

State per (topic, producer name): the highest sequence id persisted.  A batch carries
its lowest and highest sequence id (strictly increasing inside the batch).
"""

from __future__ import annotations

import enum

from magnetar_protocol import magnetar_pb2 as pb


class Verdict(enum.Enum):
    ADMIT = "admit"            # every message is new
    DUPLICATE = "duplicate"    # every message was already persisted: store nothing
    PARTIAL = "partial"        # some messages are new: store only those


def judge(last_persisted: int, lowest: int, highest: int) -> Verdict:
    """Classify a batch against the producer's last persisted sequence id.

    Sequence ids may have gaps; any id at or below the highest persisted one is a
    duplicate (Pulsar's rule).
    """
    if highest <= last_persisted:
        return Verdict.DUPLICATE
    if lowest <= last_persisted:
        return Verdict.PARTIAL
    return Verdict.ADMIT


def drop_persisted(batch: bytes, last_persisted: int) -> tuple[bytes, int, int, int]:
    """Keep only the messages of ``batch`` above ``last_persisted``.

    Returns (new batch bytes, message count, lowest id, highest id).  Rare path: a
    producer whose retry straddles what the broker already stored.
    """
    parsed = pb.MessageBatch.FromString(batch)
    kept = [m for m in parsed.messages if m.sequence_id > last_persisted]
    out = pb.MessageBatch(messages=kept)
    return out.SerializeToString(), len(kept), kept[0].sequence_id, kept[-1].sequence_id
