"""The transaction buffer of one partition (PIP-31, sidecar design; docs/transactions.md).

A transactional send is written once, to ``txn_entries``, outside the visible log.
Committing writes one marker entry into the log whose messages are the transaction's
batches; aborting deletes them.  Nothing open ever blocks the log: only markers are in
it, and a marker appears when its transaction commits.  Commit cost is one marker row
and one outcome row, whatever the transaction's size.

This is the buffer's I/O shell: its state per transaction, loaded on demand, and the
write of a group the planner (partition/planner.py) planned.
"""

from __future__ import annotations

import time
from typing import Any

from magnetar_broker import metrics
from magnetar_broker.partition.planner import GroupPlan, Settled, plan_group, settle_group
from magnetar_broker.partition.txnrules import Actor, TxnBuf, ended_error, expired_error
from magnetar_broker.store import BrokerStore, GroupWritten, Registration
from magnetar_protocol.errors import MagnetarError, ProducerFenced
from magnetar_protocol.txnid import TxnID
from magnetar_runtime.auth import current_role
from magnetar_runtime.failpoints import failpoint
from magnetar_runtime.roles import Roles


async def ended_txn_error(store: BrokerStore, txn: TxnID, committed: bool) -> MagnetarError:
    """The precise error for an operation on an ended transaction (the slow path only)."""
    if not committed and await store.txn_expired(txn):
        return expired_error(txn)
    return ended_error(txn, committed)


def txn_actor(roles: Roles) -> Actor:
    """The request's role and whether it may act for any transaction's owner."""
    role = current_role()
    return role, roles.is_superuser(role)


class TxnBuffer:
    def __init__(self, store: BrokerStore, topic_id: int, topic: str, roles: Roles):
        self.store = store
        self.roles = roles
        self.topic_id = topic_id
        self.topic = topic
        self.txns: dict[TxnID, TxnBuf] = {}
        self.committed_count = 0
        self.aborted_count = 0

    async def state(self, txn: TxnID) -> TxnBuf:
        buf = self.txns.get(txn)
        if buf is None:
            batches, messages, committed = await self.store.txn_state(self.topic_id, txn)  # a TxnState
            if txn not in self.txns and committed is None:
                metrics.TB_ACTIVE.inc()
            buf = self.txns.setdefault(txn, TxnBuf(batches, messages, [] if batches == 0 else None,
                                                   committed=committed))
        return buf

    async def check_send(self, txn: TxnID) -> Actor:
        """Refuse a send for a transaction already ended here; answer the sender (role,
        may act for any owner), which a transaction's first send here needs: the write
        that stores it also registers this partition with the transaction, only while
        it is OPEN and the sender's (``commit_group``), so no transaction is left
        hanging here and the send waits for one statement, not two."""
        buf = self.txns.get(txn)
        if buf is not None and buf.committed is not None:
            raise await ended_txn_error(self.store, txn, buf.committed)
        return txn_actor(self.roles)  # checked against the owner by the planner

    async def commit_group(self, items: list[Any], next_entry_id: int, dedup: bool, epoch: int,
                           exclusive_epoch: int | None) -> Settled | None:
        """Write a group holding transactional work in one SQL transaction: the
        planner's rows, then its changes to this buffer.  ``items`` are the writer's
        queue in order: plain appends, transactional appends and ends; ``next_entry_id``
        and ``dedup`` the log's head and setting, ``epoch`` its lease epoch.  Returns what
        the log applies (``Settled``: one result per item, the new entries, its new head
        and persisted sequences), or None when fenced."""
        plan, written = await self.write_group(items, next_entry_id, dedup, epoch, exclusive_epoch)
        if not written.owned:
            return None  # the caller treats None as "fenced"
        if not written.allowed:
            raise ProducerFenced(f"the topic epoch of {self.topic} moved on; batch refused")
        return self.settle(plan, written.registered)

    async def write_group(self, items: list[Any], next_entry_id: int, dedup: bool, epoch: int,
                          exclusive_epoch: int | None, conn: Any = None) -> tuple[GroupPlan, GroupWritten]:
        """Plan and write a group (in ``conn``'s SQL transaction when given), changing
        nothing in memory: the plan, and what the statement answered."""
        plan = plan_group(items, self.txns, next_entry_id, dedup, int(time.time() * 1000), self.topic)
        if plan.rows.outcomes and conn is None:
            failpoint("broker.end_txn_on_partition")
        written = await self.store.write_txn_group(
            self.topic_id, epoch, exclusive_epoch, plan.rows, topic=self.topic, conn=conn)
        return plan, written

    def settle(self, plan: GroupPlan, registered: list[Registration]) -> Settled:
        """Apply a written group's plan to this buffer; what the log applies."""
        settled = settle_group(plan, self.txns, registered, self.topic)
        metrics.TB_ACTIVE.inc(settled.opened)
        metrics.TB_ACTIVE.dec(len(settled.ended))
        for committed in settled.ended:
            if committed:
                self.committed_count += 1
                metrics.TB_COMMITTED.inc()
            else:
                self.aborted_count += 1
                metrics.TB_ABORTED.inc()
        self.txns.update(settled.txns)
        return settled

    def stats(self) -> dict[Any, Any]:
        open_txns = [t for t, b in self.txns.items() if b.committed is None]
        return {
            "ongoingTxnSize": len(open_txns),
            "committedTxnCount": self.committed_count,
            "abortedTxnCount": self.aborted_count,
            "ongoingTxns": [str(TxnID(*t)) for t in open_txns],
            # Open transactions never hold back the log (sidecar buffer): see docs.
            "maxReadPosition": None,
        }
