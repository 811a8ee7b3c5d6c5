"""Acknowledgements made inside transactions (PIP-31 pending ack).  Pure: no I/O.

Pulsar's rules: a message can be pending in one transaction only; acknowledging a
message that is acknowledged or pending elsewhere is a conflict; at most one
transaction holds a cumulative ack on a subscription, and it only moves forward.
Pending messages are neither delivered nor redelivered until their transaction ends.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from magnetar_broker.subscription.cursor import WHOLE, full_mask
from magnetar_protocol.errors import TransactionConflict
from magnetar_protocol.txnid import TxnID


class Acked(Protocol):
    """What the checks read of a subscription's acknowledgements (its Cursor, or a view
    that also knows its due delayed messages)."""

    @property
    def mark_delete(self) -> int: ...
    def is_acked(self, entry_id: int, index: int) -> bool: ...


def _s(txn: TxnID) -> str:
    return str(TxnID(*txn))


def _order(entry_id: int, index: int) -> tuple[int, float]:
    """A position's place in the log: a whole entry (WHOLE) comes after its every index."""
    return entry_id, (float("inf") if index == WHOLE else index)


class PendingAcks:
    def __init__(self) -> None:
        self.by_entry: dict[int, dict[int, TxnID]] = {}   # entry -> index (or WHOLE) -> txn
        self.cumulative: tuple[TxnID, int, int] | None = None  # (txn, entry, index)
        # txn -> its individual positions, so ending one transaction costs its own size.
        self.by_txn: dict[TxnID, set[tuple[int, int]]] = {}

    def load(self, rows: Iterable[tuple[int, int, int, int, bool]]) -> None:
        for entry_id, index, most, least, cumulative in rows:
            if cumulative:
                if self.cumulative is None or _order(entry_id, index) > _order(*self.cumulative[1:]):
                    self.cumulative = (TxnID(most, least), entry_id, index)
            else:
                txn = TxnID(most, least)
                self.by_entry.setdefault(entry_id, {})[index] = txn
                self.by_txn.setdefault(txn, set()).add((entry_id, index))

    def holds(self, txn: TxnID) -> bool:
        """Whether the transaction has acks pending here (so it has not ended here)."""
        return txn in self.by_txn or bool(self.cumulative and self.cumulative[0] == txn)

    def holder(self, entry_id: int, index: int) -> TxnID | None:
        held = self.by_entry.get(entry_id)
        if held:
            if index == WHOLE:
                return next(iter(held.values()))
            return held.get(index) or held.get(WHOLE)
        return None

    def check_individual(self, txn: TxnID, positions: list[tuple[int, int]], cursor: Acked) -> list[Any]:
        """Positions this transaction newly acknowledges; TransactionConflict on any clash."""
        fresh = []
        for entry_id, index in positions:
            if cursor.is_acked(entry_id, index):
                raise TransactionConflict(
                    f"message {entry_id}:{index} is already acknowledged; transaction {_s(txn)} conflicts")
            holder = self.holder(entry_id, index)
            if holder is not None and holder != txn:
                raise TransactionConflict(
                    f"message {entry_id}:{index} is pending in transaction {_s(holder)}")
            if self.cumulative and self.cumulative[0] != txn and \
                    (entry_id, index) <= (self.cumulative[1], self.cumulative[2]):
                raise TransactionConflict(
                    f"message {entry_id}:{index} is under transaction {_s(self.cumulative[0])}'s cumulative ack")
            if holder is None:
                fresh.append((entry_id, index))
        return fresh

    def check_cumulative(self, txn: TxnID, entry_id: int, index: int, cursor: Acked) -> None:
        if self.cumulative and self.cumulative[0] != txn:
            raise TransactionConflict(
                f"transaction {_s(self.cumulative[0])} already holds a cumulative ack on this subscription")
        if entry_id <= cursor.mark_delete or cursor.is_acked(entry_id, index):
            raise TransactionConflict(f"cumulative ack to {entry_id}:{index} is behind the acknowledged position")
        if self.cumulative and _order(entry_id, index) <= _order(*self.cumulative[1:]):
            # Pulsar's PendingAckHandleImpl rule: at or below the held position conflicts.
            raise TransactionConflict(
                f"cumulative ack to {entry_id}:{index} is at or below the position {self.cumulative[1]}:"
                f"{self.cumulative[2]} transaction {_s(txn)} already holds; it can only move forward")
        for e, held in self.by_entry.items():
            if e <= entry_id and any(t != txn for t in held.values()):
                raise TransactionConflict(
                    f"message in entry {e} is pending in another transaction before {entry_id}:{index}")

    def add(self, txn: TxnID, positions: list[tuple[int, int]], cumulative: bool) -> None:
        if cumulative:
            entry_id, index = positions[-1]
            self.cumulative = (txn, entry_id, index)
            return
        mine = self.by_txn.setdefault(txn, set())
        for entry_id, index in positions:
            self.by_entry.setdefault(entry_id, {})[index] = txn
            mine.add((entry_id, index))

    def peek(self, txn: TxnID) -> tuple[list[tuple[int, int]], tuple[int, int] | None]:
        """What ``take`` would return, leaving everything held."""
        cumulative = None
        if self.cumulative and self.cumulative[0] == txn:
            cumulative = (self.cumulative[1], self.cumulative[2])
        return sorted(self.by_txn.get(txn, ())), cumulative

    def take(self, txn: TxnID) -> tuple[list[tuple[int, int]], tuple[int, int] | None]:
        """Remove and return the transaction's (individual positions, cumulative position)."""
        taken = sorted(self.by_txn.pop(txn, ()))
        for entry_id, index in taken:
            held = self.by_entry[entry_id]
            del held[index]
            if not held:
                del self.by_entry[entry_id]
        cumulative = None
        if self.cumulative and self.cumulative[0] == txn:
            cumulative = (self.cumulative[1], self.cumulative[2])
            self.cumulative = None
        return taken, cumulative

    def mask(self, entry_id: int, num_messages: int) -> int:
        """Batch indices of the entry held by some transaction (not to be dispatched)."""
        mask = 0
        if self.cumulative:
            _, c_entry, c_index = self.cumulative
            if entry_id < c_entry or (entry_id == c_entry and c_index == WHOLE):
                return full_mask(num_messages)
            if entry_id == c_entry:
                mask = full_mask(c_index + 1) & full_mask(num_messages)
        for index in self.by_entry.get(entry_id, {}):
            mask |= full_mask(num_messages) if index == WHOLE else 1 << index
        return mask

    def count(self) -> int:
        return sum(len(v) for v in self.by_entry.values()) + (1 if self.cumulative else 0)

    def transactions(self) -> set[TxnID]:
        txns = {t for held in self.by_entry.values() for t in held.values()}
        if self.cumulative:
            txns.add(self.cumulative[0])
        return txns
