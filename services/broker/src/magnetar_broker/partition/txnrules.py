"""A partition's transaction buffer state and the errors of its rules.  Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import (
    AuthorizationError,
    ExpiredTransactionError,
    InvalidTxnStatusError,
    MagnetarError,
    TransactionNotFound,
)
from magnetar_protocol.txnid import TxnID

Actor = tuple[str, bool]  # the request's role, and whether it may act for any owner


@dataclass
class TxnBuf:
    batches: int = 0
    messages: int = 0
    payloads: list[bytes] | None = field(default_factory=list)  # None: not all in memory
    size: int = 0
    committed: bool | None = None  # the outcome on this partition, once ended
    registered: bool = False
    owner: str | None = None  # the transaction's role, known once registered here

    def copy(self) -> "TxnBuf":
        return TxnBuf(self.batches, self.messages,
                      None if self.payloads is None else list(self.payloads),
                      self.size, self.committed, self.registered, self.owner)


def ended_error(txn: TxnID, committed: bool) -> InvalidTxnStatusError:
    return InvalidTxnStatusError(
        f"transaction {TxnID(*txn)} is already {'committed' if committed else 'aborted'}")


def expired_error(txn: TxnID) -> ExpiredTransactionError:
    return ExpiredTransactionError(
        f"transaction {TxnID(*txn)} was aborted because a newer connection took over its "
        "transaction key: this client was fenced")


def not_open_error(txn: TxnID, expired: bool) -> MagnetarError:
    if expired:
        return expired_error(txn)
    return InvalidTxnStatusError(f"transaction {TxnID(*txn)} is no longer open")


def may_act(actor: Actor, owner: str | None) -> bool:
    """May the sender act in a transaction owned by ``owner``?"""
    return actor[1] or (owner is not None and owner == actor[0])


def not_owner_error(txn: TxnID, what: str, actor: Actor) -> AuthorizationError:
    return AuthorizationError(f"{what} in transaction {TxnID(*txn)}: role {actor[0]!r} is "
                              "neither its owner nor a superuser")


def registration_refused(txn: TxnID, what: str, status: int | None, expired: bool,
                         owner: str | None, actor: Actor) -> MagnetarError:
    """Why the broker could not register ``what`` with the transaction (the first send
    or ack there): it does not exist, is no longer OPEN, or belongs to another role."""
    if status is None:
        return TransactionNotFound(f"transaction {TxnID(*txn)} does not exist")
    if status == pb.TXN_OPEN and not may_act(actor, owner):
        return not_owner_error(txn, what, actor)
    return not_open_error(txn, expired)  # ended, or began ending while we registered
