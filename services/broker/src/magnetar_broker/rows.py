"""The typed rows of the broker's batched statements (the planner and the subscription's
transactional acks build them, the store writes them): one named type per table, whose
fields name the statement's inputs (``<prefix><field>`` in queries.sql), so a column can
neither be swapped with another nor forgotten.  Pure: no I/O."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from magnetar_protocol.txnid import TxnID


class EntryColumns(NamedTuple):
    """A plain group's ``entries`` rows, one list per column (append_entries)."""
    entry_id: list[int]
    producer: list[str]
    lowest: list[int]
    highest: list[int]
    messages: list[int]
    publish_time: list[int]
    payload: list[bytes]


class PendingAckRow(NamedTuple):
    """A transactional ack (``pending_acks``); ``batch_index`` -1 for the whole entry."""
    entry_id: int
    batch_index: int
    txn_most: int
    txn_least: int
    cumulative: bool


class EntryRow(NamedTuple):
    """An ``entries`` row: a plain batch, or a commit's marker (no payload; its txn set)."""
    entry_id: int
    producer: str
    lowest: int
    highest: int
    messages: int
    publish_time: int
    payload: bytes
    txn_most: int | None
    txn_least: int | None


class BufferedRow(NamedTuple):
    """A ``txn_entries`` row: a transaction's batch in the sidecar buffer."""
    txn_most: int
    txn_least: int
    seq: int              # its number among the transaction's batches here
    producer: str
    lowest: int
    highest: int
    messages: int
    payload: bytes


class SequenceRow(NamedTuple):
    """A ``producer_sequences`` update; the txn only when that transaction registers here
    (its sequences are not written if the registration is refused)."""
    producer: str
    highest: int
    txn_most: int | None
    txn_least: int | None


class OutcomeRow(NamedTuple):
    txn_most: int
    txn_least: int
    committed: bool


class RegistrationRow(NamedTuple):
    """A transaction's first send here: register this partition with it."""
    txn_most: int
    txn_least: int
    role: str
    any_owner: bool       # the sender may act for any transaction's owner


@dataclass
class GroupRows:
    """What the group's statement writes (store.write_txn_group), by table."""
    entries: list[EntryRow] = field(default_factory=list)
    delays: list[int | None] = field(default_factory=list)  # each entry's delivery time (None: none)
    txn_entries: list[BufferedRow] = field(default_factory=list)
    sequences: list[SequenceRow] = field(default_factory=list)
    outcomes: list[OutcomeRow] = field(default_factory=list)
    discards: list[TxnID] = field(default_factory=list)       # aborted: drop their sidecar rows
    registrations: list[RegistrationRow] = field(default_factory=list)
