"""A one-request transaction's end as plain values (docs/transactions.md, "One-request
transactions"): the sends the client kept and the acks the broker held, travelling with
the commit.  The coordinator translates the wire request into these and hands them to
the broker hosting it (the coordinator's ``LocalParticipants`` seam), so neither side
depends on the other's types.  Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import BadRequest
from magnetar_protocol.topics import TopicName, validate_name_part
from magnetar_protocol.txnid import TxnID

# A position in the log: (entry id, batch index; -1 = the whole entry).
Pos = tuple[int, int]


@dataclass(frozen=True, slots=True)
class KeptSend:
    """One batch the client kept in the transaction, for one partition."""
    topic: str          # the partition's full name
    producer_id: int    # the sending producer on the broker
    session_id: str
    batch: bytes        # a serialized MessageBatch, as the client built it
    num_messages: int
    lowest: int         # its sequence ids, given at commit
    highest: int


@dataclass(frozen=True, slots=True)
class HeldAcks:
    """The transaction's acks on one subscription (held by the broker since
    acknowledge(), or to be checked now)."""
    topic: str
    subscription: str
    positions: tuple[Pos, ...]
    cumulative: bool


@dataclass(frozen=True, slots=True)
class OneRequestEnd:
    txn: TxnID
    commit: bool
    sends: tuple[KeptSend, ...] = ()
    acks: tuple[HeldAcks, ...] = ()

    @property
    def partitions(self) -> tuple[str, ...]:
        """The partitions written, sorted (the order their writers are held in)."""
        return tuple(sorted({s.topic for s in self.sends}))

    @property
    def subscriptions(self) -> tuple[tuple[str, str], ...]:
        """The (topic, subscription)s acknowledged on, sorted."""
        return tuple(sorted({(a.topic, a.subscription) for a in self.acks}))


def from_wire(req: pb.EndTxnOneRequestRequest) -> OneRequestEnd:
    """The request as plain values; BadRequest for a malformed one (nothing is looked at
    before every part is checked)."""
    if req.action not in (pb.TXN_COMMIT, pb.TXN_ABORT):
        raise BadRequest(f"unknown transaction action {req.action}")
    commit = req.action == pb.TXN_COMMIT
    if not commit and req.sends:
        raise BadRequest("end-one-request: an abort carries no sends")
    sends = []
    for s in req.sends:
        if not s.batch or s.num_messages == 0:
            raise BadRequest("end-one-request: an empty batch (num_messages must be at least 1)")
        if s.highest_sequence_id < s.sequence_id:
            raise BadRequest("end-one-request: highest_sequence_id is below sequence_id")
        sends.append(KeptSend(TopicName.parse(s.topic).full, s.producer_id, s.session_id, s.batch,
                              s.num_messages, s.sequence_id, s.highest_sequence_id))
    acks = []
    for a in req.acks:
        if not a.positions:
            raise BadRequest("end-one-request: acks name no position")
        acks.append(HeldAcks(TopicName.parse(a.topic).full, validate_name_part("subscription", a.subscription),
                             tuple((p.entry_id, p.batch_index) for p in a.positions), a.cumulative))
    return OneRequestEnd(TxnID.from_wire(req.txn), commit, tuple(sends), tuple(acks))


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of a one-request commit at the broker.  ``committed``: written now.
    Else nothing was written, and: ``refused``, a send or ack the broker refused (the
    transaction must be aborted: TransactionHasOperationFailed with this cause); or the
    transaction was not OPEN (``status``, ``expired``) or its key moved on (not
    ``key_ok``); or the hosted coordinator lost its TCID (``fence_lost``)."""
    committed: bool = False
    refused: Exception | None = None
    status: int | None = None
    expired: bool = False
    key_ok: bool = True
    fence_lost: bool = False
