"""The participants a coordinator can end in its own SQL transaction: those of the broker
hosting it (``MAGNETAR_HOST_COORDINATOR``; magnetar_broker.txnend.LocalEnds implements
this).  A typed seam, so the coordinator depends on what it calls and not on the
broker's code (services do not import each other)."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from magnetar_protocol.onerequest import OneRequestEnd, Outcome
from magnetar_protocol.txnid import TxnID

# The participants' plan (which partitions and subscriptions, in the order their writers
# are held): opaque to the coordinator, handed back as it came.
P = TypeVar("P")

# {transaction: (its registered partitions, its registered (topic, subscription)s)}
Found = dict[TxnID, tuple[list[str], list[tuple[str, str]]]]


class HeldParticipants(Protocol):
    """The participants of a group of ends, their writers held until ``release``."""

    async def write(self, conn: Any, found: Found) -> bool:
        """Write every participant's end in ``conn``'s SQL transaction.  False, nothing
        written: the participants ``found`` under the row locks are not the ones held,
        or one is not this path's to end (the caller rolls back: two phases)."""
        ...

    async def apply(self) -> None:
        """The SQL transaction committed: the in-memory effects."""
        ...

    async def release(self, unknown: bool = False) -> None:
        """Let the writers go; ``unknown``: the commit's outcome is not known (the
        participants are reloaded from the database)."""
        ...


class LocalParticipants(Protocol[P]):
    def plan(self, partitions: list[str], subscriptions: list[tuple[str, str]]) -> P | None:
        """The one-phase plan of a transaction with these participants, or None: one is
        not served here right now."""
        ...

    async def hold(self, ends: list[tuple[TxnID, bool, P]]) -> HeldParticipants | None:
        """Hold the writers of every participant of ``ends`` ((transaction, commit?,
        plan)), or None, nothing held: one is no longer served here."""
        ...


class LocalOneRequest(Protocol):
    """One-request transactions (docs/transactions.md): the hosting broker commits a
    transaction whose sends and acks travel with its commit, all in one SQL transaction
    with its status compare-and-set (magnetar_broker.onerequest.OneRequestEnds)."""

    async def commit(self, end: OneRequestEnd, actor: tuple[str, bool], tcid: int,
                     fence_epoch: int) -> Outcome:
        """Write ``end`` (a commit) with its status OPEN -> COMMITTED, checked against
        this coordinator's ``fence_epoch``; what became of it.  NotOwner, nothing
        written, when a participant is not served here."""
        ...

    async def release(self, txn: TxnID, subscriptions: list[tuple[str, str]]) -> None:
        """The transaction ended without this path (an abort): its held acks go."""
        ...
