"""Coordinator logic: new transactions, registrations, EndTxn with durable
transitions, timeouts, and recovery of transactions a previous process left ending."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from magnetar_coordinator import adoption, commitorder, metrics
from magnetar_coordinator import statemachine as sm
from magnetar_coordinator.local import LocalOneRequest, LocalParticipants
from magnetar_coordinator.participants import Participants
from magnetar_coordinator.settings import CoordinatorSettings
from magnetar_coordinator.store import AppCommitListener, CoordinatorStore, Fenced
from magnetar_coordinator.txnlimits import RoleTxnLimits, TooFast, TooManyOpen
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol import onerequest
from magnetar_protocol.errors import (
    BadRequest,
    MagnetarError,
    NotAllowedError,
    NotOwner,
    ServiceNotReady,
    TooManyRequests,
    TransactionCoordinatorNotFoundError,
    TransactionHasOperationFailed,
    TransactionNotFound,
)
from magnetar_protocol.keys import key_problem
from magnetar_protocol.topics import TopicName, validate_name_part
from magnetar_protocol.txnid import TxnID
from magnetar_runtime.auth import Authenticator, current_role
from magnetar_runtime.failpoints import failpoint
from magnetar_runtime.groupcommit import GroupCommit
from magnetar_runtime.loops import BackgroundLoop
from magnetar_runtime.rpc import RpcClient
from magnetar_runtime.tasks import TaskSet

log = logging.getLogger("magnetar.coordinator")
T = TypeVar("T")
# How long a stopping coordinator waits for the commits and aborts it is driving (after
# uvicorn's own wait for open requests); the chart's terminationGracePeriodSeconds covers both.
DRAIN_S = 10


class CoordinatorService:
    """The coordinator of one TCID: its own (the process's), or, with ``adopter`` set,
    one adopted from a gone process, served by the adopter's routes, RPC client and
    participants until its owner claims it back."""

    def __init__(self, store: CoordinatorStore, settings: CoordinatorSettings,
                 auth: Authenticator | None = None,
                 adopter: CoordinatorService | None = None,
                 local: LocalParticipants[Any] | None = None,
                 one_request: LocalOneRequest | None = None):
        self.store = store
        self.settings = settings
        self.auth = auth or Authenticator(settings)
        self.tcid = store.tcid
        self.ttl_s = settings.lease_ttl_ms / 1000
        self.adopter = adopter
        if adopter is None:
            self.rpc = RpcClient(settings.broker_request_timeout_ms / 1000, self.auth.headers())
            self.participants = Participants(self.rpc, store.live_brokers, self.ttl_s)
        else:
            self.rpc, self.participants = adopter.rpc, adopter.participants
        # A hosting broker's participants (magnetar_broker.txnend.LocalEnds, given by
        # hosted_coordinator): transactions it alone serves end in one SQL transaction.
        self.local: LocalParticipants[Any] | None = adopter.local if adopter is not None else local
        # ... and commits a one-request transaction with its data (issue 26), when allowed.
        self.one_request: LocalOneRequest | None = (
            adopter.one_request if adopter is not None
            else one_request if settings.one_request_commit else None)
        self._one_phase_ends = GroupCommit(self._one_phase_group, 256)
        # TCIDs this process adopted: TCID -> the service acting for it.
        self.adopted: dict[int, CoordinatorService] = {}
        self.ready = False
        self._ids: list[int] = []
        self._id_lock = asyncio.Lock()
        self._driving: dict[int, asyncio.Task[Any]] = {}
        # The commit attempt of each transaction being committed (end_txn): shared.
        self._committing: dict[int, asyncio.Future[None]] = {}
        self._expiring: set[int] = set()
        # Work started and not awaited (recovery, loops stopped from inside themselves,
        # timeout aborts), held until done (magnetar_runtime.tasks says why).
        self._background = TaskSet(f"coordinator {self.tcid}", log)
        self.claim_loop = BackgroundLoop("coordinator-claim", settings.heartbeat_interval_ms / 1000,
                                         self.claim_or_heartbeat)
        self.timeout_loop = BackgroundLoop("txn-timeouts", settings.timeout_check_interval_ms / 1000,
                                           self.abort_expired)
        self.purge_loop = BackgroundLoop("txn-purge", 60, self.purge_ended)
        self.adopt_loop = BackgroundLoop("coordinator-adopt", settings.heartbeat_interval_ms / 1000,
                                         self.adopt_orphans)
        self.limits = RoleTxnLimits(settings.max_open_txns_per_role, settings.max_new_txns_per_role_per_s)
        self._opened_during_count: dict[str, int] | None = None
        self.limits_loop = BackgroundLoop("txn-limits", settings.txn_limit_refresh_s, self.count_open)
        # Transactions applications commit in their own SQL transactions
        # (docs/exactly-once-postgres.md): heard at their COMMIT, finished here.  The
        # loop (re)takes the LISTEN connection when it broke.
        self._app_commits: AppCommitListener | None = None
        self.app_commits_loop = BackgroundLoop(
            "app-commits", settings.heartbeat_interval_ms / 1000, self.listen_app_commits)

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        self.claim_loop.start()

    async def stop(self) -> None:
        was_ready, self.ready = self.ready, False
        await self.adopt_loop.stop()
        # Adopted TCIDs are released too: a live coordinator adopts them at once.
        await asyncio.gather(*(child.stop() for child in list(self.adopted.values())))
        for loop in (self.claim_loop, self.timeout_loop, self.purge_loop, self.limits_loop,
                     self.app_commits_loop):
            await loop.stop()
        if self._app_commits is not None:
            await self._app_commits.close()
            self._app_commits = None
        # Let in-flight commits finish so their clients get an answer.
        if self._driving:
            await asyncio.wait(list(self._driving.values()), timeout=DRAIN_S)
        if was_ready:
            await self.store.release()
        if self.adopter is None:
            await self.rpc.close()

    async def claim_or_heartbeat(self) -> None:
        if self.ready:
            if not await self.store.heartbeat():
                self._lost_claim()
            return
        if self.adopter is not None:
            return  # an adopter never claims a TCID back once it let go
        if await self.store.claim(self.settings.url, self.ttl_s):
            log.info("claimed coordinator id %d (fence epoch %d)", self.tcid, self.store.fence_epoch)
            self._serve()
            self.adopt_loop.start()
        else:
            log.info("coordinator id %d is held by a live process; waiting for its lease", self.tcid)

    def _serve(self) -> None:
        """Act for the TCID just claimed or adopted: its deadlines are the rows' (re-armed
        by the timeout loop), its COMMITTING/ABORTING transactions are driven again."""
        self._ids.clear()
        self.ready = True
        self.timeout_loop.start()
        self.purge_loop.start()
        if self.adopter is None:  # new transactions are opened on the process's own TCID only
            self.limits_loop.start()
            self.app_commits_loop.start()  # one LISTEN per process, for adopted TCIDs too
        self._background.spawn(self.recover())

    def _lost_claim(self) -> None:
        if not self.ready:
            return
        if self.adopter is None:
            log.error("coordinator id %d was claimed by another process; no longer acting", self.tcid)
        else:
            log.info("adopted coordinator id %d was claimed back (its own process returned, or "
                     "another adopter took it); letting go", self.tcid)
            self.adopter.adopted.pop(self.tcid, None)
            self._background.spawn(self.claim_loop.stop())
        self.ready = False
        # Not awaited: this may run inside one of these loops' own iteration.
        self._background.spawn(self.timeout_loop.stop())
        self._background.spawn(self.purge_loop.stop())
        self._background.spawn(self.limits_loop.stop())
        # Stop driving endings: the new holder re-drives them (recovery), so going on
        # here would only tell every participant twice.  Waiting requests get Fenced.
        for task in list(self._driving.values()):
            task.cancel()

    async def adopt_orphans(self) -> None:
        """Adopt the TCIDs whose process is gone (adoption.py decides which are ours)."""
        if not self.ready:
            return
        gone, live_owners = await self.store.orphans(self.ttl_s)
        for tcid, stale_s in gone:
            if tcid in self.adopted or not adoption.should_adopt(
                    self.tcid, tcid, stale_s, self.ttl_s, live_owners):
                continue
            store = CoordinatorStore(self.store.pool, tcid, self.store.instance)
            if not await store.adopt(self.settings.url, self.ttl_s, self.tcid):
                continue  # its owner came back, or another coordinator adopted it first
            log.info("adopted coordinator id %d (no heartbeat for %.1fs; fence epoch %d): "
                     "serving its transactions until its own process claims it back",
                     tcid, stale_s, store.fence_epoch)
            metrics.ADOPTIONS.inc()
            child = CoordinatorService(store, self.settings, self.auth, adopter=self)
            self.adopted[tcid] = child
            child._serve()
            child.claim_loop.start()  # heartbeats the adopted row

    def _check_ready(self) -> None:
        if not self.ready:
            raise ServiceNotReady(f"coordinator {self.tcid} is not serving (starting or fenced)")

    async def recover(self) -> None:
        """Re-drive every transaction a previous process left COMMITTING or ABORTING."""
        for txn_id, status in await self.store.ending():
            action = pb.TXN_COMMIT if status == sm.COMMITTING else pb.TXN_ABORT
            log.info("recovering transaction %s (%s)", TxnID(self.tcid, txn_id), sm.NAMES[status])
            # A commit an application made may have earlier ones on its partitions
            # (checked: recovery is rare, and the query finds none for the others).
            self._drive(txn_id, action, after_earlier=status == sm.COMMITTING)
        active = await self.store.active_count()
        if self.adopter is None:
            metrics.ACTIVE.set(active)
        else:
            metrics.ACTIVE.inc(active)

    def _for(self, txn: pb.TxnId) -> CoordinatorService:
        """The service acting for the transaction's TCID here: this one or an adopted one."""
        if txn.most_bits != self.tcid and (adopted := self.adopted.get(txn.most_bits)):
            return adopted
        return self

    # ---------------------------------------------------------------- operations

    def _txn_id(self, txn: pb.TxnId) -> int:
        if txn.most_bits != self.tcid:
            raise TransactionCoordinatorNotFoundError(
                f"transaction {TxnID.from_wire(txn)} belongs to coordinator "
                f"{txn.most_bits}, this is coordinator {self.tcid}")
        return txn.least_bits

    async def _next_ids(self, count: int) -> list[int]:
        async with self._id_lock:
            taken: list[int] = []
            while len(taken) < count:
                if not self._ids:
                    first = await self.store.allocate_ids(self.settings.txn_id_block)
                    self._ids = list(range(first + self.settings.txn_id_block - 1, first - 1, -1))
                taken.append(self._ids.pop())
            return taken

    async def new_txn(self, req: pb.NewTxnRequest) -> pb.NewTxnResponse:
        self._check_ready()
        timeout = req.timeout_ms or self.settings.default_txn_timeout_ms
        if timeout > self.settings.max_txn_timeout_ms:
            raise BadRequest(f"transaction timeout {timeout} ms exceeds the maximum of "
                             f"{self.settings.max_txn_timeout_ms} ms")
        count = max(req.count, 1)
        self._check_pool_request(req, count)
        owner = current_role()
        if req.transaction_key and (problem := key_problem(req.transaction_key)):
            raise BadRequest(problem)
        self._admit(owner, count)
        txn_ids = await self._next_ids(count)
        if req.transaction_key:
            await self._guard(self.store.new_keyed_txn(
                txn_ids[0], timeout, owner, req.transaction_key, req.key_epoch))
        else:
            hold = req.hold_ms if count > 1 else 0
            await self._guard(asyncio.gather(
                *(self.store.new_txn(txn_id, timeout, owner, hold) for txn_id in txn_ids)))
        metrics.CREATED.inc(count)
        metrics.ACTIVE.inc(count)
        metrics.APPEND_LOG.inc()
        return pb.NewTxnResponse(txn=TxnID(self.tcid, txn_ids[0]).to_wire(),
                                 timeout_ms=timeout, more_least_bits=txn_ids[1:])

    def _admit(self, role: str, count: int) -> None:
        """The role's limits (txnlimits.py); superusers are exempt."""
        if self.auth.roles.is_superuser(role):
            return
        try:
            self.limits.admit(role, count, time.monotonic())
        except TooManyOpen as exc:  # the client raises it at once
            metrics.LIMITED.inc()
            raise NotAllowedError(str(exc)) from None
        except TooFast as exc:      # the client retries it with backoff (429)
            metrics.LIMITED.inc()
            raise TooManyRequests(str(exc)) from None
        if self._opened_during_count is not None:
            self._opened_during_count[role] = self._opened_during_count.get(role, 0) + count

    async def count_open(self) -> None:
        """Read the OPEN counts back (ended transactions stop counting)."""
        self._opened_during_count = {}
        try:
            counts = await self.store.open_by_owner()
            self.limits.reset_open(counts, self._opened_during_count)
        finally:
            self._opened_during_count = None
        self.limits.forget_idle(time.monotonic())

    def _check_pool_request(self, req: pb.NewTxnRequest, count: int) -> None:
        if count == 1:
            return
        if req.transaction_key:
            raise BadRequest("a keyed client opens one transaction at a time: count must be 0 or 1")
        if count > self.settings.max_txn_pool:
            raise BadRequest(f"{count} transactions in one request exceed the maximum of "
                             f"{self.settings.max_txn_pool} (max_txn_pool)")
        if req.hold_ms > self.settings.max_txn_hold_ms:
            raise BadRequest(f"hold_ms {req.hold_ms} exceeds the maximum of "
                             f"{self.settings.max_txn_hold_ms} ms (max_txn_hold_ms)")

    async def add_partitions(self, req: pb.AddPartitionToTxnRequest) -> pb.AddPartitionToTxnResponse:
        await self._for(req.txn)._register(req.txn, req.topics, [], "add-partitions")
        return pb.AddPartitionToTxnResponse()

    async def add_subscriptions(self, req: pb.AddSubscriptionToTxnRequest) -> pb.AddSubscriptionToTxnResponse:
        await self._for(req.txn)._register(req.txn, [], req.subscriptions, "add-subscriptions")
        return pb.AddSubscriptionToTxnResponse()

    async def add_participants(self, req: pb.AddParticipantsToTxnRequest) -> pb.AddParticipantsToTxnResponse:
        await self._for(req.txn)._register(req.txn, req.topics, req.subscriptions, "add-participants")
        return pb.AddParticipantsToTxnResponse()

    async def _register(self, txn: pb.TxnId, topics: Sequence[str], subscriptions: Sequence[pb.TxnSubscription],
                        what: str) -> None:
        """The one registration path (partitions and/or subscriptions), durable and
        only while the transaction is OPEN."""
        self._check_ready()
        txn_id = self._txn_id(txn)
        if not topics and not subscriptions:
            raise BadRequest(f"{what}: no topics or subscriptions given")
        partitions = [TopicName.parse(t).full for t in topics]
        sub_topics = [TopicName.parse(s.topic).full for s in subscriptions]
        subs = [validate_name_part("subscription", s.subscription) for s in subscriptions]
        await self._authorize(txn_id, f"{what} on a transaction")
        status = await self._guard(self.store.add_participants(txn_id, partitions, sub_topics, subs))
        await self._require_open(txn_id, status, what)
        metrics.APPEND_LOG.inc()

    async def _require_open(self, txn_id: int, status: int, what: str) -> None:
        if status != sm.OPEN:  # the slow path: is it ended because its key was fenced?
            record = await self.store.get(txn_id)
            sm.require_open(status, what, bool(record and record.expired))

    async def _authorize(self, txn_id: int, what: str) -> None:
        """With authentication on, only the transaction's owner (or a superuser) may act
        on it; with it off this costs nothing."""
        if self.auth.roles.is_superuser(current_role()):
            return
        record = await self.store.get(txn_id)
        if record is not None:
            self.auth.require_owner_or_superuser(record.owner, what)

    async def status(self, req: pb.TxnStatusRequest) -> pb.TxnStatusResponse:
        if (acting := self._for(req.txn)) is not self:
            return await acting.status(req)
        record = await self.store.get(self._txn_id(req.txn))
        if record is None:
            raise TransactionNotFound(f"transaction {TxnID.from_wire(req.txn)} does not exist")
        # Only its owner (or a superuser) learns a transaction's status.
        self.auth.require_owner_or_superuser(record.owner, "the status of a transaction")
        return pb.TxnStatusResponse(status=record.status)

    async def end(self, req: pb.EndTxnRequest) -> pb.EndTxnResponse:
        if (acting := self._for(req.txn)) is not self:
            return await acting.end(req)
        self._check_ready()
        txn_id = self._txn_id(req.txn)
        if req.action not in (pb.TXN_COMMIT, pb.TXN_ABORT):
            raise BadRequest(f"unknown transaction action {req.action}")
        if req.expired and req.action != pb.TXN_ABORT:
            raise BadRequest("only an abort can mark a transaction expired")
        if req.expired:  # fencing a key: the registry's (or an admin's) call
            self.auth.require_superuser("aborting a transaction as expired")
        await self._authorize(txn_id, "end a transaction")
        started = time.perf_counter()
        await self.end_txn(txn_id, req.action, expired=req.expired)
        metrics.EXECUTION_LATENCY.observe(time.perf_counter() - started)
        return pb.EndTxnResponse(status=sm.final_status(req.action))

    async def end_one_request(self, req: pb.EndTxnOneRequestRequest) -> pb.EndTxnResponse:
        """A one-request transaction's end, with its data (docs/transactions.md): a commit
        is written by the hosting broker in one SQL transaction with the status
        compare-and-set (a repeated one finds COMMITTED and writes nothing); a send or ack
        the broker refuses aborts it (TransactionHasOperationFailed, with the cause); an
        abort releases the acks the broker held.  NotOwner, nothing written, when a
        participant is not served here: the client ends it the classic way."""
        if (acting := self._for(req.txn)) is not self:
            return await acting.end_one_request(req)
        self._check_ready()
        txn_id = self._txn_id(req.txn)
        end = onerequest.from_wire(req)
        if self.one_request is None:
            raise NotOwner("this coordinator commits no transaction in one request; end it the classic way")
        await self._authorize(txn_id, "end a transaction")
        started = time.perf_counter()
        if not end.commit:
            await self.end_txn(txn_id, pb.TXN_ABORT)
            await self.one_request.release(end.txn, list(end.subscriptions))
            return pb.EndTxnResponse(status=sm.ABORTED)
        role = current_role()
        failpoint("coordinator.before_ending_durable")  # as on the other paths: nothing written
        outcome = await self._guard(self.one_request.commit(
            end, (role, self.auth.roles.is_superuser(role)), self.tcid, self.store.fence_epoch))
        if outcome.committed:
            failpoint("coordinator.after_ending_durable")  # COMMITTED, its data with it
            metrics.APPEND_LOG.inc()
            metrics.ONE_PHASE.inc()  # ended in one SQL transaction here, as a one-phase end
            metrics.ACTIVE.dec()
            metrics.COMMITTED.inc()
            metrics.EXECUTION_LATENCY.observe(time.perf_counter() - started)
            return pb.EndTxnResponse(status=sm.COMMITTED)
        if outcome.fence_lost:
            self._lost_claim()
            raise self.store.fenced()
        if outcome.refused is not None:
            record = await self.store.get(txn_id)
            if record is not None and record.status != sm.OPEN:
                # Ended already: a repeated commit (its acks now acknowledged, its
                # producer gone with a restart) is answered from the status.
                outcome = onerequest.Outcome(status=record.status, expired=record.expired)
        if outcome.refused is not None or not outcome.key_ok:
            # Spoiled (a send or ack refused), or its key fenced: aborted, as the classic
            # path aborts it (a fenced key's as expired), and its held acks released.
            expired = not outcome.key_ok
            try:
                await self.end_txn(txn_id, pb.TXN_ABORT, expired=expired)
            finally:
                await self.one_request.release(end.txn, list(end.subscriptions))
            if expired:
                sm.plan_end(sm.ABORTED, pb.TXN_COMMIT, expired=True)  # raises Expired
            raise TransactionHasOperationFailed(
                f"transaction {end.txn} was aborted because an operation failed: {outcome.refused}")
        if outcome.status is None:
            raise TransactionNotFound(f"transaction {end.txn} does not exist")
        # Not OPEN: a repeated commit (COMMITTED: nothing written twice), or ended another way.
        if sm.plan_end(outcome.status, pb.TXN_COMMIT, outcome.expired) is not sm.Step.DONE:
            await self.end_txn(txn_id, pb.TXN_COMMIT)  # COMMITTING: finish it as the classic path
        return pb.EndTxnResponse(status=sm.COMMITTED)

    async def end_txn(self, txn_id: int, action: pb.TxnAction, timed_out: bool = False,
                      expired: bool = False, decided: bool = False) -> None:
        """Drive the transaction to the end ``action`` asks for; idempotent.  Commits of
        one transaction asked for at once share one attempt: an application's commit is
        finished on its notification and on its client's EndTxn at the same moment, and
        a second attempt would only wait for the first's locks to find it done.
        ``decided``: known COMMITTING (an application's commit), so no OPEN
        compare-and-set is tried."""
        if action != pb.TXN_COMMIT:  # a commit is never timed out or expired
            return await self._end_txn(txn_id, action, timed_out, expired, decided)
        attempt = self._committing.get(txn_id)
        if attempt is None:
            attempt = asyncio.ensure_future(self._end_txn(txn_id, action, False, False, decided))
            self._committing[txn_id] = attempt
            attempt.add_done_callback(lambda done: self._attempt_done(txn_id, done))
        await asyncio.shield(attempt)  # a cancelled caller leaves it to the others

    def _attempt_done(self, txn_id: int, attempt: asyncio.Future[None]) -> None:
        if self._committing.get(txn_id) is attempt:
            del self._committing[txn_id]
        if not attempt.cancelled():
            attempt.exception()  # its callers got it; one that left is not told twice

    async def _end_txn(self, txn_id: int, action: pb.TxnAction, timed_out: bool,
                       expired: bool, decided: bool) -> None:
        if await self._one_phase(txn_id, action, timed_out, expired, decided):
            return
        # The usual case first: an OPEN transaction, ended once.  One compare-and-set
        # instead of a read and then a write; anything else is planned from the record.
        if not decided and await self._start_ending(txn_id, action, timed_out, expired):
            await self._until_driven(txn_id, action)
            return
        while True:
            record = await self.store.get(txn_id)
            if record is None:
                raise TransactionNotFound(f"transaction {TxnID(self.tcid, txn_id)} does not exist")
            step = sm.plan_end(record.status, action, record.expired)
            if step is sm.Step.DONE:
                return
            if step is sm.Step.START and not await self._start_ending(
                    txn_id, action, timed_out, expired):
                continue  # someone else moved it (a timeout, a duplicate request): plan again
            # An application's commit (found COMMITTING, with its place in the commit
            # order) goes after the earlier ones on its partitions.
            await self._until_driven(txn_id, action, after_earlier=step is not sm.Step.START
                                     and record.app_commit_order is not None)
            return

    async def _one_phase(self, txn_id: int, action: pb.TxnAction, timed_out: bool, expired: bool,
                         decided: bool = False) -> bool:
        """End an OPEN transaction whose participants this process's broker all serves
        in ONE SQL transaction, shared with the other such ends queued meanwhile (group
        commit, ``_one_phase_group``).  False, with nothing changed, sends it the
        two-phase way: no hosting broker, the setting off, a participant served
        elsewhere or moving, not OPEN, a key fenced, a lease lost."""
        if self.local is None or not self.settings.one_phase_commit or txn_id in self._driving:
            return False
        partitions, subscriptions = await self._guard(self.store.participants(txn_id))
        plan = self.local.plan(partitions, subscriptions)
        if plan is None:
            return False
        done = await self._guard(self._one_phase_ends.submit(
            _OnePhaseEnd(txn_id, action, timed_out, expired, plan, decided)))
        if done:
            metrics.APPEND_LOG.inc()
            metrics.ONE_PHASE.inc()
            metrics.ACTIVE.dec()
            (metrics.COMMITTED if action == pb.TXN_COMMIT else metrics.ABORTED).inc()
        return done

    async def _one_phase_group(self, items: list[_OnePhaseEnd]) -> list[bool]:
        """The one SQL transaction of a group of one-phase ends: the status
        compare-and-sets (fence and key epoch checked in the statements; the rows stay
        locked to the end), the participants re-read under those locks, each
        participant's markers or acknowledgement settlements (the broker's writers held,
        lease-checked statements), the final statuses; the in-memory effects after the
        COMMIT.  Anything unexpected rolls the whole group back to the two-phase path."""
        first: dict[int, int] = {}
        for i, item in enumerate(items):
            first.setdefault(item.txn_id, i)  # a repeated id: the two-phase path answers it
        group = [items[i] for i in first.values()]
        assert self.local is not None  # _one_phase queues only then
        try:
            held = await self.local.hold(
                [(TxnID(self.tcid, e.txn_id), e.action == pb.TXN_COMMIT, e.plan) for e in group])
        except MagnetarError as exc:  # a participant is moving (its lease, its loading)
            log.info("one-phase ends of %d transactions go the two-phase way: %s", len(group), exc)
            held = None
        if held is None:
            return [False] * len(items)
        ids = [e.txn_id for e in group]
        endings = [sm.ending_status(e.action) for e in group]
        committing = False
        try:
            failpoint("coordinator.before_ending_durable")
            async with self.store.transaction() as conn:
                if not await self.store.start_endings_in(
                        conn, [(e.txn_id, ending, e.timed_out, e.expired) for e, ending in zip(group, endings)],
                        decided={e.txn_id for e in group if e.decided}):
                    raise _TwoPhase  # not OPEN, or a key fenced: planned from its record
                # A registration that committed before the row locks is seen here; one
                # after them finds the transaction no longer OPEN and is refused.
                found = await self.store.participants_in(conn, ids)
                if not await held.write(conn, {TxnID(self.tcid, t): p for t, p in found.items()}):
                    raise _TwoPhase
                await self.store.transitions_in(
                    conn, ids, endings, [sm.final_status(e.action) for e in group])
                failpoint("coordinator.one_phase_before_commit")
                committing = True  # leaving the block commits
        except _TwoPhase:
            await held.release()
            return [False] * len(items)
        except Exception as exc:
            if committing or isinstance(exc, Fenced):
                # A failed COMMIT's outcome is unknown: the broker reloads the participants.
                await held.release(unknown=committing)
                raise
            # Rolled back, nothing changed: the two-phase path ends them.
            await held.release()
            log.warning("one-phase ends of %d transactions rolled back (%s); going the "
                        "two-phase way", len(group), exc)
            return [False] * len(items)
        except BaseException:
            # A failed COMMIT's outcome is unknown: the broker reloads the participants.
            await held.release(unknown=committing)
            raise
        failpoint("coordinator.after_ending_durable")
        failpoint("coordinator.one_phase_after_commit")
        try:
            await held.apply()
        finally:
            await held.release()
        return [first[item.txn_id] == i for i, item in enumerate(items)]

    async def _until_driven(self, txn_id: int, action: pb.TxnAction, after_earlier: bool = False) -> None:
        task = self._drive(txn_id, action, after_earlier)
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.cancelled() or self.ready:
                raise  # this request itself was cancelled
            raise self.store.fenced() from None  # the TCID's new holder finishes it

    async def _start_ending(self, txn_id: int, action: pb.TxnAction, timed_out: bool, expired: bool) -> bool:
        """OPEN -> COMMITTING/ABORTING, durable; False when it was not OPEN (or not this
        process's to move).  A commit whose key moved to a newer epoch is aborted as
        expired instead and ExpiredTransactionError raised."""
        failpoint("coordinator.before_ending_durable")
        moved, key_ok = await self._guard(self.store.start_ending(
            txn_id, sm.ending_status(action), timed_out, expired))
        if not key_ok:
            # The holder is fenced: abort (the registry does the same; the first wins).
            await self.end_txn(txn_id, pb.TXN_ABORT, expired=True)
            sm.plan_end(sm.ABORTED, pb.TXN_COMMIT, expired=True)  # raises Expired
        if moved:
            metrics.APPEND_LOG.inc()
            failpoint("coordinator.after_ending_durable")
        return moved

    def _drive(self, txn_id: int, action: pb.TxnAction, after_earlier: bool = False) -> asyncio.Task[Any]:
        """One fan-out task per transaction; repeated requests wait on the same one."""
        task = self._driving.get(txn_id)
        if task is None:
            task = asyncio.create_task(self._finish(txn_id, action, after_earlier))
            self._driving[txn_id] = task
            task.add_done_callback(lambda _: self._driving.pop(txn_id, None))
        return task

    async def _finish(self, txn_id: int, action: pb.TxnAction, after_earlier: bool = False) -> None:
        """Tell every participant, then record the final status.  ``after_earlier``: an
        application's commit, whose markers go after those of the earlier application
        commits on its partitions (``commitorder``)."""
        if after_earlier and action == pb.TXN_COMMIT:
            await self._end_earlier_commits(txn_id)
        partitions, subscriptions = await self.store.participants(txn_id)
        await self.participants.end(
            TxnID(self.tcid, txn_id).to_wire(), action, partitions, subscriptions)
        if await self._guard(self.store.transition(txn_id, sm.ending_status(action), sm.final_status(action))):
            metrics.APPEND_LOG.inc()
            metrics.ACTIVE.dec()
            (metrics.COMMITTED if action == pb.TXN_COMMIT else metrics.ABORTED).inc()

    async def _end_earlier_commits(self, txn_id: int) -> None:
        """Write the markers of every earlier application commit still COMMITTING on the
        partitions ``txn_id`` shares with it, oldest first, each acknowledged before the
        next (docs/exactly-once-postgres.md "Ordering").  They are decided (COMMITTING
        rows the application's COMMIT made visible), so any coordinator may end them on a
        partition; their own coordinators end them there again, idempotently."""
        for earlier in commitorder.earlier_commits(await self.store.app_predecessors(txn_id)):
            log.debug("%s goes after %s on %s", TxnID(self.tcid, txn_id),
                      TxnID(earlier.tcid, earlier.txn_id), ", ".join(earlier.partitions))
            await self.participants.end(TxnID(earlier.tcid, earlier.txn_id).to_wire(),
                                        pb.TXN_COMMIT, list(earlier.partitions), [])
            metrics.EARLIER_COMMITS_ENDED.inc()

    async def _guard(self, awaitable: Awaitable[T]) -> T:
        try:
            return await awaitable
        except Fenced:
            self._lost_claim()
            raise

    # ---------------------------------------------------------------- loops

    async def listen_app_commits(self) -> None:
        if self._app_commits is not None and self._app_commits.alive:
            return
        if self._app_commits is not None:
            await self._app_commits.close()
        self._app_commits = None
        self._app_commits = await self.store.listen_app_commits(self._heard_app_commit)
        # Commits made while nobody listened: those past their deadline are found by
        # the timeout loop, the rest are told by their client's EndTxn.

    def _heard_app_commit(self, most: int, least: int) -> None:
        acting = self if most == self.tcid else self.adopted.get(most)
        if acting is not None and acting.ready:
            self._background.spawn(acting._finish_app_commit(least))

    async def _finish_app_commit(self, txn_id: int) -> None:
        """Finish a transaction an application's SQL transaction moved to COMMITTING:
        markers, settled acks, then COMMITTED (in one phase when this process's broker
        serves every participant, else as recovery drives one)."""
        try:
            await self.end_txn(txn_id, pb.TXN_COMMIT, decided=True)
        except Exception as exc:  # retried by the client's EndTxn or the timeout loop
            log.info("finishing application commit of %s: %s", TxnID(self.tcid, txn_id), exc)

    async def abort_expired(self) -> None:
        for txn_id, status in await self.store.expired():
            if txn_id in self._driving or txn_id in self._expiring:
                continue
            if status != sm.OPEN:  # committed by an application, never told: finish it
                log.info("transaction %s is %s past its deadline; finishing it",
                         TxnID(self.tcid, txn_id), sm.NAMES[status])
                self._background.spawn(self._finish_app_commit(txn_id) if status == sm.COMMITTING
                                       else self._abort_quietly(txn_id))
                continue
            self._expiring.add(txn_id)
            log.info("transaction %s timed out; aborting", TxnID(self.tcid, txn_id))
            metrics.TIMEOUTS.inc()
            self._background.spawn(self._abort_quietly(txn_id))

    async def _abort_quietly(self, txn_id: int) -> None:
        try:
            await self.end_txn(txn_id, pb.TXN_ABORT, timed_out=True)
        except Exception as exc:  # a racing commit won, or we were fenced
            log.info("timeout abort of %s skipped: %s", TxnID(self.tcid, txn_id), exc)
        finally:
            self._expiring.discard(txn_id)

    async def purge_ended(self) -> None:
        purged = await self.store.purge_ended(self.settings.ended_retention_s)
        if purged:
            log.info("forgot %d ended transactions past their retention", purged)

    async def coordinators(self) -> pb.LookupCoordinatorsResponse:
        live = await self.store.live_coordinators(self.ttl_s)
        return pb.LookupCoordinatorsResponse(
            coordinators=[pb.CoordinatorInfo(coordinator_id=i, url=u) for i, u in live])


@dataclass(frozen=True)
class _OnePhaseEnd:
    """One end queued for a one-phase group (``_one_phase_group``)."""

    txn_id: int
    action: pb.TxnAction
    timed_out: bool
    expired: bool
    plan: Any           # the hosting broker's plan of its participants (LocalParticipants)
    decided: bool       # known COMMITTING: an application's commit, no OPEN compare-and-set


class _TwoPhase(Exception):
    """Roll a one-phase attempt back: the two-phase path ends the transaction."""


def new_instance_id() -> str:
    return uuid.uuid4().hex
