"""The write planner of a partition.  Pure: no I/O.

The partition's writer queues plain appends, transactional appends and transaction
ends, and writes each queued group with one statement.  ``plan_plain`` (a group of plain
appends only: the hot path) and ``plan_group`` (anything else) turn a group into the
rows to write and the answer to each item; ``settle_group`` turns a group plan and the
database's answer to its registrations into the changes to apply in memory.  The rules:

- order: entry ids are given in queue order, from the partition's next entry id; a
  transaction's batches are numbered in its order of sends here;
- dedup inside a group: one sequence row per producer (per producer and registering
  transaction), its highest sequence id in the group;
- sidecar rows vs marker rows: a transactional send is a row of the transaction's
  sidecar buffer (``txn_entries``), never an entry; a commit with messages here writes
  one marker entry (no payload: its batches are the sidecar's); an abort writes none
  and discards the sidecar, and appends of a transaction aborted in the same group are
  not written at all;
- the first send of a transaction here registers the partition in the same statement
  (only while the transaction is OPEN and the sender's); an end in the same group
  refuses those sends; another role's send is refused;
- the lease epoch and the exclusive producer's topic epoch are checked by the statement
  (the shell passes them), so a refused write changes nothing in memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from magnetar_broker.entry import Entry
from magnetar_broker.partition.txnrules import (
    Actor,
    TxnBuf,
    ended_error,
    may_act,
    not_open_error,
    not_owner_error,
    registration_refused,
)
from magnetar_broker.rows import (
    BufferedRow,
    EntryColumns,
    EntryRow,
    GroupRows,
    OutcomeRow,
    RegistrationRow,
    SequenceRow,
)
from magnetar_protocol.errors import MagnetarError
from magnetar_protocol.txnid import TxnID

MAX_CACHED_TXN_BYTES = 8 * 1024 * 1024  # keep a transaction's batches in memory up to this


@dataclass(slots=True)
class Append:
    """A plain batch, admitted (validated and deduplicated) and queued."""
    producer: object
    producer_name: str
    lowest: int
    highest: int
    num_messages: int
    batch: bytes
    deliver_at: int = field(default=0, kw_only=True)  # its latest delivery time (0: none delayed)
    # False for a chunk before its message's last: it records no sequence id (Pulsar
    # judges a chunked message by its last chunk; every chunk carries its id).
    judged: bool = field(default=True, kw_only=True)


@dataclass(slots=True)
class TxnAppend(Append):
    """A transactional batch, admitted and queued."""
    txn: TxnID
    actor: Actor  # the sender, for the registration of a first send here


@dataclass(slots=True)
class TxnEnd:
    """EndTxnOnPartition, queued behind the sends before it."""
    txn: TxnID
    commit: bool
    producer: object = None  # never fenced


# ---------------------------------------------------------------- plain groups


@dataclass(slots=True)
class PlainPlan:
    """A group of plain appends: one entry each, in order."""
    first_id: int
    columns: EntryColumns
    sequences: dict[str, int]  # producer -> its highest sequence id in the group (dedup on)
    delays: list[int | None] | None = None  # each entry's delivery time; None: none delayed

    @property
    def next_entry_id(self) -> int:
        return self.first_id + len(self.columns.entry_id)

    def entries(self) -> list[Entry]:
        c = self.columns
        if self.delays is None:
            return [Entry(*row) for row in zip(c.entry_id, c.producer, c.messages, c.publish_time, c.payload)]
        return [Entry(e, name, n, at, payload, deliver_at=delay or 0)
                for e, name, n, at, payload, delay in zip(c.entry_id, c.producer, c.messages, c.publish_time,
                                                          c.payload, self.delays)]


def plan_plain(items: list[Append], next_entry_id: int, dedup: bool, now_ms: int) -> PlainPlan:
    ids = list(range(next_entry_id, next_entry_id + len(items)))
    columns = EntryColumns(
        ids,
        [i.producer_name for i in items],
        [i.lowest for i in items],
        [i.highest for i in items],
        [i.num_messages for i in items],
        [now_ms] * len(items),
        [i.batch for i in items],
    )
    sequences: dict[str, int] = {}
    if dedup:
        for i in items:
            if i.judged:
                sequences[i.producer_name] = max(sequences.get(i.producer_name, -1), i.highest)
    delays = [i.deliver_at or None for i in items] if any(i.deliver_at for i in items) else None
    return PlainPlan(next_entry_id, columns, sequences, delays)


# ---------------------------------------------------------------- mixed groups


@dataclass
class FirstSends:
    """A group's sends of a transaction whose first here they are."""
    actor: Actor
    buf: TxnBuf = field(default_factory=TxnBuf)
    items: list[int] = field(default_factory=list)  # their places in the group
    rows: list[BufferedRow] = field(default_factory=list)


@dataclass
class GroupPlan:
    results: list[Any]            # per item: position, None (an end) or the error to answer
    rows: GroupRows
    staged: dict[TxnID, TxnBuf]          # registered transactions' buffers after the group
    fresh: dict[TxnID, FirstSends]       # first sends here: this write registers them
    sequences: dict[tuple[Any, ...], int]          # (producer, txn if it registers here) -> highest
    markers: dict[int, TxnID]            # marker entry id -> its transaction
    next_entry_id: int
    now_ms: int


def plan_group(items: list[Any], txns: Mapping[TxnID, TxnBuf], next_entry_id: int, dedup: bool,
               now_ms: int, topic: str) -> GroupPlan:
    """Plan a group holding transactional work.  ``txns``: the partition's buffers (read
    only; every transaction of a queued end or a non-first send has one)."""
    results: list[Any] = [None] * len(items)
    staged: dict[TxnID, TxnBuf] = {}
    fresh: dict[TxnID, FirstSends] = {}
    rows = GroupRows()
    txn_rows: list[BufferedRow] = []
    sequences: dict[tuple[Any, ...], int] = {}
    markers: dict[int, TxnID] = {}
    next_id = next_entry_id

    def view(txn: TxnID) -> TxnBuf:
        if txn not in staged:
            staged[txn] = txns[txn].copy()
        return staged[txn]

    for i, item in enumerate(items):
        if isinstance(item, TxnEnd):
            if item.txn in fresh:
                # Ending means the coordinator moved it out of OPEN: its first sends
                # here cannot register, so they are refused, not written.
                for j in fresh.pop(item.txn).items:
                    results[j] = not_open_error(item.txn, False)
                sequences = {k: v for k, v in sequences.items() if k[1] != item.txn}
            buf = view(item.txn)
            if buf.committed is not None:
                results[i] = None if buf.committed == item.commit else ended_error(item.txn, buf.committed)
                continue
            buf.committed = item.commit
            rows.outcomes.append(OutcomeRow(*item.txn, item.commit))
            if item.commit and buf.messages:
                rows.entries.append(EntryRow(next_id, "", 0, 0, buf.messages, now_ms, b"", *item.txn))
                rows.delays.append(None)
                markers[next_id] = item.txn
                next_id += 1
            elif not item.commit:
                rows.discards.append(item.txn)
            continue
        transactional = isinstance(item, TxnAppend)
        registering = transactional and _registers(item.txn, txns, staged)
        if transactional and (refusal := _not_owner(item, registering, txns, fresh, topic)):
            results[i] = refusal
            continue
        if dedup and item.judged:
            key = (item.producer_name, item.txn if registering else None)
            sequences[key] = max(sequences.get(key, -1), item.highest)
        if not transactional:
            rows.entries.append(EntryRow(next_id, item.producer_name, item.lowest, item.highest,
                                         item.num_messages, now_ms, item.batch, None, None))
            rows.delays.append(item.deliver_at or None)
            results[i] = next_id
            next_id += 1
            continue
        if registering:
            first = fresh.setdefault(item.txn, FirstSends(item.actor))
            first.items.append(i)
            buf = first.buf
        else:
            buf = view(item.txn)
        if buf.committed is not None:
            results[i] = ended_error(item.txn, buf.committed)
            continue
        (first.rows if registering else txn_rows).append(BufferedRow(
            item.txn[0], item.txn[1], buf.batches, item.producer_name, item.lowest, item.highest,
            item.num_messages, item.batch))
        results[i] = buf.batches
        buf.batches += 1
        buf.messages += item.num_messages
        buf.size += len(item.batch)
        if buf.payloads is not None and buf.size <= MAX_CACHED_TXN_BYTES:
            buf.payloads.append(item.batch)
        else:
            buf.payloads = None

    # A transaction appended to and aborted in this very group: its appends are not
    # written at all (one statement cannot delete the rows it inserts).
    discarded = set(rows.discards)
    rows.txn_entries = [row for row in txn_rows if (row.txn_most, row.txn_least) not in discarded]
    for first in fresh.values():
        rows.txn_entries += first.rows
    rows.sequences = [SequenceRow(name, seq, *(txn or (None, None))) for (name, txn), seq in sequences.items()]
    rows.registrations = [RegistrationRow(*txn, *first.actor) for txn, first in fresh.items()]
    return GroupPlan(results, rows, staged, fresh, sequences, markers, next_id, now_ms)


def _registers(txn: TxnID, txns: Mapping[TxnID, TxnBuf], staged: dict[TxnID, TxnBuf]) -> bool:
    """Whether a send for ``txn`` registers this partition in the group's write: its
    first here (not yet registered, not ended, not ended earlier in this group)."""
    if txn in staged:
        return False
    base = txns.get(txn)
    return base is None or (base.committed is None and not base.registered)


def _not_owner(item: TxnAppend, registering: bool, txns: Mapping[TxnID, TxnBuf],
               fresh: dict[TxnID, FirstSends], topic: str) -> MagnetarError | None:
    """Every transactional send is checked against the owner, not only the first: a
    registered transaction's owner is known here (a dict lookup); a first send's is
    checked by the registering write, for the first sender of the group, so a different
    role's send in that same group is refused."""
    if item.actor[1]:
        return None
    if registering:
        first = fresh.get(item.txn)
        if first is None or first.actor[0] == item.actor[0]:
            return None
    else:
        base = txns.get(item.txn)
        if base is None or not base.registered or may_act(item.actor, base.owner):
            return None
    return not_owner_error(item.txn, f"sending to {topic}", item.actor)


# ---------------------------------------------------------------- after the write


@dataclass
class Settled:
    """The in-memory changes of a written group."""
    results: list[Any]
    cached: list[Entry]                 # new entries, in order (markers keep their batches)
    txns: dict[TxnID, TxnBuf]           # new buffer states
    opened: int                         # transactions newly buffered here
    ended: list[bool]                   # outcomes of the transactions ended by the group
    sequences: dict[str, int]           # producer -> highest persisted sequence id
    next_entry_id: int


def settle_group(plan: GroupPlan, txns: Mapping[TxnID, TxnBuf], registered: list[Any],
                 topic: str) -> Settled:
    """The changes to apply once the group's statement succeeded; ``registered``: its
    answer per registration (ok, batches and messages buffered before, coordinator
    status, expired, owner), in ``plan.fresh`` order."""
    results = list(plan.results)
    new_txns: dict[TxnID, TxnBuf] = {}
    refused: set[TxnID] = set()
    opened = 0
    for (txn, first), (ok, batches, messages, status, expired, owner) in zip(
            plan.fresh.items(), registered):
        if not ok:
            refused.add(txn)
            error = registration_refused(txn, f"sending to {topic}", status, expired, owner,
                                         first.actor)
            for j in first.items:
                results[j] = error
            continue
        # Numbered after the batches an earlier owner of this partition buffered.
        for j in first.items:
            results[j] += batches
        buf = first.buf
        if txn not in txns:
            opened += 1
        new_txns[txn] = TxnBuf(batches + buf.batches, messages + buf.messages,
                               buf.payloads if batches == 0 else None, buf.size,
                               registered=True, owner=owner)
    cached: list[Entry] = []
    for row, deliver_at in zip(plan.rows.entries, plan.rows.delays):
        entry_id = row[0]
        if entry_id in plan.markers:
            txn = plan.markers[entry_id]
            payloads = plan.staged[txn].payloads
            cached.append(Entry(entry_id, "", row[4], plan.now_ms, None, txn,
                                tuple(payloads) if payloads is not None else None))
        else:
            cached.append(Entry(entry_id, row[1], row[4], plan.now_ms, row[6], deliver_at=deliver_at or 0))
    ended: list[bool] = []
    for txn, buf in plan.staged.items():
        if buf.committed is not None and txns[txn].committed is None:
            buf.payloads = None  # the marker holds them now
            ended.append(buf.committed)
        new_txns[txn] = buf
    sequences: dict[str, int] = {}
    for (name, txn), seq in plan.sequences.items():
        if txn not in refused:
            sequences[name] = max(seq, sequences.get(name, -1))
    return Settled(results, cached, new_txns, opened, ended, sequences, plan.next_entry_id)
