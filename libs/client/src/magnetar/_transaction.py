"""Client transactions: transactional sends and acks, and commit/abort.

The client registers nothing with the coordinator: a transaction's first send to a
partition, or first ack on a subscription, registers it there, done by the broker in
the same statement that checks the transaction is OPEN (Kafka's KIP-890 does the same;
docs/transactions.md).

A transaction whose send or ack failed is spoiled: ``commit()`` aborts it and raises
``TransactionHasOperationFailed``, so none of its sends becomes visible.
"""

from __future__ import annotations

import asyncio
import logging
import time

from magnetar._core import Core
from magnetar._types import TransactionState, TxnID
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import (
    ConnectError,
    ExpiredTransactionError,
    InvalidTxnStatusError,
    MagnetarError,
    TransactionCoordinatorNotFoundError,
    TransactionHasOperationFailed,
)

log = logging.getLogger("magnetar.transaction")

_FINAL = {TransactionState.COMMITTED: "committed", TransactionState.ABORTED: "aborted"}


class Transaction:
    """``magnetar.asyncio`` transaction (``await client.new_transaction()``)."""

    def __init__(self, core: Core, txn_id: TxnID, coordinator_url: str, timeout_ms: int,
                 deadline: float | None = None):
        self.core = core
        self.txn_id = txn_id
        self.coordinator_url = coordinator_url
        self.timeout_ms = timeout_ms
        # A pooled transaction's timeout, counted here from new_transaction(): the
        # coordinator's deadline for it is later (_txn_pool.py), so the client gives up.
        self.deadline = deadline
        self.state = TransactionState.OPEN
        self._ops = 0  # sends queued or in flight in this transaction
        self._batchers: set = set()  # partition producers holding its open batches
        self._ops_idle = asyncio.Event()
        self._ops_idle.set()
        self._failure: BaseException | None = None
        # Partition consumers it acknowledged cumulatively on: an abort has them drop
        # their queue and get everything unacknowledged again (abort()).
        self._cumulative: set = set()

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
        the first ack on a subscription registers it with the transaction there)."""
        self.check_usable()
        if cumulative:
            self._cumulative.add(part)  # before the call: its outcome may stay unknown
        try:
            req = pb.AckRequest(positions=[position], txn=self.txn_id.to_wire(),
                                ack_type=pb.ACK_CUMULATIVE if cumulative else pb.ACK_INDIVIDUAL)
            await part.call("/v1/consumers/ack", req, pb.AckResponse, coalesce=True)
        except MagnetarError as exc:
            self.mark_failed(exc)
            raise

    # ---------------------------------------------------------------- ending

    async def _end(self, action: int) -> None:
        reply = await self._call("/v1/txn/end",
                                 pb.EndTxnRequest(txn=self.txn_id.to_wire(), action=action),
                                 pb.EndTxnResponse)
        self.state = (TransactionState.COMMITTED if reply.status == pb.TXN_COMMITTED
                      else TransactionState.ABORTED)

    async def commit(self) -> None:
        """Wait for the transaction's sends, then commit (a spoiled transaction is aborted
        and TransactionHasOperationFailed raised)."""
        if self.state is TransactionState.ABORTED:
            raise InvalidTxnStatusError(f"transaction {self.txn_id} is aborted")
        # Sends still queued or in flight belong to the transaction: send, then wait.
        for batcher in self._batchers:
            if (batch := batcher.txn_batches.get(self)) is not None:
                batcher.seal(batch)
        self._batchers.clear()
        await self._ops_idle.wait()
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
        # A failure because the transaction already ended (timeout, fencing) is answered
        # precisely by the coordinator below rather than as a spoiled transaction.
        self.state = TransactionState.COMMITTING
        try:
            await self._end(pb.TXN_COMMIT)
        except MagnetarError:
            self.state = TransactionState.ERROR
            raise

    async def abort(self) -> None:
        """Abort the transaction.  A consumer it acknowledged cumulatively on gets every
        message after its subscription's durable position again, in order (redelivery
        count + 1), including those it had received after the acknowledged one: as in
        Pulsar, whose client drops the consumer's queue and whose broker rewinds the
        consumer to its mark-delete position.  Here the consumer drops its queue and
        has the broker take back what it holds before the abort (fetching waits until
        the abort is answered); the abort itself gives back the acknowledged range."""
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
