"""The transaction buffer of one partition (PIP-31, sidecar design; docs/transactions.md).

A transactional send is written once, to ``txn_entries``, outside the visible log.
Committing writes one marker entry into the log whose messages are the transaction's
batches; aborting deletes them.  Nothing open ever blocks the log: only markers are in
it, and a marker appears when its transaction commits.  Commit cost is one marker row
and one outcome row, whatever the transaction's size.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import (
    AuthorizationError,
    ExpiredTransactionError,
    InvalidTxnStatusError,
    MagnetarError,
    ProducerFenced,
    TransactionNotFound,
)

from magnetar_runtime.auth import current_role
from magnetar_runtime.failpoints import failpoint
from magnetar_runtime.roles import Roles

from magnetar_broker import metrics
from magnetar_broker.store import BrokerStore, Entry

TxnKey = tuple[int, int]
MAX_CACHED_TXN_BYTES = 8 * 1024 * 1024  # keep a transaction's batches in memory up to this


def txn_str(txn: TxnKey) -> str:
    return f"({txn[0]},{txn[1]})"


def ended_error(txn: TxnKey, committed: bool) -> InvalidTxnStatusError:
    return InvalidTxnStatusError(
        f"transaction {txn_str(txn)} is already {'committed' if committed else 'aborted'}")


def expired_error(txn: TxnKey) -> ExpiredTransactionError:
    return ExpiredTransactionError(
        f"transaction {txn_str(txn)} was aborted because a newer connection took over its "
        "transaction key: this client was fenced")


async def ended_txn_error(store: BrokerStore, txn: TxnKey, committed: bool) -> MagnetarError:
    """The precise error for an operation on an ended transaction (the slow path only)."""
    if not committed and await store.txn_expired(txn):
        return expired_error(txn)
    return ended_error(txn, committed)


def not_open_error(txn: TxnKey, expired: bool) -> MagnetarError:
    if expired:
        return expired_error(txn)
    return InvalidTxnStatusError(f"transaction {txn_str(txn)} is no longer open")


def txn_actor(roles: Roles) -> tuple[str, bool]:
    """The request's role and whether it may act for any transaction's owner."""
    role = current_role()
    return role, roles.is_superuser(role)


def may_act(actor: tuple[str, bool], owner: str | None) -> bool:
    """May the sender act in a transaction owned by ``owner``?"""
    return actor[1] or (owner is not None and owner == actor[0])


def not_owner_error(txn: TxnKey, what: str, actor: tuple[str, bool]) -> AuthorizationError:
    return AuthorizationError(f"{what} in transaction {txn_str(txn)}: role {actor[0]!r} is "
                              "neither its owner nor a superuser")


def registration_refused(txn: TxnKey, what: str, status: int | None, expired: bool,
                         owner: str | None, actor: tuple[str, bool]) -> MagnetarError:
    """Why the broker could not register ``what`` with the transaction (the first send
    or ack there): it does not exist, is no longer OPEN, or belongs to another role."""
    if status is None:
        return TransactionNotFound(f"transaction {txn_str(txn)} does not exist")
    if status == pb.TXN_OPEN and not may_act(actor, owner):
        return not_owner_error(txn, what, actor)
    return not_open_error(txn, expired)  # ended, or began ending while we registered


@dataclass
class TxnBuf:
    batches: int = 0
    messages: int = 0
    payloads: list[bytes] | None = field(default_factory=list)  # None: not all in memory
    size: int = 0
    committed: bool | None = None  # the outcome on this partition, once ended
    registered: bool = False
    owner: str | None = None  # the transaction's role, known once registered here


@dataclass(slots=True)
class TxnAppend:
    producer: object
    producer_name: str
    lowest: int
    highest: int
    num_messages: int
    batch: bytes
    txn: TxnKey
    actor: tuple[str, bool]  # the sender, for the registration of a first send here


@dataclass
class _FirstSends:
    """A group's sends of a transaction whose first here they are."""
    actor: tuple[str, bool]
    buf: TxnBuf = field(default_factory=TxnBuf)
    items: list[int] = field(default_factory=list)  # their places in the group
    rows: list[tuple] = field(default_factory=list)


@dataclass(slots=True)
class TxnEnd:
    txn: TxnKey
    commit: bool
    producer: object = None  # never fenced


class TxnBuffer:
    def __init__(self, store: BrokerStore, topic_id: int, topic: str, roles: Roles):
        self.store = store
        self.roles = roles
        self.topic_id = topic_id
        self.topic = topic
        self.txns: dict[TxnKey, TxnBuf] = {}
        self.committed_count = 0
        self.aborted_count = 0

    async def state(self, txn: TxnKey) -> TxnBuf:
        buf = self.txns.get(txn)
        if buf is None:
            batches, messages, committed = await self.store.txn_state(self.topic_id, txn)
            if txn not in self.txns and committed is None:
                metrics.TB_ACTIVE.inc()
            buf = self.txns.setdefault(txn, TxnBuf(batches, messages, [] if batches == 0 else None,
                                                   committed=committed))
        return buf

    async def check_send(self, txn: TxnKey) -> tuple[str, bool]:
        """Refuse a send for a transaction already ended here; answer the sender (role,
        may act for any owner), which a transaction's first send here needs: the write
        that stores it also registers this partition with the transaction, only while
        it is OPEN and the sender's (``commit_group``), so no transaction is left
        hanging here and the send waits for one statement, not two."""
        buf = self.txns.get(txn)
        if buf is not None and buf.committed is not None:
            raise await ended_txn_error(self.store, txn, buf.committed)
        return txn_actor(self.roles)  # checked against the owner in commit_group

    # ---------------------------------------------------------------- group commit

    async def commit_group(self, plog, items: list, exclusive_epoch: int | None):
        """Write a group holding transactional work in one SQL transaction.

        ``items`` are the writer's queue in order: plain appends, transactional appends
        and ends.  Returns one result per item (entry id, txn sequence, None or error).
        """
        results: list = [None] * len(items)
        staged: dict[TxnKey, TxnBuf] = {}
        fresh: dict[TxnKey, _FirstSends] = {}  # first sends here: this write registers them
        entry_rows: list[tuple] = []
        txn_rows: list[tuple] = []
        outcomes: list[tuple] = []
        discards: list[TxnKey] = []
        sequences: dict[tuple, int] = {}  # (producer, the txn if it registers here) -> highest
        markers: dict[int, TxnKey] = {}
        next_id = plog.next_entry_id
        now_ms = int(time.time() * 1000)

        def view(txn: TxnKey) -> TxnBuf:
            if txn not in staged:
                base = self.txns[txn]
                staged[txn] = TxnBuf(base.batches, base.messages,
                                     None if base.payloads is None else list(base.payloads),
                                     base.size, base.committed, base.registered, base.owner)
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
                outcomes.append((item.txn, item.commit))
                if item.commit and buf.messages:
                    entry_rows.append((next_id, "", 0, 0, buf.messages, now_ms, b"", *item.txn))
                    markers[next_id] = item.txn
                    next_id += 1
                elif not item.commit:
                    discards.append(item.txn)
                continue
            registering = isinstance(item, TxnAppend) and self._registers(item.txn, staged)
            if isinstance(item, TxnAppend) and (refusal := self._not_owner(item, registering, fresh)):
                results[i] = refusal
                continue
            if plog.dedup:
                key = (item.producer_name, item.txn if registering else None)
                sequences[key] = max(sequences.get(key, -1), item.highest)
            if isinstance(item, TxnAppend):
                if registering:
                    first = fresh.setdefault(item.txn, _FirstSends(item.actor))
                    first.items.append(i)
                    buf = first.buf
                else:
                    buf = view(item.txn)
                if buf.committed is not None:
                    results[i] = ended_error(item.txn, buf.committed)
                    continue
                (first.rows if registering else txn_rows).append(
                    (*item.txn, buf.batches, item.producer_name, item.lowest, item.highest,
                     item.num_messages, item.batch))
                results[i] = buf.batches
                buf.batches += 1
                buf.messages += item.num_messages
                buf.size += len(item.batch)
                if buf.payloads is not None and buf.size <= MAX_CACHED_TXN_BYTES:
                    buf.payloads.append(item.batch)
                else:
                    buf.payloads = None
            else:
                entry_rows.append((next_id, item.producer_name, item.lowest, item.highest,
                                   item.num_messages, now_ms, item.batch, None, None))
                results[i] = next_id
                next_id += 1

        # A transaction appended to and aborted in this very group: its appends are not
        # written at all (one statement cannot delete the rows it inserts).
        discarded = set(discards)
        txn_rows = [row for row in txn_rows if (row[0], row[1]) not in discarded]
        for first in fresh.values():
            txn_rows += first.rows
        if outcomes:
            failpoint("broker.end_txn_on_partition")
        owned, allowed, registered = await self.store.write_txn_group(
            self.topic_id, plog.epoch, exclusive_epoch, entry_rows, txn_rows,
            [(name, seq, *(txn or (None, None))) for (name, txn), seq in sequences.items()],
            [(*txn, commit) for txn, commit in outcomes], discards,
            registrations=[(*txn, *first.actor) for txn, first in fresh.items()],
            topic=self.topic)
        if not owned:
            return None  # the caller treats None as "fenced"
        if not allowed:
            raise ProducerFenced(f"the topic epoch of {self.topic} moved on; batch refused")
        # Committed: make memory match.
        refused = self._settle_first_sends(fresh, registered, results)
        cached: list[Entry] = []
        for row in entry_rows:
            entry_id = row[0]
            if entry_id in markers:
                txn = markers[entry_id]
                payloads = staged[txn].payloads
                cached.append(Entry(entry_id, "", row[4], now_ms, None, txn,
                                    tuple(payloads) if payloads is not None else None))
            else:
                cached.append(Entry(entry_id, row[1], row[4], now_ms, row[6]))
        for txn, buf in staged.items():
            was_open = self.txns[txn].committed is None
            if buf.committed is not None and was_open:
                buf.payloads = None  # the marker holds them now
                metrics.TB_ACTIVE.dec()
                if buf.committed:
                    self.committed_count += 1
                    metrics.TB_COMMITTED.inc()
                else:
                    self.aborted_count += 1
                    metrics.TB_ABORTED.inc()
            self.txns[txn] = buf
        for (name, txn), seq in sequences.items():
            if txn not in refused:
                plog.persisted_seq[name] = max(seq, plog.persisted_seq.get(name, -1))
        plog.next_entry_id = next_id
        return results, cached

    def _not_owner(self, item: TxnAppend, registering: bool,
                   fresh: dict[TxnKey, "_FirstSends"]) -> MagnetarError | None:
        """Every transactional send is checked against the owner, not only the first:
        a registered transaction's owner is known here (a dict lookup); a first send's
        is checked by the registering write, for the first sender of the group, so a
        different role's send in that same group is refused."""
        if item.actor[1]:
            return None
        if registering:
            first = fresh.get(item.txn)
            if first is None or first.actor[0] == item.actor[0]:
                return None
        else:
            base = self.txns.get(item.txn)
            if base is None or not base.registered or may_act(item.actor, base.owner):
                return None
        return not_owner_error(item.txn, f"sending to {self.topic}", item.actor)

    def _registers(self, txn: TxnKey, staged: dict[TxnKey, TxnBuf]) -> bool:
        """Whether a send for ``txn`` registers this partition in the group's write: its
        first here (not yet registered, not ended, not ended earlier in this group)."""
        if txn in staged:
            return False
        base = self.txns.get(txn)
        return base is None or (base.committed is None and not base.registered)

    def _settle_first_sends(self, fresh: dict[TxnKey, "_FirstSends"], registered: list,
                            results: list) -> set[TxnKey]:
        """After the write: a registered transaction's buffer here (numbered after the
        batches an earlier owner buffered), a refused one's sends answered with why;
        answers the refused transactions (they keep nothing in memory)."""
        refused: set[TxnKey] = set()
        for (txn, first), (ok, batches, messages, status, expired, owner) in zip(
                fresh.items(), registered):
            if not ok:
                refused.add(txn)
                error = registration_refused(txn, f"sending to {self.topic}", status, expired,
                                             owner, first.actor)
                for j in first.items:
                    results[j] = error
                continue
            for j in first.items:
                results[j] += batches
            buf = first.buf
            if txn not in self.txns:
                metrics.TB_ACTIVE.inc()
            self.txns[txn] = TxnBuf(batches + buf.batches, messages + buf.messages,
                                    buf.payloads if batches == 0 else None, buf.size,
                                    registered=True, owner=owner)
        return refused

    def stats(self) -> dict:
        open_txns = [t for t, b in self.txns.items() if b.committed is None]
        return {
            "ongoingTxnSize": len(open_txns),
            "committedTxnCount": self.committed_count,
            "abortedTxnCount": self.aborted_count,
            "ongoingTxns": [txn_str(t) for t in open_txns],
            # Open transactions never hold back the log (sidecar buffer): see docs.
            "maxReadPosition": None,
        }
