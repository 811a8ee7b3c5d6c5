"""The end of a transaction on this broker's participants: the one module both paths go
through (docs/transactions.md).

- Two phases: a coordinator's EndTxnOnParticipants ends it on each participant here on
  its own: a partition's end is queued on its writer behind the sends before it
  (``Writer.submit(TxnEnd)``), a subscription's is grouped with the others' ends
  (``TxnAcks.end``).
- One phase (issue 18): when every participant is served by the broker hosting the
  transaction's coordinator, the coordinator ends it in one SQL transaction with the
  other such ends queued meanwhile.  ``LocalEnds`` is this broker's side, typed by the
  coordinator's ``LocalParticipants`` protocol: hold the participants' writers, write
  their parts in the coordinator's SQL transaction with the same planner and
  statements the two-phase path uses (``Writer.write_in``, ``TxnAcks.end_in``), and
  apply the in-memory effects with the same code once it committed (``Writer.applied``,
  ``TxnAcks.ended``).  The coordinator's side (the status, fence and key-epoch checks)
  is in its service; ``hosted_coordinator`` connects the two.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

from magnetar_broker.commitpath import OnePhasePlan, plan_one_phase, union
from magnetar_broker.ownership import Ownership
from magnetar_broker.partition.log import PartitionLog
from magnetar_broker.partition.planner import TxnEnd
from magnetar_broker.partition.txnrules import ended_error
from magnetar_broker.partition.writer import Written
from magnetar_broker.subscription.subscription import Subscription, durable
from magnetar_protocol.topics import TopicName, validate_name_part
from magnetar_protocol.txnid import TxnID

End = tuple[TxnID, bool, OnePhasePlan]  # a transaction, commit?, its participants


# ---------------------------------------------------------------- two phases


async def end_on_participant(ownership: Ownership, topic: str, subscription: str, txn: TxnID,
                             commit: bool) -> None:
    """End ``txn`` on one participant served here: a partition (``subscription`` empty)
    or one of its subscriptions.  Idempotent; the opposite of a recorded outcome is
    refused."""
    if subscription:
        validate_name_part("subscription", subscription)
    plog = await ownership.get_log(TopicName.parse(topic))
    if not subscription:
        await end_on_partition(plog, txn, commit)
        return
    # No consumer since this broker took over: the durable cursor is loaded.
    sub = await durable(plog, subscription)
    await sub.txn.end(txn, commit)


async def end_on_partition(plog: PartitionLog, txn: TxnID, commit: bool) -> None:
    """EndTxnOnPartition: queued behind the sends before it on the partition's writer."""
    plog.check_open()
    buf = await plog.txnbuf.state(txn)
    if buf.committed is not None:
        if buf.committed != commit:
            raise ended_error(txn, buf.committed)
        return
    await plog.writer.submit(TxnEnd(txn, commit))


# ---------------------------------------------------------------- one phase


class HeldEnds:
    """The participants of a group of transactions, their writers held from ``hold``
    until ``release``: nothing else writes to them in between, so the rows planned here
    are the ones written and the in-memory state applied after the commit is current.
    Implements the coordinator's ``HeldParticipants`` protocol."""

    def __init__(self, ends: list[End]) -> None:
        self.ends = ends
        self.stack = AsyncExitStack()
        self.logs: list[PartitionLog] = []
        self.subs: list[tuple[str, Subscription]] = []
        self._partitions: list[tuple[PartitionLog, Written]] = []
        self._subscriptions: list[tuple[Subscription, list[tuple[Any, ...]]]] = []
        self._lost: list[PartitionLog] = []

    async def write(self, conn: Any, found: dict[TxnID, tuple[list[str], list[tuple[str, str]]]]) -> bool:
        """Write every participant's ends in ``conn``'s SQL transaction, one statement per
        participant.  False, with nothing written (the caller rolls back and takes the
        two-phase path): the registrations ``found`` under the transactions' row locks are
        not the ones held (one raced the hold), or a participant is not this path's to
        end (lease moved, an outcome already recorded)."""
        if not all(plan.same_participants(*found.get(txn, ([], []))) for txn, _, plan in self.ends):
            return False
        for plog in self.logs:
            topic = plog.name.full
            items: list[Any] = [TxnEnd(txn, commit) for txn, commit, plan in self.ends if topic in plan.partitions]
            written = await plog.writer.write_in(conn, items)
            if not isinstance(written, Written):
                if written.lease_lost:
                    self._lost.append(plog)
                return False
            self._partitions.append((plog, written))
        for topic, sub in self.subs:
            ends = [(txn, commit) for txn, commit, plan in self.ends
                    if (topic, sub.name) in plan.subscriptions]
            if sub.log.closed:
                return False
            decided = await sub.txn.end_in(conn, ends)
            if decided is None:
                return False
            self._subscriptions.append((sub, decided))
        return True

    async def apply(self) -> None:
        """The SQL transaction committed: log heads, buffers, cursors and dispatch."""
        for plog, written in self._partitions:
            plog.writer.applied(written)
        for sub, decided in self._subscriptions:
            await sub.txn.ended(decided)
            sub.log.wake()

    async def release(self, unknown: bool = False) -> None:
        """Let the writers go.  ``unknown``: the SQL commit's outcome is not known, so
        every participant stops being served here and is reloaded from the database."""
        await self.stack.aclose()
        for plog in (self.logs if unknown else self._lost):
            plog.lose("a one-phase commit's outcome is unknown" if unknown
                      else "fenced while ending transactions in one phase")


class LocalEnds:
    """This broker's participants, as its hosted coordinator sees them (the
    coordinator's ``LocalParticipants`` protocol)."""

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
                await held.stack.enter_async_context(plog.writer.hold())
                held.logs.append(plog)
            for topic, name in group.subscriptions:
                plog = self.ownership.logs.get(TopicName.parse(topic).full)
                if plog is None or plog.closed:
                    await held.release()
                    return None
                sub = await durable(plog, name)  # no consumer since this broker took over
                await held.stack.enter_async_context(sub.lock)
                await held.stack.enter_async_context(sub.persist_lock)
                held.subs.append((topic, sub))
        except BaseException:
            await held.release()
            raise
        return held
