"""The transaction status machine.  Pure: no I/O.

    OPEN ──commit──▶ COMMITTING ──all participants done──▶ COMMITTED
      │
      └───abort / timeout──▶ ABORTING ──all participants done──▶ ABORTED

Every transition is durable (compare-and-set on the row) before it is acted on.
"""

from __future__ import annotations

import enum

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import ExpiredTransactionError, InvalidTxnStatusError
from magnetar_protocol.txnid import TxnID

OPEN = pb.TXN_OPEN
COMMITTING = pb.TXN_COMMITTING
COMMITTED = pb.TXN_COMMITTED
ABORTING = pb.TXN_ABORTING
ABORTED = pb.TXN_ABORTED
NAMES: dict[int, str] = {OPEN: "OPEN", COMMITTING: "COMMITTING", COMMITTED: "COMMITTED",
         ABORTING: "ABORTING", ABORTED: "ABORTED"}
UNFINISHED = (OPEN, COMMITTING, ABORTING)

_NEXT: dict[int, set[int]] = {OPEN: {COMMITTING, ABORTING}, COMMITTING: {COMMITTED}, ABORTING: {ABORTED}}


def can_transition(current: int, target: int) -> bool:
    return target in _NEXT.get(current, set())


class Step(enum.Enum):
    START = "start"      # write COMMITTING/ABORTING, then drive participants
    RESUME = "resume"    # already ending this way: drive participants (again) and finish
    DONE = "done"        # already ended this way: answer success


def ending_status(action: int) -> pb.TxnStatus:
    return COMMITTING if action == pb.TXN_COMMIT else ABORTING


def final_status(action: int) -> pb.TxnStatus:
    return COMMITTED if action == pb.TXN_COMMIT else ABORTED


def plan_end(current: int, action: int, expired: bool = False) -> Step:
    """What EndTxn(action) does to a transaction in ``current`` status.

    Repeating the same action is idempotent; the opposite action on an ending or ended
    transaction is refused; committing a transaction aborted because its key was fenced
    (``expired``) gets ExpiredTransactionError.
    """
    if expired and action == pb.TXN_COMMIT and current in (ABORTING, ABORTED):
        raise ExpiredTransactionError(
            "the transaction was aborted because a newer connection took over its "
            "transaction key: this client was fenced")
    if current == OPEN:
        return Step.START
    if current == ending_status(action):
        return Step.RESUME
    if current == final_status(action):
        return Step.DONE
    verb = "commit" if action == pb.TXN_COMMIT else "abort"
    raise InvalidTxnStatusError(f"cannot {verb} a transaction that is {NAMES[current]}")


def require_open(current: int, what: str, expired: bool = False) -> None:
    if current != OPEN and expired:
        raise ExpiredTransactionError(
            f"{what}: the transaction was aborted because a newer connection took over its "
            "transaction key: this client was fenced")
    if current != OPEN:
        raise InvalidTxnStatusError(f"{what}: the transaction is {NAMES[current]}, not OPEN")


def txn_str(most: int, least: int) -> str:
    return str(TxnID(most, least))
