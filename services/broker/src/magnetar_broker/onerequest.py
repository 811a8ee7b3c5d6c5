"""One-request transactions: the commit of a small transaction whose sends travel with
it (docs/transactions.md, "One-request transactions"), on the broker that hosts its
coordinator and serves every partition and subscription it names.

The commits queued together are written in ONE statement and one SQL transaction
(``store.commit_one_request``): their statuses OPEN -> COMMITTED (the hosted
coordinator's fence epoch and each key's epoch checked), their batches appended to the
log as committed entries (once, contiguously, at the commit point: no buffer copy, no
marker), their producers' sequence ids, and the cursors their acks move.  Before it: the
checks a send must pass (admission's, without the dedup verdict: the status
compare-and-set makes a repeated commit write nothing), the acks checked against every
other transaction's (their holds, subscription/txnacks.py), the writers and
subscription locks held in the one order every end takes them, so what is planned is
what is written.  After the COMMIT: the same in-memory changes the classic path makes
(``Writer.committed``, ``TxnAcks.held_committed``).  A group that cannot be written as a
whole is tried again one commit at a time, which tells each its precise answer."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

from magnetar_broker import metrics
from magnetar_broker.authorization import Authorizer
from magnetar_broker.ownership import Ownership
from magnetar_broker.partition.log import PartitionLog, Producer
from magnetar_broker.partition.planner import Append, PlainPlan
from magnetar_broker.partition.sends import Batch
from magnetar_broker.partition.txnrules import Actor
from magnetar_broker.store import BrokerStore, OneRequestRows
from magnetar_broker.subscription.cursor import Cursor
from magnetar_broker.subscription.subscription import Subscription, durable
from magnetar_broker.subscription.txnacks import HeldPlan
from magnetar_protocol.errors import BadRequest, MagnetarError, NotOwner, ProducerNotFound, SessionNotFound
from magnetar_protocol.onerequest import OneRequestEnd, Outcome
from magnetar_protocol.topics import TopicName
from magnetar_protocol.txnid import TxnID
from magnetar_runtime.failpoints import failpoint
from magnetar_runtime.groupcommit import GroupCommit
from magnetar_runtime.permissions import CONSUME

# Nothing written and the transaction still OPEN: the client acts and asks again (looks a
# participant up and ends the classic way; creates its producer again after a restart).
AGAIN = (NotOwner, ProducerNotFound, SessionNotFound)
# (producer id, session id) -> the caller's producer connected here (BrokerService._producer)
ProducerOf = Callable[[int, str], Producer]
Item = tuple[OneRequestEnd, Actor]


@dataclass
class _Prepared:
    """A commit's participants, found and checked before anything is held."""
    end: OneRequestEnd
    actor: Actor
    place: int                                   # its item in the group
    sends: list[tuple[PartitionLog, Producer, Batch]] = field(default_factory=list)
    subs: dict[tuple[str, str], Subscription] = field(default_factory=dict)

    @property
    def logs(self) -> set[PartitionLog]:
        return {plog for plog, _, _ in self.sends} | {sub_log(s) for s in self.subs.values()}


def sub_log(sub: Subscription) -> PartitionLog:
    plog = sub.log
    assert isinstance(plog, PartitionLog)  # a served subscription's partition
    return plog


class OneRequestEnds:
    """This broker's side of one-request commits (the hosted coordinator's
    ``LocalParticipants.end_one_request``)."""

    def __init__(self, ownership: Ownership, store: BrokerStore, authz: Authorizer,
                 producer_of: ProducerOf, max_batch_messages: int) -> None:
        self.ownership = ownership
        self.store = store
        self.authz = authz
        self.producer_of = producer_of
        self.max_batch_messages = max_batch_messages
        self._groups: dict[tuple[int, int], GroupCommit[Item, Outcome | Exception]] = {}

    async def commit(self, end: OneRequestEnd, actor: Actor, tcid: int, fence_epoch: int) -> Outcome:
        """Commit ``end`` (with the others queued meanwhile, of the same coordinator).
        NotOwner, nothing written, when a participant is not served here."""
        key = (tcid, fence_epoch)
        group = self._groups.get(key)
        if group is None:
            if len(self._groups) > 16:  # old fence epochs: their coordinator moved on
                self._groups.clear()
            group = self._groups[key] = GroupCommit(
                lambda items: self._commit_group(items, tcid, fence_epoch), 256)
        result = await group.submit((end, actor))
        if isinstance(result, Exception):
            raise result
        return result

    async def release(self, txn: TxnID, subscriptions: list[tuple[str, str]]) -> None:
        """A one-request transaction's abort: its held acks go back to the subscriptions
        served here (their messages are redelivered)."""
        for topic, name in subscriptions:
            plog = self.ownership.logs.get(topic)
            if plog is None or plog.closed:
                continue  # not served here any more: the holds went with the partition
            sub = plog.subscriptions.get(name)
            if sub is not None:
                await sub.txn.release(txn)

    # ---------------------------------------------------------------- a group

    async def _commit_group(self, items: list[Item], tcid: int, fence_epoch: int,
                            alone: bool = False) -> list[Outcome | Exception]:
        results: list[Outcome | Exception | None] = [None] * len(items)
        first: dict[TxnID, int] = {}
        prepared: list[_Prepared] = []
        for place, (end, actor) in enumerate(items):
            if end.txn in first:
                continue  # a repeated commit in the same group: answered as the first
            first[end.txn] = place
            try:
                prepared.append(await self._prepare(end, actor, place))
            except AGAIN as exc:
                results[place] = exc
            except MagnetarError as exc:
                results[place] = Outcome(refused=exc)
        if prepared:
            written = await self._write(prepared, tcid, fence_epoch, results)
            if not written:
                if alone or len(prepared) == 1:
                    pass  # _write answered it
                else:
                    for p in prepared:  # one at a time: each gets its precise answer
                        results[p.place] = (await self._commit_group([(p.end, p.actor)], tcid, fence_epoch,
                                                                     alone=True))[0]
        for place, (end, _) in enumerate(items):
            if results[place] is None:
                results[place] = results[first[end.txn]]
        return [r for r in results if r is not None]

    async def _prepare(self, end: OneRequestEnd, actor: Actor, place: int) -> _Prepared:
        """Find every participant served here and check each send as admission would (the
        backlog quota may hold it here, before anything is held)."""
        prepared = _Prepared(end, actor, place)
        for send in end.sends:
            plog = await self._served(send.topic)
            producer = self.producer_of(send.producer_id, send.session_id)
            if producer.log is not plog:
                raise BadRequest(f"producer {send.producer_id} does not send to {send.topic}")
            batch = Batch(send.producer_id, send.batch, send.num_messages, send.lowest, send.highest,
                          end.txn, send.session_id)
            await plog.admission.check(producer, batch)
            prepared.sends.append((plog, producer, batch))
        for acks in end.acks:
            key = (acks.topic, acks.subscription)
            if key in prepared.subs:
                continue
            plog = await self._served(acks.topic)
            await self.authz.require(plog.name, CONSUME, acks.subscription)
            prepared.subs[key] = await durable(plog, acks.subscription)
        return prepared

    async def _served(self, topic: str) -> PartitionLog:
        """The partition, loaded if this broker owns it, or taken as a lookup would (after
        a restart no client may have looked it up yet); NotOwner when another broker
        serves it."""
        name = TopicName.parse(topic)
        try:
            return await self.ownership.get_log(name)
        except NotOwner:
            broker_id, url = await self.ownership.lookup(name)
            if broker_id != self.ownership.store.broker_id:
                raise NotOwner(f"{name.full} is served by broker {broker_id} at {url}") from None
            return await self.ownership.get_log(name)

    async def _write(self, prepared: list[_Prepared], tcid: int, fence_epoch: int,
                     results: list[Outcome | Exception | None]) -> bool:
        """Hold, plan, write and apply ``prepared`` (answers into ``results``).  False:
        nothing was written because not every commit could be (a single one is answered
        why; a group is tried again one at a time)."""
        logs = sorted(set().union(*(p.logs for p in prepared)), key=lambda plog: plog.name.full)
        subs = sorted({(k, s) for p in prepared for k, s in p.subs.items()}, key=lambda ks: ks[0])
        async with AsyncExitStack() as stack:
            # One order for every end (partitions by name, then subscriptions), as the
            # one-phase ends take them: two never wait on each other.
            written_logs = {plog for p in prepared for plog, _, _ in p.sends}
            for plog in logs:
                if plog in written_logs:
                    await stack.enter_async_context(plog.writer.hold())
            for _, sub in subs:
                await stack.enter_async_context(sub.lock)
                await stack.enter_async_context(sub.persist_lock)
            plan = self._plan(prepared, results)
            if plan is None:
                return True  # every commit was refused: nothing to write
            rows, plans, held, accepted = plan
            by_sub: dict[Subscription, list[HeldPlan]] = {}
            for sub, held_plan in held:
                by_sub.setdefault(sub, []).append(held_plan)
            for sub, held_plans in by_sub.items():
                stack.enter_context(sub.txn.committing(held_plans))
            failpoint("broker.one_request.before_commit")
            try:
                answer = await self.store.commit_one_request(tcid, fence_epoch, rows)
            except Exception as exc:
                # The COMMIT's outcome is unknown: reload the participants from the database.
                for plog in logs:
                    plog.lose(f"a one-request commit's outcome is unknown: {exc}")
                raise
            failpoint("broker.one_request.after_commit")
            if answer.ok:
                for plog, planned in plans:
                    plog.writer.committed(planned)
                for sub, held_plan in held:
                    sub.txn.held_committed(held_plan)
                for p in accepted:
                    results[p.place] = Outcome(committed=True)
                metrics.ONE_REQUEST_COMMITS.inc(len(accepted))
                metrics.ONE_REQUEST_GROUP.observe(len(accepted))
                woken = {sub_log(sub) for sub, _ in held} | {plog for plog, _ in plans}
                for plog in woken:
                    plog.wake()
                return True
            lost = [plog for plog in logs if plog.topic_id not in answer.leased]
            for plog in lost:
                plog.lose("fenced (lease or topic epoch) at a one-request commit")
            if len(accepted) > 1:
                return False
            only = accepted[0]
            if not answer.fence_ok:
                results[only.place] = Outcome(fence_lost=True)
            elif lost:
                results[only.place] = NotOwner(f"{lost[0].name.full} moved to another broker; "
                                               "send the transaction the classic way")
            else:
                status, expired, key_ok = answer.statuses.get(only.end.txn.least_bits, (None, False, True))
                results[only.place] = Outcome(status=status, expired=expired, key_ok=key_ok)
            return False

    def _plan(self, prepared: list[_Prepared], results: list[Outcome | Exception | None]) -> (
            tuple[OneRequestRows, list[tuple[PartitionLog, PlainPlan]],
                  list[tuple[Subscription, HeldPlan]], list[_Prepared]] | None):
        """The rows of the commits that pass the checks made under the holds (each
        refused one answered into ``results``), or None when none does."""
        cursors: dict[tuple[str, str], Cursor] = {}
        taken: dict[tuple[str, str], set[tuple[int, int]]] = {}
        held: list[tuple[Subscription, HeldPlan]] = []
        appends: dict[PartitionLog, list[Append]] = {}
        accepted: list[_Prepared] = []
        for p in prepared:
            try:
                mine = self._check_held(p, cursors, taken)
                for plog, producer, _ in p.sends:
                    plog.check_open()
                    plog.check_not_terminated()
                    producer.check_not_fenced()
            except AGAIN as exc:
                results[p.place] = exc
                continue
            except MagnetarError as exc:
                results[p.place] = Outcome(refused=exc)
                continue
            for key, (cursor, marks, plan) in mine.items():
                cursors[key], taken[key] = cursor, marks
                held.append((p.subs[key], plan))
            for plog, producer, batch in self._joined(p):
                appends.setdefault(plog, []).append(
                    Append(producer, producer.name, batch.sequence_id, batch.highest_sequence_id,
                           batch.num_messages, batch.payload))
            accepted.append(p)
        if not accepted:
            return None
        plans = [(plog, plog.writer.plan_committed(items)) for plog, items in appends.items()]
        leases: dict[int, tuple[int, int, int | None]] = {}
        for p in accepted:
            for sub in p.subs.values():
                plog = sub_log(sub)
                leases.setdefault(plog.topic_id, (plog.topic_id, plog.epoch, None))
        for plog, _ in plans:
            leases[plog.topic_id] = (plog.topic_id, plog.epoch, plog.access.exclusive_epoch())
        entries: list[tuple[int, int, str, int, int, int, int, bytes]] = []
        sequences: list[tuple[int, str, int]] = []
        for plog, planned in plans:
            entries += [(plog.topic_id, *row) for row in zip(*planned.columns)]
            sequences += [(plog.topic_id, name, seq) for name, seq in planned.sequences.items()]
        subs_written = {(sub_log(sub).topic_id, sub.name): sub for sub, _ in held}
        rows = OneRequestRows(
            txn_ids=[p.end.txn.least_bits for p in accepted], leases=list(leases.values()),
            entries=entries, sequences=sequences,
            cursors=[(topic_id, name, cursors[(sub_log(sub).name.full, name)].mark_delete,
                      cursors[(sub_log(sub).name.full, name)].encode())
                     for (topic_id, name), sub in subs_written.items()])
        return rows, plans, held, accepted

    @staticmethod
    def _check_held(p: _Prepared, cursors: dict[tuple[str, str], Cursor],
                    taken: dict[tuple[str, str], set[tuple[int, int]]]
                    ) -> dict[tuple[str, str], tuple[Cursor, set[tuple[int, int]], HeldPlan]]:
        """The commit's acks on each subscription, planned on copies of the group's
        cursors so far (kept only if every one of its acks passes)."""
        mine: dict[tuple[str, str], tuple[Cursor, set[tuple[int, int]], HeldPlan]] = {}
        by_sub: dict[tuple[str, str], list[tuple[tuple[tuple[int, int], ...], bool]]] = {}
        for acks in p.end.acks:
            by_sub.setdefault((acks.topic, acks.subscription), []).append((acks.positions, acks.cumulative))
        for key, sub in p.subs.items():
            sub.log.check_open()
            cursor = (cursors.get(key) or sub.cursor).copy()
            marks = set(taken.get(key, ()))
            plan = sub.txn.plan_held(p.end.txn, by_sub.get(key, []), p.actor, cursor, marks)
            mine[key] = (cursor, marks, plan)
        return mine

    def _joined(self, p: _Prepared) -> list[tuple[PartitionLog, Producer, Batch]]:
        """The commit's batches per partition and producer joined into as few entries as
        the batch limit allows: one entry holds the transaction's messages there,
        contiguous (a MessageBatch's messages concatenate), in the order they were sent."""
        joined: dict[tuple[PartitionLog, Producer], list[Batch]] = {}
        for plog, producer, batch in p.sends:
            batches = joined.setdefault((plog, producer), [])
            if batches:
                last = batches[-1]
                if (last.num_messages + batch.num_messages <= self.max_batch_messages
                        and batch.sequence_id > last.highest_sequence_id):
                    batches[-1] = Batch(last.producer_id, last.payload + batch.payload,
                                        last.num_messages + batch.num_messages, last.sequence_id,
                                        batch.highest_sequence_id, last.txn, last.session_id)
                    continue
            batches.append(batch)
        return [(plog, producer, batch) for (plog, producer), batches in joined.items() for batch in batches]
