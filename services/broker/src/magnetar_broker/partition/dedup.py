"""PIP-6 deduplication rules.  Pure: no I/O.

State per (topic, producer name): the highest sequence id persisted.  A batch carries
its lowest and highest sequence id (strictly increasing inside the batch).
"""

from __future__ import annotations

import enum

from google.protobuf.message import DecodeError

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import BadRequest


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
    try:
        parsed = pb.MessageBatch.FromString(batch)
    except DecodeError:
        raise BadRequest("send: the batch is not a valid MessageBatch") from None
    kept = [m for m in parsed.messages if m.sequence_id > last_persisted]
    if not kept:
        # The header promised ids above what is stored (highest_sequence_id), the
        # messages themselves do not carry any: the client's batch contradicts itself.
        raise BadRequest(f"send: highest_sequence_id is above the last stored sequence id "
                         f"{last_persisted}, but no message in the batch is")
    out = pb.MessageBatch(messages=kept)
    return out.SerializeToString(), len(kept), kept[0].sequence_id, kept[-1].sequence_id
