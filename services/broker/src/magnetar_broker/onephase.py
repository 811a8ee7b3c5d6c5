"""The broker's part of a one-phase commit (issue 18; docs/transactions.md): when every
participant of a transaction is served by the broker hosting its coordinator, the
coordinator ends it in one SQL transaction (with the other such ends queued meanwhile:
group commit).  Here: hold the participants' writers, write their markers and
acknowledgement settlements in the coordinator's SQL transaction, and apply the
in-memory effects only once it committed.  The coordinator's side (the status, fence
and key-epoch checks) is in its service; ``hosted_coordinator`` connects the two."""

from __future__ import annotations

import time
from contextlib import AsyncExitStack

from magnetar_broker.commitpath import OnePhasePlan, plan_one_phase, union
from magnetar_broker.ownership import Ownership
from magnetar_broker.partition.log import PartitionLog
from magnetar_broker.partition.planner import TxnEnd, plan_group
from magnetar_broker.subscription.subscription import Subscription
from magnetar_protocol.topics import TopicName
from magnetar_protocol.txnid import TxnID

End = tuple[TxnID, bool, OnePhasePlan]  # a transaction, commit?, its participants


class HeldEnds:
    """The participants of a group of transactions, their writers held from ``hold``
    until ``release``: nothing else writes to them in between, so the rows planned here
    are the ones written and the in-memory state applied after the commit is current."""

    def __init__(self, ends: list[End]) -> None:
        self.ends = ends
        self.stack = AsyncExitStack()
        self.logs: list[PartitionLog] = []
        self.subs: list[tuple[str, Subscription]] = []
        self._written: list = []  # (log, plan, registered) | (sub, decided, None)
        self._lost: list[PartitionLog] = []

    def same_participants(self, found: dict[TxnID, tuple[list, list]]) -> bool:
        """Whether the registrations read under the transactions' row locks are the ones
        held (a registration that raced the hold makes the group stale)."""
        return all(plan.same_participants(*found.get(txn, ([], [])))
                   for txn, _, plan in self.ends)

    async def write(self, conn) -> bool:
        """Write every participant's ends in ``conn``'s SQL transaction, one statement per
        participant; False when one is not this path's to end (lease moved, an outcome
        already recorded): the caller rolls back and takes the two-phase path."""
        now_ms = int(time.time() * 1000)
        for plog in self.logs:
            topic = plog.name.full
            items = [TxnEnd(txn, commit) for txn, commit, plan in self.ends if topic in plan.partitions]
            if plog.closed:
                return False
            for item in items:
                if (await plog.txnbuf.state(item.txn)).committed is not None:
                    return False  # ended here already: the two-phase path answers that
            plan = plan_group(items, plog.txnbuf.txns, plog.next_entry_id, plog.dedup, now_ms, topic)
            exclusive_epoch = plog.access.topic_epoch if plog.access.exclusive is not None else None
            owned, allowed, registered = await plog.store.write_txn_group(
                plog.topic_id, plog.epoch, exclusive_epoch, plan.rows, topic, conn=conn)
            if not owned:
                self._lost.append(plog)
                return False
            if not allowed:
                return False
            self._written.append((plog, plan, registered))
        for topic, sub in self.subs:
            ends = [(txn, commit) for txn, commit, plan in self.ends
                    if (topic, sub.name) in plan.subscriptions]
            if sub.log.closed:
                return False
            decided = await sub.txn.end_in(conn, ends)
            if decided is None:
                return False
            self._written.append((sub, decided, None))
        return True

    async def apply(self) -> None:
        """The SQL transaction committed: log heads, buffers, cursors and dispatch."""
        for target, plan, registered in self._written:
            if isinstance(target, Subscription):
                await target.txn.ended(plan)
                target.log.wake()
            else:
                target.apply_settled(target.txnbuf.settle(plan, registered), len(plan.results))

    async def release(self, unknown: bool = False) -> None:
        """Let the writers go.  ``unknown``: the SQL commit's outcome is not known, so
        every participant stops being served here and is reloaded from the database."""
        await self.stack.aclose()
        for plog in (self.logs if unknown else self._lost):
            plog.lose("a one-phase commit's outcome is unknown" if unknown
                      else "fenced while ending transactions in one phase")


class LocalEnds:
    """What a hosted coordinator asks its broker (``CoordinatorService.local_ends``)."""

    def __init__(self, ownership: Ownership) -> None:
        self.ownership = ownership

    def plan(self, partitions: list[str], subscriptions: list[tuple[str, str]]) -> OnePhasePlan | None:
        """The transaction's one-phase plan, or None when a participant is not served
        here right now (the two-phase path ends it)."""
        served = {name for name, plog in self.ownership.logs.items() if not plog.closed}
        return plan_one_phase(True, partitions, subscriptions, served)

    async def hold(self, ends: list[End]) -> HeldEnds | None:
        """Hold the writers of every participant of ``ends`` in the plans' order, or None
        (nothing held) when one is no longer served here."""
        group = union(plan for _, _, plan in ends)
        held = HeldEnds(ends)
        try:
            for topic in group.partitions:
                plog = self.ownership.logs.get(topic)
                if plog is None or plog.closed:
                    await held.release()
                    return None
                await held.stack.enter_async_context(plog.hold_writer())
                held.logs.append(plog)
            for topic, name in group.subscriptions:
                plog = self.ownership.logs.get(TopicName.parse(topic).full)
                if plog is None or plog.closed:
                    await held.release()
                    return None
                async with plog.subscriptions_lock:
                    sub = plog.subscriptions.get(name)
                    if sub is None:  # no consumer since this broker took over
                        sub = await Subscription.open_durable(plog, name, plog.next_entry_id - 1)
                await held.stack.enter_async_context(sub.lock)
                await held.stack.enter_async_context(sub.persist_lock)
                held.subs.append((topic, sub))
        except BaseException:
            await held.release()
            raise
        return held
