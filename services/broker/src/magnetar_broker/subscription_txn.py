"""Transactional acknowledgements of a subscription (PIP-31 pending ack), mixed into
Subscription: conflict checks (pendingack.py), durable pending rows, and the commit or
abort of a transaction's acks.  Concurrent acks, and concurrent ends, of one
subscription share one database transaction (group commit)."""

from __future__ import annotations

import time

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import BadRequest, MagnetarError, NotAllowedError, TransactionConflict

from magnetar_broker import metrics
from magnetar_broker.cursor import WHOLE, full_mask
from magnetar_broker.partition.txnrules import (
    ended_error,
    may_act,
    not_owner_error,
    registration_refused,
)
from magnetar_broker.txnbuffer import ended_txn_error, txn_actor

SUB_NAMES = {pb.SUB_EXCLUSIVE: "Exclusive", pb.SUB_SHARED: "Shared",
             pb.SUB_FAILOVER: "Failover", pb.SUB_KEY_SHARED: "Key_Shared"}


class TransactionalAcks:
    # ---------------------------------------------------------------- transactions

    async def _check_txn(self, txn: tuple[int, int]) -> tuple[str, bool]:
        """Refuse an ack for a transaction ended here; answer the sender (role, may act
        for any owner), which a transaction's first ack here needs: the write that records
        it also registers this subscription with the transaction (``_ack_txns``)."""
        outcome = self.txn_outcomes.get(txn)
        if outcome is not None:
            raise await ended_txn_error(self.log.store, txn, outcome)
        return txn_actor(self.log.txnbuf.roles)  # checked against the owner in _ack_round

    def _ack_what(self) -> str:
        return f"acknowledging on {self.log.name.full} subscription {self.name!r}"

    def _ack_not_owner(self, txn: tuple[int, int], actor: tuple[str, bool],
                       first_acks: dict) -> MagnetarError | None:
        """Every transactional ack is checked against the owner (see TxnBuffer._not_owner)."""
        if actor[1]:
            return None
        if txn in self._txn_registered:
            ok = may_act(actor, self._txn_registered[txn])
        else:
            ok = txn not in first_acks or first_acks[txn][0] == actor[0]
        return None if ok else not_owner_error(txn, self._ack_what(), actor)

    async def ack_txn(self, positions, cumulative: bool, txn: tuple[int, int]) -> None:
        """Acknowledge in a transaction: pending until it ends; durable before the reply.
        Concurrent transactional acks on a subscription share one database write."""
        if not self.durable:
            raise NotAllowedError("a reader cannot acknowledge in a transaction")
        if cumulative and self.sub_type in (pb.SUB_SHARED, pb.SUB_KEY_SHARED):
            raise NotAllowedError(
                f"cumulative ack is not allowed on {SUB_NAMES[self.sub_type]} subscription {self.name!r}")
        end = self.log.next_entry_id
        wanted = [(p.entry_id, p.batch_index) for p in positions]
        if not wanted or any(e >= end for e, _ in wanted):
            raise BadRequest(f"transactional ack on {self.log.name.full} names no position or one past the end")
        await self.check_positions("transactional ack", positions)
        actor = await self._check_txn(txn)
        await self._txn_acker.submit((wanted, cumulative, txn, actor))

    async def _ack_txns(self, items: list) -> list:
        results: list = [None] * len(items)
        async with self._lock:
            round_ = list(range(len(items)))
            while round_:
                round_ = await self._ack_round(items, round_, results)
        return results

    async def _ack_round(self, items: list, places: list[int], results: list) -> list[int]:
        """Check, hold and write the acks of ``items[places]``; answer into ``results``.
        Returns the places to check again: items that clashed with a transaction's first
        ack in this round, when some first ack was refused (its positions are free again,
        so the clash may have been with nothing)."""
        rows: list[tuple] = []
        accepted: list = []
        first_acks: dict[tuple[int, int], tuple[str, bool]] = {}  # register in this write
        clashed: list[int] = []
        for place in places:
            wanted, cumulative, txn, actor = items[place]
            if refusal := self._ack_not_owner(txn, actor, first_acks):
                results[place] = refusal
                continue
            try:
                if cumulative:
                    wanted = [max(wanted)]
                    self.txn_acks.check_cumulative(txn, *wanted[0], self.cursor)
                else:
                    wanted = self.txn_acks.check_individual(txn, wanted, self.cursor)
            except MagnetarError as exc:
                results[place] = exc
                if first_acks and isinstance(exc, TransactionConflict):
                    clashed.append(place)
                continue
            results[place] = None  # a clash of an earlier round is gone
            # Held at once, so a later item of this group sees the conflict.
            if wanted:
                self.txn_acks.add(txn, wanted, cumulative)
                if txn not in self._txn_registered:
                    first_acks.setdefault(txn, actor)
            rows += [(e, i, txn[0], txn[1], cumulative) for e, i in wanted]
            accepted.append((place, wanted, cumulative, txn))
        refused: dict[tuple[int, int], MagnetarError] = {}
        if rows:
            _, registered = await self.log.lease_checked(
                "recording transactional acks", self.log.store.record_pending_acks(
                    self.log.topic_id, self.log.epoch, self.name, rows,
                    [(*txn, *actor) for txn, actor in first_acks.items()], self.log.name.full),
                owned=lambda result: result[0])
            for (txn, actor), answer in zip(first_acks.items(), registered):
                if answer[0]:
                    self._txn_registered[txn] = answer[-1]  # its owner
                else:
                    self.txn_acks.take(txn)  # its first acks here: nothing else is held
                    refused[txn] = await self._refusal(txn, actor, *answer[1:])
        for place, wanted, cumulative, txn in accepted:
            if txn in refused:
                results[place] = refused[txn]
                continue
            for entry_id, index in wanted:
                # Held by the transaction now: not the consumer's to redeliver.
                if cumulative:
                    self.deliveries.acked_cumulative(entry_id, index)
                else:
                    self.deliveries.acked(entry_id, index)
        return clashed if refused else []

    async def _refusal(self, txn: tuple[int, int], actor: tuple[str, bool], outcome: bool | None,
                       status: int | None, expired: bool, owner: str | None) -> MagnetarError:
        """Why a first ack here could not register the subscription with ``txn``."""
        if outcome is not None:  # it ended here already (before a restart of this broker)
            self.txn_outcomes[txn] = outcome
            return await ended_txn_error(self.log.store, txn, outcome)
        return registration_refused(
            txn, f"acknowledging on subscription {self.name!r} of {self.log.name.full}",
            status, expired, owner, actor)

    async def end_txn(self, txn: tuple[int, int], commit: bool) -> None:
        """EndTxnOnSubscription: commit makes the acks final, abort redelivers.  Ends
        arriving together share one database transaction."""
        await self._txn_ender.submit((txn, commit))
        self.log.wake()

    async def _end_txns(self, items: list) -> list:
        started = time.perf_counter()
        store = self.log.store
        results: list = []
        decided: list[tuple] = []
        async with self._lock, self._persist_lock:
            for txn, commit in items:
                outcome = self.txn_outcomes.get(txn)
                if outcome is None and not self.txn_acks.holds(txn):
                    # Acks pending here mean it has not ended here; otherwise ask the
                    # database (a repeat after a restart must get the same answer).
                    outcome = await store.outcome(self.log.topic_id, self.name, txn)
                if outcome is not None:
                    self.txn_outcomes[txn] = outcome
                    results.append(None if outcome == commit else ended_error(txn, outcome))
                    continue
                individual, cumulative = self.txn_acks.take(txn)
                if commit:
                    for entry_id, index in individual:
                        self.cursor.ack(entry_id, index)
                    if cumulative:
                        self.cursor.ack_cumulative(*cumulative)
                        self.deliveries.acked_cumulative(*cumulative)
                self.txn_outcomes[txn] = commit  # a duplicate later in this group sees it
                decided.append((txn, commit, individual, cumulative))
                results.append(None)
            if decided:
                any_commit = any(d[1] for d in decided)
                cursor = (self.cursor.mark_delete, self.cursor.encode()) if any_commit else None
                await self.log.lease_checked("ending transactions", store.end_subscription_txns(
                    self.log.topic_id, self.log.epoch, self.name, cursor,
                    [(*d[0], d[1]) for d in decided]))
                for txn, commit, individual, cumulative in decided:
                    (metrics.TP_COMMITTED if commit else metrics.TP_ABORTED).inc()
                    if not commit:
                        await self._requeue(individual, cumulative)
                metrics.TP_COMMIT_LATENCY.observe(time.perf_counter() - started)
        return results

    async def _requeue(self, individual, cumulative) -> None:
        """An aborted transaction's acknowledged messages go back out, count + 1."""
        masks: dict[int, int] = {}
        for entry_id, index in individual:
            if index == WHOLE:
                entry = await self.log.read_one(entry_id)
                masks[entry_id] = full_mask(entry.num_messages) if entry else 0
            else:
                masks[entry_id] = masks.get(entry_id, 0) | 1 << index
        if cumulative:
            last_entry, last_index = cumulative
            for entry_id in range(self.cursor.mark_delete + 1, last_entry + 1):
                entry = await self.log.read_one(entry_id)
                if entry is None:
                    continue
                mask = full_mask(entry.num_messages)
                if entry_id == last_entry and last_index != WHOLE:
                    mask &= full_mask(last_index + 1)
                masks[entry_id] = masks.get(entry_id, 0) | (mask & self.cursor.unacked_mask(entry_id, entry.num_messages))
        for entry_id, mask in masks.items():
            if mask:
                self.deliveries.requeue(entry_id, mask)
        metrics.REDELIVERIES.inc(sum(m.bit_count() for m in masks.values()))

