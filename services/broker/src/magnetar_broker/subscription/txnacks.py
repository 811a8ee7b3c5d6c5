"""Transactional acknowledgements of a subscription (PIP-31 pending ack), a part of
the Subscription (composed, ``sub.txn``): conflict checks (pendingack.py), durable pending rows, and the commit or
abort of a transaction's acks.  Concurrent acks, and concurrent ends, of one
subscription share one database transaction (group commit).

A one-request transaction's acks are *held* instead (``hold``): checked for conflicts
and kept in memory only, as pending as any other (not redelivered, conflicting), until
its commit writes them with its data in one SQL transaction (``plan_held`` under the
subscription's locks, ``held_committed`` after the COMMIT), its abort or its timeout
releases them (``release``), or the transaction goes the classic way and a classic ack
makes them durable (``_ack_round``).  A broker that restarts forgets them: the commit
checks its acks again then (docs/transactions.md, "One-request transactions")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from magnetar_broker import metrics
from magnetar_broker.partition.batchcheck import PositionLike
from magnetar_broker.partition.txnbuffer import ended_txn_error, txn_actor
from magnetar_broker.partition.txnrules import (
    Actor,
    ended_error,
    may_act,
    not_owner_error,
    registration_refused,
)
from magnetar_broker.rows import OutcomeRow, PendingAckRow, RegistrationRow
from magnetar_broker.store import AckRegistration
from magnetar_broker.subscription.cursor import WHOLE, Cursor, full_mask
from magnetar_broker.subscription.dispatch import SUB_NAMES, Deliveries
from magnetar_broker.subscription.pendingack import Acked, PendingAcks
from magnetar_broker.subscription.view import PartitionView
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import BadRequest, MagnetarError, NotAllowedError, TransactionConflict
from magnetar_protocol.txnid import TxnID
from magnetar_runtime.groupcommit import GroupCommit


class Holder(Protocol):
    """What TxnAcks reads and updates of the subscription holding it."""

    log: PartitionView
    name: str
    durable: bool
    sub_type: int | None
    cursor: Cursor
    deliveries: Deliveries

    @property
    def acked(self) -> Acked: ...  # the cursor, and the due delayed messages it has passed
    lock: asyncio.Lock
    persist_lock: asyncio.Lock

    async def check_positions(self, what: str, positions: Sequence[PositionLike]) -> None: ...
    def redelivered(self, messages: int) -> None: ...
    def rewind(self) -> int: ...
    def acked_in_transaction(self, individual: list[tuple[int, int]]) -> None: ...


# How long past its transaction's timeout a held ack stays: the coordinator aborts a
# transaction within its timeout + timeout_check_interval (1 s by default), and a commit
# arriving later finds it aborted anyway.
HOLD_GRACE_S = 2.0


@dataclass
class Held:
    """A one-request transaction's acks held here (in ``pending`` too), not written."""
    actor: Actor
    individual: set[tuple[int, int]] = field(default_factory=set)
    cumulative: tuple[int, int] | None = None
    timer: asyncio.TimerHandle | None = None


@dataclass(frozen=True, slots=True)
class Committing:
    """A one-request commit's statement in flight here: its transactions and the
    positions it settles (a hold touching neither need not wait for it)."""
    txns: frozenset[TxnID]
    positions: frozenset[tuple[int, int]]


@dataclass(frozen=True, slots=True)
class HeldPlan:
    """What a one-request commit settles here: the transaction's acks, and its acks that
    were not held (checked now: a broker restart or an expired hold forgot them)."""
    txn: TxnID
    individual: list[tuple[int, int]]
    cumulative: tuple[int, int] | None


class TxnAcks:
    """The acknowledgements of one subscription made inside transactions: a part of the
    subscription (``Subscription.txn``), which it reads and updates (cursor, deliveries,
    locks) as the subscription's own code does."""

    def __init__(self, sub: Holder) -> None:
        self.sub = sub  # the subscription holding this
        self.pending = PendingAcks()
        self.outcomes: dict[TxnID, bool] = {}
        # Transactions this subscription is registered with -> their owner's role, so every
        # later transactional ack checks the owner with a dict lookup.
        self._registered: dict[TxnID, str | None] = {}
        self.held: dict[TxnID, Held] = {}  # one-request transactions' acks, in memory only
        self._committing: Committing | None = None  # a one-request commit's statement in flight
        self._acker: GroupCommit[tuple[Any, ...], MagnetarError | None] = GroupCommit(self._ack_txns, 256)
        self._ender: GroupCommit[tuple[TxnID, bool], MagnetarError | None] = GroupCommit(self._end_txns, 256)

    async def _check_txn(self, txn: TxnID) -> tuple[str, bool]:
        """Refuse an ack for a transaction ended here; answer the sender (role, may act
        for any owner), which a transaction's first ack here needs: the write that records
        it also registers this subscription with the transaction (``_ack_txns``)."""
        outcome = self.outcomes.get(txn)
        if outcome is not None:
            raise await ended_txn_error(self.sub.log.store, txn, outcome)
        return txn_actor(self.sub.log.roles)  # checked against the owner in _ack_round

    def _ack_what(self) -> str:
        return f"acknowledging on {self.sub.log.name.full} subscription {self.sub.name!r}"

    def _ack_not_owner(self, txn: TxnID, actor: tuple[str, bool],
                       first_acks: dict[Any, Any]) -> MagnetarError | None:
        """Every transactional ack is checked against the owner (see TxnBuffer._not_owner)."""
        if actor[1]:
            return None
        if txn in self._registered:
            ok = may_act(actor, self._registered[txn])
        else:
            ok = txn not in first_acks or first_acks[txn][0] == actor[0]
        return None if ok else not_owner_error(txn, self._ack_what(), actor)

    async def _checked(self, positions: Sequence[PositionLike], cumulative: bool,
                       txn: TxnID) -> tuple[list[tuple[int, int]], tuple[str, bool]]:
        """A transactional ack's own rules (a durable subscription, cumulative only where
        allowed, positions in the log): its positions and the acting role."""
        if not self.sub.durable:
            raise NotAllowedError("a reader cannot acknowledge in a transaction")
        if cumulative and self.sub.sub_type in (pb.SUB_SHARED, pb.SUB_KEY_SHARED):
            raise NotAllowedError(
                f"cumulative ack is not allowed on {SUB_NAMES[self.sub.sub_type]} subscription {self.sub.name!r}")
        end = self.sub.log.next_entry_id
        wanted = [(p.entry_id, p.batch_index) for p in positions]
        if not wanted or any(e >= end for e, _ in wanted):
            raise BadRequest(f"transactional ack on {self.sub.log.name.full} names no position or one past the end")
        await self.sub.check_positions("transactional ack", positions)
        return wanted, await self._check_txn(txn)

    async def ack(self, positions: Sequence[PositionLike], cumulative: bool, txn: TxnID) -> None:
        """Acknowledge in a transaction: pending until it ends; durable before the reply.
        Concurrent transactional acks on a subscription share one database write."""
        wanted, actor = await self._checked(positions, cumulative, txn)
        await self._acker.submit((wanted, cumulative, txn, actor))

    # ---------------------------------------------------------------- held (one-request)

    async def hold(self, positions: Sequence[PositionLike], cumulative: bool, txn: TxnID,
                   hold_s: float) -> None:
        """A one-request transaction's ack: checked against every other transaction's
        (TransactionConflict raises here, as for a classic ack) and held in memory for
        ``hold_s`` (its time left) plus HOLD_GRACE_S; written by its commit.  A
        transaction whose acks here are durable already (it went the classic way) acks
        the classic way."""
        wanted, actor = await self._checked(positions, cumulative, txn)
        if txn in self._registered:
            await self._acker.submit((wanted, cumulative, txn, actor))
            return
        committing = self._committing
        if (committing is not None and not cumulative and txn not in committing.txns
                and committing.positions.isdisjoint(wanted)):
            # A one-request commit holds the lock through its statement, but changes
            # nothing a hold reads (pending, cursor) until its apply, which does not
            # await: a hold of other messages need not wait for its fsync.
            self._hold_now(wanted, cumulative, txn, actor, hold_s)
            return
        async with self.sub.lock:
            self._hold_now(wanted, cumulative, txn, actor, hold_s)

    def _hold_now(self, wanted: list[tuple[int, int]], cumulative: bool, txn: TxnID,
                  actor: tuple[str, bool], hold_s: float) -> None:
        held = self.held.get(txn)
        if held is not None and held.actor[0] != actor[0] and not actor[1]:
            raise not_owner_error(txn, self._ack_what(), actor)
        if cumulative:
            wanted = [max(wanted)]
            self.pending.check_cumulative(txn, wanted[0][0], wanted[0][1], self.sub.cursor)
        else:
            wanted = self.pending.check_individual(txn, wanted, self.sub.cursor)
        if held is None:
            held = self.held[txn] = Held(actor)
        if wanted:
            self.pending.add(txn, wanted, cumulative)
        for entry_id, index in wanted:
            # Held by the transaction now: not the consumer's to redeliver.
            if cumulative:
                held.cumulative = (entry_id, index)
                self.sub.deliveries.acked_cumulative(entry_id, index)
            else:
                held.individual.add((entry_id, index))
                self.sub.deliveries.acked(entry_id, index)
        if held.timer is not None:
            held.timer.cancel()
        held.timer = asyncio.get_running_loop().call_later(
            hold_s + HOLD_GRACE_S, lambda: asyncio.ensure_future(self.release(txn, "timed out")))

    async def release(self, txn: TxnID, why: str = "aborted") -> None:
        """Let a one-request transaction's held acks go (its abort, its timeout): the
        messages are redelivered, counted as a redelivery (as an abort's are)."""
        async with self.sub.lock:
            held = self.held.pop(txn, None)
            if held is None:
                return
            if held.timer is not None:
                held.timer.cancel()
            individual, cumulative = self.pending.take(txn)
            metrics.TP_ABORTED.inc()
            await self._requeue(individual, cumulative)
        self.sub.log.wake()

    def plan_held(self, txn: TxnID, acks: Sequence[tuple[Sequence[tuple[int, int]], bool]],
                  actor: tuple[str, bool], cursor: Cursor, taken: set[tuple[int, int]]) -> HeldPlan:
        """What the commit of ``txn`` settles here, checked, changing nothing (the caller
        holds ``sub.lock`` and ``sub.persist_lock``): its held acks and those of ``acks``
        not held (checked as new ones: TransactionConflict), applied to ``cursor`` (a copy
        the commit writes).  ``taken``: positions settled by the commits written with it
        (a second commit of one message conflicts), extended here."""
        if txn in self._registered:
            raise TransactionConflict(f"transaction {TxnID(*txn)} acknowledged on {self.sub.name!r} "
                                      "the classic way; it cannot commit in one request")
        held = self.held.get(txn)
        if held is not None and not may_act(actor, held.actor[0]):
            raise not_owner_error(txn, self._ack_what(), actor)
        individual = set(held.individual) if held is not None else set()
        cumulative = held.cumulative if held is not None else None
        for positions, is_cumulative in acks:
            if is_cumulative:
                last = max(positions)
                if cumulative is not None and last <= cumulative:
                    continue
                if self.sub.sub_type in (pb.SUB_SHARED, pb.SUB_KEY_SHARED):
                    raise NotAllowedError(f"cumulative ack is not allowed on {SUB_NAMES[self.sub.sub_type]} "
                                          f"subscription {self.sub.name!r}")
                self.pending.check_cumulative(txn, last[0], last[1], self.sub.cursor)
                cumulative = last
                continue
            for position in positions:
                if position not in individual:
                    self.pending.check_individual(txn, [position], self.sub.cursor)
                    individual.add(position)
        clash = individual & taken
        if clash:
            entry_id, index = min(clash)
            raise TransactionConflict(f"message {entry_id}:{index} is acknowledged by another "
                                      "transaction committed with this one")
        taken |= individual
        ordered = sorted(individual)
        apply_acks(cursor, ordered, cumulative)
        return HeldPlan(txn, ordered, cumulative)

    @contextmanager
    def committing(self, plans: Sequence[HeldPlan]) -> Iterator[None]:
        """Around a one-request commit's statement and apply (the caller holds
        ``sub.lock``): holds of other transactions on other messages go on meanwhile."""
        positions = {p for plan in plans for p in plan.individual}
        positions |= {plan.cumulative for plan in plans if plan.cumulative is not None}
        self._committing = Committing(frozenset(plan.txn for plan in plans), frozenset(positions))
        try:
            yield
        finally:
            self._committing = None

    def held_committed(self, plan: HeldPlan) -> None:
        """A one-request commit's SQL transaction committed: the same cursor moves in
        memory (under the caller's locks)."""
        held = self.held.pop(plan.txn, None)
        if held is not None and held.timer is not None:
            held.timer.cancel()
        self.pending.take(plan.txn)
        apply_acks(self.sub.cursor, plan.individual, plan.cumulative)
        for entry_id, index in plan.individual:
            self.sub.deliveries.acked(entry_id, index)
        if plan.cumulative:
            self.sub.deliveries.acked_cumulative(*plan.cumulative)
        metrics.TP_COMMITTED.inc()

    def _convert_held(self, txn: TxnID) -> list[PendingAckRow]:
        """A classic ack of a transaction holding acks here (it spilled to the classic
        way): its held acks become durable in the same write (their rows)."""
        held = self.held.pop(txn, None)
        if held is None:
            return []
        if held.timer is not None:
            held.timer.cancel()
        rows = [PendingAckRow(e, i, txn[0], txn[1], False) for e, i in sorted(held.individual)]
        if held.cumulative is not None:
            rows.append(PendingAckRow(*held.cumulative, txn[0], txn[1], True))
        return rows

    async def _ack_txns(self, items: list[Any]) -> list[Any]:
        results: list[Any] = [None] * len(items)
        async with self.sub.lock:
            round_ = list(range(len(items)))
            while round_:
                round_ = await self._ack_round(items, round_, results)
        return results

    async def _ack_round(self, items: list[Any], places: list[int], results: list[Any]) -> list[int]:
        """Check, hold and write the acks of ``items[places]``; answer into ``results``.
        Returns the places to check again: items that clashed with a transaction's first
        ack in this round, when some first ack was refused (its positions are free again,
        so the clash may have been with nothing)."""
        rows: list[PendingAckRow] = []
        accepted: list[Any] = []
        first_acks: dict[TxnID, tuple[str, bool]] = {}  # register in this write
        clashed: list[int] = []
        for place in places:
            wanted, cumulative, txn, actor = items[place]
            if refusal := self._ack_not_owner(txn, actor, first_acks):
                results[place] = refusal
                continue
            try:
                if cumulative:
                    wanted = [max(wanted)]
                    self.pending.check_cumulative(txn, wanted[0][0], wanted[0][1], self.sub.acked)
                else:
                    wanted = self.pending.check_individual(txn, wanted, self.sub.acked)
            except MagnetarError as exc:
                results[place] = exc
                if first_acks and isinstance(exc, TransactionConflict):
                    clashed.append(place)
                continue
            results[place] = None  # a clash of an earlier round is gone
            # Held at once, so a later item of this group sees the conflict.
            converted = self._convert_held(txn)
            if wanted or converted:
                self.pending.add(txn, wanted, cumulative)
                if txn not in self._registered:
                    first_acks.setdefault(txn, actor)
            rows += converted
            rows += [PendingAckRow(e, i, txn[0], txn[1], cumulative) for e, i in wanted]
            accepted.append((place, wanted, cumulative, txn))
        refused: dict[TxnID, MagnetarError] = {}
        if rows:
            written = await self.sub.log.lease_checked(
                "recording transactional acks", self.sub.log.store.record_pending_acks(
                    self.sub.log.topic_id, self.sub.log.epoch, self.sub.name, rows,
                    [RegistrationRow(*txn, *actor) for txn, actor in first_acks.items()],
                    self.sub.log.name.full),
                owned=lambda result: result.owned)
            for (txn, actor), answer in zip(first_acks.items(), written.registered):
                if answer.ok:
                    self._registered[txn] = answer.owner
                else:
                    self.pending.take(txn)  # its first acks here: nothing else is held
                    refused[txn] = await self._refusal(txn, actor, answer)
        for place, wanted, cumulative, txn in accepted:
            if txn in refused:
                results[place] = refused[txn]
                continue
            for entry_id, index in wanted:
                # Held by the transaction now: not the consumer's to redeliver.
                if cumulative:
                    self.sub.deliveries.acked_cumulative(entry_id, index)
                else:
                    self.sub.deliveries.acked(entry_id, index)
        return clashed if refused else []

    async def _refusal(self, txn: TxnID, actor: tuple[str, bool], answer: AckRegistration) -> MagnetarError:
        """Why a first ack here could not register the subscription with ``txn``."""
        if answer.outcome is not None:  # it ended here already (before a restart of this broker)
            self.outcomes[txn] = answer.outcome
            return await ended_txn_error(self.sub.log.store, txn, answer.outcome)
        return registration_refused(
            txn, f"acknowledging on subscription {self.sub.name!r} of {self.sub.log.name.full}",
            answer.status, answer.expired, answer.owner, actor)

    async def end(self, txn: TxnID, commit: bool) -> None:
        """EndTxnOnSubscription (the two-phase path): commit makes the acks final, abort
        redelivers.  Ends arriving together share one database transaction."""
        await self._ender.submit((txn, commit))
        self.sub.log.wake()

    async def _end_txns(self, items: list[Any]) -> list[Any]:
        started = time.perf_counter()
        async with self.sub.lock, self.sub.persist_lock:
            results, ends = await self._decide(items)
            if ends:
                decided = await self.sub.log.lease_checked(
                    "ending transactions", self._write_ends(None, ends), owned=lambda d: d is not None)
                assert decided is not None  # lease_checked raised otherwise
                await self.ended(decided)
                metrics.TP_COMMIT_LATENCY.observe(time.perf_counter() - started)
        return results

    async def _decide(self, items: list[tuple[TxnID, bool]]) -> tuple[list[Any], list[tuple[TxnID, bool]]]:
        """The answer to each (transaction, commit?) whose outcome here is known already
        (the same end again: None; the opposite: the error), and the ends left to write
        (each transaction once: a duplicate later in the group is answered from it)."""
        results: list[Any] = []
        ends: dict[TxnID, bool] = {}
        for txn, commit in items:
            outcome = self.outcomes.get(txn, ends.get(txn))
            if outcome is None and not self.pending.holds(txn):
                # Acks pending here mean it has not ended here; otherwise ask the
                # database (a repeat after a restart must get the same answer).
                outcome = await self.sub.log.store.outcome(self.sub.log.topic_id, self.sub.name, txn)
                if outcome is not None:
                    self.outcomes[txn] = outcome
            if outcome is not None:
                results.append(None if outcome == commit else ended_error(txn, outcome))
                continue
            ends[txn] = commit
            results.append(None)
        return results, list(ends.items())

    # ------------------------------------------------ both paths' write (txnend.py)

    async def end_in(self, conn: Any, ends: list[tuple[TxnID, bool]]) -> list[tuple[Any, ...]] | None:
        """A one-phase end: write this subscription's end of every (transaction, commit?)
        of ``ends`` in ``conn``'s SQL transaction, changing nothing in memory; the caller
        holds ``sub.lock`` and ``sub.persist_lock`` until ``ended`` ran (or the SQL
        transaction rolled back).  Returns what ``ended`` applies, or None when one end
        is not this path's to write (an outcome recorded already, or the lease moved:
        nothing written)."""
        store = self.sub.log.store
        for txn, _ in ends:
            if self.outcomes.get(txn) is not None:
                return None
            if not self.pending.holds(txn) and await store.outcome(
                    self.sub.log.topic_id, self.sub.name, txn, conn=conn) is not None:
                return None
        return await self._write_ends(conn, ends)

    async def _write_ends(self, conn: Any, ends: list[tuple[TxnID, bool]]) -> list[tuple[Any, ...]] | None:
        """Write the ends (in ``conn``'s SQL transaction, or one of its own): the cursor
        the commits' acks make (on a copy: the live one moves in ``ended``) and the
        outcomes, in one statement.  None, nothing written, when the lease moved."""
        cursor = None
        decided = []
        for txn, commit in ends:
            individual, cumulative = self.pending.peek(txn)
            if commit:
                cursor = cursor or self.sub.cursor.copy()
                apply_acks(cursor, individual, cumulative)
            decided.append((txn, commit, individual, cumulative))
        state = (cursor.mark_delete, cursor.encode()) if cursor is not None else None
        if not await self.sub.log.store.end_subscription_txns(
                self.sub.log.topic_id, self.sub.log.epoch, self.sub.name, state,
                [OutcomeRow(*txn, commit) for txn, commit in ends], conn=conn):
            return None
        return decided

    async def ended(self, decided: list[tuple[Any, ...]]) -> None:
        """The in-memory effects of written ends (either path's): the same cursor moves
        they persisted, or the redelivery of an abort's messages."""
        for txn, commit, _, _ in decided:
            individual, cumulative = self.pending.take(txn)
            if commit:
                apply_acks(self.sub.cursor, individual, cumulative)
                self.sub.acked_in_transaction(individual)
                if cumulative:
                    self.sub.deliveries.acked_cumulative(*cumulative)
            self.outcomes[txn] = commit
            (metrics.TP_COMMITTED if commit else metrics.TP_ABORTED).inc()
            if not commit:
                await self._requeue(individual, cumulative)

    async def _requeue(self, individual: list[tuple[int, int]], cumulative: tuple[int, int] | None) -> None:
        """An aborted transaction's acknowledged messages go back out, count + 1.  One
        that acknowledged cumulatively also rewinds the subscription (Exclusive and
        Failover; cumulative acks exist on no other type): everything its consumers hold
        unacknowledged goes out again too, count + 1, so the consumer gets every message
        after the durable position again, in order.  Pulsar's PendingAckHandleImpl
        calls redeliverUnacknowledgedMessages there, which rewinds the single active
        consumer's cursor to its mark-delete position (its client drops its queue first)."""
        rewound = self.sub.rewind() if cumulative else 0
        masks: dict[int, int] = {}
        for entry_id, index in individual:
            if index == WHOLE:
                entry = await self.sub.log.read_one(entry_id)
                masks[entry_id] = full_mask(entry.num_messages) if entry else 0
            else:
                masks[entry_id] = masks.get(entry_id, 0) | 1 << index
        if cumulative:
            last_entry, last_index = cumulative
            for entry_id in range(self.sub.cursor.mark_delete + 1, last_entry + 1):
                entry = await self.sub.log.read_one(entry_id)
                if entry is None:
                    continue
                mask = full_mask(entry.num_messages)
                if entry_id == last_entry and last_index != WHOLE:
                    mask &= full_mask(last_index + 1)
                unacked = self.sub.cursor.unacked_mask(entry_id, entry.num_messages)
                masks[entry_id] = masks.get(entry_id, 0) | (mask & unacked)
        for entry_id, mask in masks.items():
            if mask:
                self.sub.deliveries.requeue(entry_id, mask)
        self.sub.redelivered(rewound + sum(m.bit_count() for m in masks.values()))


def apply_acks(cursor: Cursor, individual: list[tuple[int, int]], cumulative: tuple[int, int] | None) -> None:
    """Apply a transaction's individual acks and its cumulative one (if any) to ``cursor``."""
    for entry_id, index in individual:
        cursor.ack(entry_id, index)
    if cumulative:
        cursor.ack_cumulative(*cumulative)
