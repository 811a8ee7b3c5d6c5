"""Client transactions: transactional sends and acks, and commit/abort.

The client registers nothing with the coordinator: a transaction's first send to a
partition, or first ack on a subscription, registers it there, done by the broker in
the same statement that checks the transaction is OPEN (Kafka's KIP-890 does the same;
docs/transactions.md).

A transaction whose send or ack failed is spoiled: ``commit()`` aborts it and raises
``TransactionHasOperationFailed``, so none of its sends becomes visible.

One-request transactions (docs/transactions.md): while a transaction is small (its
sends up to ``one_request_txn_max_bytes``) and every partition and subscription it
touches is served by the broker hosting its coordinator, the client keeps its batches
(``keeping``) and the broker only holds its acks (``AckRequest.hold_ms``), and the
commit carries them all (``/v1/txn/end-one-request``): one request, one SQL
transaction.  Anything else makes it *spill* to the classic path above, at once and
with nothing lost: the kept batches go through their producers' pipelines, the held
acks are written as classic ones.
"""

from __future__ import annotations

import asyncio
import logging
import time

from magnetar._core import Core
from magnetar._retry import SESSION_LOST
from magnetar._types import TransactionState, TxnID
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import (
    BadRequest,
    ConnectError,
    ExpiredTransactionError,
    InvalidTxnStatusError,
    MagnetarError,
    NotFound,
    NotOwner,
    TransactionCoordinatorNotFoundError,
    TransactionHasOperationFailed,
)

log = logging.getLogger("magnetar.transaction")

_FINAL = {TransactionState.COMMITTED: "committed", TransactionState.ABORTED: "aborted"}


class _Spill(Exception):
    """The one-request commit cannot be made here (a participant moved, or the broker does
    not commit in one request): end the transaction the classic way."""


ONE_REQUEST_PATH = "/v1/txn/end-one-request"


class Transaction:
    """``magnetar.asyncio`` transaction (``await client.new_transaction()``)."""

    def __init__(self, core: Core, txn_id: TxnID, coordinator_url: str, timeout_ms: int,
                 deadline: float | None = None, one_request: bool = True):
        self.core = core
        self.txn_id = txn_id
        self.coordinator_url = coordinator_url
        self.timeout_ms = timeout_ms
        # A pooled transaction's timeout, counted here from new_transaction(): the
        # coordinator's deadline for it is later (_txn_pool.py), so the client gives up.
        self.deadline = deadline
        self.started = time.monotonic()
        self.state = TransactionState.OPEN
        self._ops = 0  # sends queued or in flight in this transaction
        self._batchers: set = set()  # partition producers holding its open batches
        self._ops_idle = asyncio.Event()
        self._ops_idle.set()
        self._failure: BaseException | None = None
        # Partition consumers it acknowledged cumulatively on: an abort has them drop
        # their queue and get everything unacknowledged again (abort()).
        self._cumulative: set = set()
        # One-request: the batches kept and the acks the broker holds, until the commit.
        self.keeping = (one_request and core.one_request_max_bytes > 0
                        and coordinator_url not in core.no_one_request)
        self.kept: list = []        # (partition producer, Batch), in the order sealed
        self.kept_bytes = 0         # payload bytes sent into it while keeping
        self.held: list = []        # (partition consumer, Position, cumulative)
        self._spilling: asyncio.Task | None = None

    def __repr__(self) -> str:
        return f"Transaction({self.txn_id}, {self.state.value})"

    # ---------------------------------------------------------------- operations

    def check_usable(self) -> None:
        """Raise InvalidTxnStatusError when the transaction already ended."""
        if self.state in _FINAL:
            raise InvalidTxnStatusError(
                f"transaction {self.txn_id} is already {_FINAL[self.state]}")
        if self._timed_out():
            raise InvalidTxnStatusError(
                f"transaction {self.txn_id} timed out ({self.timeout_ms} ms) and is aborted")

    def _timed_out(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def mark_failed(self, error: BaseException) -> None:
        """Spoil the transaction: commit() will abort it."""
        if self._failure is None:
            self._failure = error

    def ops_started(self, count: int, batcher=None) -> None:
        """Sends queued in this transaction: commit() waits until they settled."""
        self._ops += count
        if batcher is not None:
            self._batchers.add(batcher)
        self._ops_idle.clear()

    def ops_done(self, count: int) -> None:
        """Sends of this transaction settled."""
        self._ops -= count
        if self._ops <= 0:
            self._ops = 0
            self._ops_idle.set()

    async def _call(self, path: str, request, response_type):
        async def attempt():
            try:
                return await self.core.call_coalesced(self.coordinator_url, path, request,
                                                      response_type)
            except (ConnectError, TransactionCoordinatorNotFoundError):
                # The coordinator whose id is the TxnID's most bits may have moved.
                await self._resolve_coordinator()
                raise
        return await self.core.with_retries(f"transaction {self.txn_id}", attempt)

    async def _resolve_coordinator(self) -> None:
        try:
            url = (await self.core.coordinators(fresh=True)).get(self.txn_id.most_bits)
        except MagnetarError:
            return
        if url:
            self.coordinator_url = url

    async def ack(self, part, position: pb.Position, cumulative: bool) -> None:
        """Acknowledge in this transaction; waits for the broker (conflicts raise here;
        the first ack on a subscription registers it with the transaction there, or,
        for a one-request transaction, the broker holds it until the commit)."""
        self.check_usable()
        if cumulative:
            self._cumulative.add(part)  # before the call: its outcome may stay unknown
        if self.keeping and part.url != self.coordinator_url:
            self.spill()  # its subscription is served by another broker
        hold_ms = self._time_left_ms() if self.keeping else 0
        try:
            await self._send_ack(part, position, cumulative, hold_ms)
            if hold_ms and not self.keeping:
                # It spilled while this ack was on its way: write it the classic way too.
                await self._send_ack(part, position, cumulative, 0)
            elif hold_ms:
                self.held.append((part, position, cumulative))
        except MagnetarError as exc:
            self.mark_failed(exc)
            raise

    async def _send_ack(self, part, position: pb.Position, cumulative: bool, hold_ms: int) -> None:
        req = pb.AckRequest(positions=[position], txn=self.txn_id.to_wire(), hold_ms=hold_ms,
                            ack_type=pb.ACK_CUMULATIVE if cumulative else pb.ACK_INDIVIDUAL)
        await part.call("/v1/consumers/ack", req, pb.AckResponse, coalesce=True)

    def _time_left_ms(self) -> int:
        deadline = self.deadline if self.deadline is not None else self.started + self.timeout_ms / 1000
        return max(int((deadline - time.monotonic()) * 1000), 1)

    # ---------------------------------------------------------------- one request

    def before_send(self, part, size: int, sequence_id: int | None) -> None:
        """A message is about to go into this transaction: spill unless it can be kept
        (its partition served by the coordinator's broker, no sequence id of the user's:
        those keep the classic path's dedup, and the kept sends within the limit)."""
        self.kept_bytes += size
        if (part.url != self.coordinator_url or sequence_id is not None
                or self.kept_bytes > self.core.one_request_max_bytes):
            self.spill()

    def keep(self, part, batch) -> None:
        """A sealed batch of this one-request transaction (the producer answered its sends)."""
        self.kept.append((part, batch))

    def spill(self) -> None:
        """Go the classic way from now on, losing nothing: every open batch is sealed and
        kept first, then the kept batches are sent through their producers' pipelines (in
        order, after what was sealed before them) and the held acks written as classic
        acks (a task ``commit()`` waits for; a failure spoils the transaction)."""
        if not self.keeping:
            return
        for part in {p for p, _ in self.kept} | self._batchers:
            if (batch := part.txn_batches.get(self)) is not None:
                part.seal(batch)  # kept, while still keeping
        self.keeping = False
        parts = {p for p, _ in self.kept}
        for part in parts:
            part.seal_all()  # everything open there goes before the kept batches
            part.keepers.discard(self)
        kept, self.kept = self.kept, []
        for part, batch in kept:
            part.send_spilled(batch)
        held, self.held = self.held, []
        if held:
            self._spilling = asyncio.ensure_future(self._write_held(held))

    async def _write_held(self, held: list) -> None:
        for part, position, cumulative in held:
            try:
                await self._send_ack(part, position, cumulative, 0)
            except MagnetarError as exc:
                self.mark_failed(exc)

    def _forget_kept(self) -> None:
        for part in {p for p, _ in self.kept}:
            part.keepers.discard(self)
        self.kept = []
        self.held = []
        self.keeping = False

    async def _end_one_request(self, action: int) -> None:
        """End with the kept batches and held acks in one request; _Spill when it cannot
        be made there (nothing written: the transaction is still OPEN)."""
        if action == pb.TXN_COMMIT:
            # Each producer's batches sealed before these must be answered first: the
            # commit stores the producer's sequence ids (see settled_before).
            for part in {p for p, _ in self.kept}:
                await part.settled_before()

        async def attempt():
            # Built for each attempt: a producer that reconnected has a new id.
            req = pb.EndTxnOneRequestRequest(txn=self.txn_id.to_wire(), action=action)
            if action == pb.TXN_COMMIT:
                for part, batch in self.kept:
                    req.sends.add(topic=part.topic, producer_id=part.producer_id,
                                  session_id=part.session_id, batch=batch.data,
                                  num_messages=len(batch.payloads), sequence_id=batch.lowest,
                                  highest_sequence_id=batch.highest)
            for part, position, cumulative in self.held:
                req.acks.add(topic=part.topic, subscription=part.consumer.options["subscription"],
                             positions=[position], cumulative=cumulative)
            try:
                return await self.core.call_coalesced(self.coordinator_url, ONE_REQUEST_PATH, req,
                                                      pb.EndTxnResponse)
            except NotOwner as exc:
                raise _Spill(str(exc)) from exc
            except SESSION_LOST:
                # The broker restarted (or the session lapsed): our producers there are
                # gone; create them again and ask again (nothing was written).
                for part in {p for p, _ in self.kept}:
                    self.core.drop_session(part.url, part.session_id)
                    await part.connect()
                raise
            except (NotFound, BadRequest) as exc:
                if type(exc) is NotFound or "is not a protobuf route" in str(exc):
                    # A broker without one-request commits (an older version, or
                    # MAGNETAR_ONE_REQUEST_COMMIT=false): classic from now on there.
                    self.core.no_one_request.add(self.coordinator_url)
                    raise _Spill(str(exc)) from exc
                raise
            except (ConnectError, TransactionCoordinatorNotFoundError):
                await self._resolve_coordinator()
                raise

        reply = await self.core.with_retries(f"transaction {self.txn_id}", attempt)
        if action == pb.TXN_COMMIT:
            for part, batch in self.kept:
                part.last_seq = max(part.last_seq, batch.highest)
        self._forget_kept()
        self.state = (TransactionState.COMMITTED if reply.status == pb.TXN_COMMITTED
                      else TransactionState.ABORTED)

    # ---------------------------------------------------------------- ending

    async def _end(self, action: int) -> None:
        reply = await self._call("/v1/txn/end",
                                 pb.EndTxnRequest(txn=self.txn_id.to_wire(), action=action),
                                 pb.EndTxnResponse)
        self.state = (TransactionState.COMMITTED if reply.status == pb.TXN_COMMITTED
                      else TransactionState.ABORTED)

    async def commit(self) -> None:
        """Wait for the transaction's sends, then commit (a spoiled transaction is aborted
        and TransactionHasOperationFailed raised).  A one-request transaction commits with
        its kept sends and held acks in one request; if that cannot be made there, it
        spills and commits the classic way."""
        self._seal_open()
        await self._classic_ready()
        await self._check_committable()
        try:
            if self.keeping and (self.kept or self.held):  # (an empty one: the classic end)
                self.state = TransactionState.COMMITTING
                try:
                    await self._end_one_request(pb.TXN_COMMIT)
                    return
                except _Spill:
                    self.state = TransactionState.OPEN
                    self.spill()
                    await self._classic_ready()
                    await self._check_committable()
            # A failure because the transaction already ended (timeout, fencing) is answered
            # precisely by the coordinator here rather than as a spoiled transaction.
            self.state = TransactionState.COMMITTING
            await self._end(pb.TXN_COMMIT)
        except TransactionHasOperationFailed:
            self._forget_kept()
            self.state = TransactionState.ABORTED
            raise
        except MagnetarError:
            self._forget_kept()
            self.state = TransactionState.ERROR
            raise

    async def settle(self) -> None:
        """Commit's first half, for a commit decided elsewhere (an application's SQL
        transaction: magnetar.pg, docs/exactly-once-postgres.md): the classic path's
        sends and acks all written (a one-request transaction spills first: its decision
        is not this client's request), a timed-out or spoiled transaction aborted and
        raised."""
        self._seal_open()
        self.spill()
        await self._classic_ready()
        await self._check_committable()

    def _seal_open(self) -> None:
        """Sends still queued or in flight belong to the transaction: send (or keep) them
        (the caller then waits); an aborted transaction cannot commit."""
        if self.state is TransactionState.ABORTED:
            raise InvalidTxnStatusError(f"transaction {self.txn_id} is aborted")
        for batcher in self._batchers:
            if (batch := batcher.txn_batches.get(self)) is not None:
                batcher.seal(batch)
        self._batchers.clear()

    async def finish_commit(self) -> None:
        """Have the coordinator finish a transaction whose commit was decided elsewhere
        (after settle()); returns once COMMITTED."""
        self.state = TransactionState.COMMITTING
        await self._end(pb.TXN_COMMIT)

    async def _check_committable(self) -> None:
        """Abort (and raise) a transaction past its timeout, or spoiled by a failed send or
        ack; one whose operation failed because it had ended is left to the coordinator."""
        if self._timed_out() and self.state is TransactionState.OPEN:
            await self.abort()  # as the coordinator would have, had it counted from here
            raise InvalidTxnStatusError(
                f"transaction {self.txn_id} timed out ({self.timeout_ms} ms) and was aborted")
        ended = isinstance(self._failure, (InvalidTxnStatusError, ExpiredTransactionError))
        if self._failure is not None and not ended and self.state is TransactionState.OPEN:
            await self.abort()
            raise TransactionHasOperationFailed(
                f"transaction {self.txn_id} was aborted because an operation failed: "
                f"{self._failure}")

    async def _classic_ready(self) -> None:
        """After a spill: wait until the kept batches and held acks are written."""
        if self._spilling is not None:
            await self._spilling
        await self._ops_idle.wait()

    async def abort(self) -> None:
        """Abort the transaction.  A consumer it acknowledged cumulatively on gets every
        message after its subscription's durable position again, in order (redelivery
        count + 1), including those it had received after the acknowledged one: as in
        Pulsar, whose client drops the consumer's queue and whose broker rewinds the
        consumer to its mark-delete position.  Here the consumer drops its queue and
        has the broker take back what it holds before the abort (fetching waits until
        the abort is answered); the abort itself gives back the acknowledged range.  A
        one-request transaction's kept batches are dropped, its held acks released."""
        if self.state is TransactionState.COMMITTED:
            raise InvalidTxnStatusError(f"transaction {self.txn_id} is committed")
        self.state = TransactionState.ABORTING
        rewinding = [part for part in self._cumulative if not part.consumer.closed]
        self._cumulative = set()
        for part in rewinding:
            part.drop_queued()
        try:
            for part in rewinding:
                try:
                    await part.redeliver_all()
                except MagnetarError as exc:  # the broker's rewind at the abort still comes
                    log.info("rewinding %s before aborting %s: %s", part.topic, self.txn_id, exc)
            if self.keeping and self.held:
                try:
                    await self._end_one_request(pb.TXN_ABORT)
                    return
                except _Spill:
                    self.spill()
                    await self._classic_ready()
            self._forget_kept()
            await self._end(pb.TXN_ABORT)
        except MagnetarError:
            self.state = TransactionState.ERROR
            raise
        finally:
            for part in rewinding:
                part.resume()


def check_timeout(timeout_ms: int) -> None:
    if not isinstance(timeout_ms, int) or timeout_ms <= 0:
        raise ValueError(f"transaction timeout must be a positive number of milliseconds, "
                         f"got {timeout_ms!r}")


async def open_transaction(core: Core, timeout_ms: int) -> Transaction:
    """Open a transaction on one of the coordinators (round robin), or take one from the
    client's pool (a busy client's: _txn_pool.py)."""
    check_timeout(timeout_ms)
    if (pooled := core.txn_pool.take(timeout_ms)) is not None:
        txn_id, url = pooled
        return Transaction(core, txn_id, url, timeout_ms, time.monotonic() + timeout_ms / 1000)

    failed = False

    async def attempt() -> Transaction:
        nonlocal failed
        urls = await core.coordinator_urls(fresh=failed)
        if not urls:
            raise TransactionCoordinatorNotFoundError("no transaction coordinator is running")
        url = urls[next(core._rr) % len(urls)]  # spread transactions over the coordinators
        try:
            reply = await core.call_coalesced(url, "/v1/txn/new",
                                              pb.NewTxnRequest(timeout_ms=timeout_ms), pb.NewTxnResponse)
        except MagnetarError:
            failed = True  # the next attempt looks the coordinators up again
            raise
        return Transaction(core, TxnID(reply.txn.most_bits, reply.txn.least_bits), url, timeout_ms)

    return await core.with_retries("new transaction", attempt)
