"""The broker's part of a one-phase commit (issue 18; docs/transactions.md): when every
participant of a transaction is served by the broker hosting its coordinator, the
coordinator ends it in one SQL transaction.  Here: hold the participants' writers, write
their markers and acknowledgement settlements in the coordinator's SQL transaction, and
apply the in-memory effects only once it committed.  The coordinator's side (the status,
fence and key-epoch checks) is in its service; ``hosted_coordinator`` connects the two."""

from __future__ import annotations

import logging
import time
from contextlib import AsyncExitStack

from magnetar_broker.commitpath import OnePhasePlan, plan_one_phase
from magnetar_broker.ownership import Ownership
from magnetar_broker.partition.log import PartitionLog
from magnetar_broker.partition.planner import TxnEnd, plan_group
from magnetar_broker.subscription.subscription import Subscription
from magnetar_protocol.topics import TopicName
from magnetar_protocol.txnid import TxnID

log = logging.getLogger("magnetar.broker.onephase")


class HeldEnd:
    """The participants of one transaction, their writers held from ``hold`` until
    ``release``: nothing else writes to them in between, so the rows planned here are
    the ones written and the in-memory state applied after the commit is still current."""

    def __init__(self, txn: TxnID, commit: bool, plan: OnePhasePlan) -> None:
        self.txn = txn
        self.commit = commit
        self.plan = plan
        self.stack = AsyncExitStack()
        self.logs: list[PartitionLog] = []
        self.subs: list[Subscription] = []
        self._written: list = []  # (log, plan, registered) | (sub, None, None)
        self._lost: list[PartitionLog] = []

    def same_participants(self, partitions, subscriptions) -> bool:
        return self.plan.same_participants(partitions, subscriptions)

    async def write(self, conn) -> bool:
        """Write every participant's end in ``conn``'s SQL transaction; False when one
        is not this path's to end (lease moved, outcome already recorded): the caller
        rolls back and takes the two-phase path."""
        now_ms = int(time.time() * 1000)
        for plog in self.logs:
            if plog.closed:
                return False
            buf = await plog.txnbuf.state(self.txn)
            if buf.committed is not None:
                return False  # ended here already: the two-phase path answers that
            plan = plan_group([TxnEnd(self.txn, self.commit)], plog.txnbuf.txns,
                              plog.next_entry_id, plog.dedup, now_ms, plog.name.full)
            exclusive_epoch = plog.access.topic_epoch if plog.access.exclusive is not None else None
            owned, allowed, registered = await plog.store.write_txn_group(
                plog.topic_id, plog.epoch, exclusive_epoch, plan.rows, plog.name.full, conn=conn)
            if not owned:
                self._lost.append(plog)
                return False
            if not allowed:
                return False
            self._written.append((plog, plan, registered))
        for sub in self.subs:
            if sub.log.closed:
                return False
            if await sub.txn.end_in(conn, self.txn, self.commit) is None:
                return False
            self._written.append((sub, None, None))
        return True

    async def apply(self) -> None:
        """The SQL transaction committed: the log heads, buffers, cursors and dispatch."""
        for target, plan, registered in self._written:
            if plan is None:
                await target.txn.ended(self.txn, self.commit)
                target.log.wake()
            else:
                target.apply_settled(target.txnbuf.settle(plan, registered))

    async def release(self, unknown: bool = False) -> None:
        """Let the writers go.  ``unknown``: the SQL commit's outcome is not known, so
        every participant stops being served here and is reloaded from the database."""
        await self.stack.aclose()
        lost = list(self.logs) if unknown else self._lost
        for plog in lost:
            plog.lose("a one-phase commit's outcome is unknown" if unknown
                      else "fenced while ending a transaction in one phase")


class LocalEnds:
    """What a hosted coordinator asks its broker (``CoordinatorService.local_ends``)."""

    def __init__(self, ownership: Ownership) -> None:
        self.ownership = ownership

    async def hold(self, txn: TxnID, commit: bool, enabled: bool, partitions: list[str],
                   subscriptions: list[tuple[str, str]]) -> HeldEnd | None:
        """Hold the writers of every participant, or None (nothing held) when one is not
        served here: the two-phase path ends the transaction."""
        served = {name for name, plog in self.ownership.logs.items() if not plog.closed}
        plan = plan_one_phase(enabled, partitions, subscriptions, served)
        if plan is None:
            return None
        held = HeldEnd(txn, commit, plan)
        try:
            for topic in plan.partitions:
                plog = self.ownership.logs.get(topic)
                if plog is None or plog.closed:
                    await held.release()
                    return None
                await held.stack.enter_async_context(plog.hold_writer())
                held.logs.append(plog)
            for topic, name in plan.subscriptions:
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
                held.subs.append(sub)
        except BaseException:
            await held.release()
            raise
        return held
