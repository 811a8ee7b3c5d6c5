"""Client transactions: registration of partitions and subscriptions with the
coordinator (done for the user), transactional acks, and commit/abort.

A transaction whose send or ack failed is spoiled: ``commit()`` aborts it and raises
``TransactionHasOperationFailed``, so none of its sends becomes visible.
"""

from __future__ import annotations

import asyncio

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import (
    ExpiredTransactionError,
    InvalidTxnStatusError,
    MagnetarError,
    TransactionCoordinatorNotFoundError,
    TransactionHasOperationFailed,
)

from magnetar._core import Core
from magnetar._types import TransactionState, TxnID

_FINAL = {TransactionState.COMMITTED: "committed", TransactionState.ABORTED: "aborted"}


class Transaction:
    def __init__(self, core: Core, txn_id: TxnID, coordinator_url: str, timeout_ms: int):
        self.core = core
        self.txn_id = txn_id
        self.coordinator_url = coordinator_url
        self.timeout_ms = timeout_ms
        self.state = TransactionState.OPEN
        self._partitions: dict[str, asyncio.Future] = {}
        self._subscriptions: dict[tuple[str, str], asyncio.Future] = {}
        self._inflight: set[asyncio.Future] = set()
        self._failure: Exception | None = None

    def __repr__(self) -> str:
        return f"Transaction({self.txn_id}, {self.state.value})"

    # ---------------------------------------------------------------- operations

    def check_usable(self) -> None:
        if self.state in _FINAL:
            raise InvalidTxnStatusError(f"transaction {self.txn_id} is already {_FINAL[self.state]}")

    def mark_failed(self, error: Exception) -> None:
        if self._failure is None:
            self._failure = error

    def track(self, fut: asyncio.Future) -> None:
        self._inflight.add(fut)
        fut.add_done_callback(self._inflight.discard)

    async def _call(self, path: str, request, response_type):
        return await self.core.with_retries(
            f"transaction {self.txn_id}",
            lambda: self.core.call(self.coordinator_url, path, request, response_type))

    async def _register(self, registry: dict, key, request_factory, path: str, response_type) -> None:
        fut = registry.get(key)
        if fut is None:
            fut = registry[key] = asyncio.get_running_loop().create_future()
            try:
                await self._call(path, request_factory(), response_type)
                fut.set_result(None)
            except Exception as exc:
                del registry[key]
                fut.set_exception(exc)
                fut.exception()  # retrieved: the caller below re-raises it
                self.mark_failed(exc)
        await asyncio.shield(fut)

    async def register_partition(self, topic: str) -> None:
        await self._register(
            self._partitions, topic,
            lambda: pb.AddPartitionToTxnRequest(txn=self.txn_id.to_wire(), topics=[topic]),
            "/v1/txn/add-partitions", pb.AddPartitionToTxnResponse)

    async def ack(self, part, position: pb.Position, cumulative: bool, subscription: str) -> None:
        """Acknowledge in this transaction; waits for the broker (conflicts raise here)."""
        self.check_usable()
        try:
            await self._register(
                self._subscriptions, (part.topic, subscription),
                lambda: pb.AddSubscriptionToTxnRequest(
                    txn=self.txn_id.to_wire(),
                    subscriptions=[pb.TxnSubscription(topic=part.topic, subscription=subscription)]),
                "/v1/txn/add-subscriptions", pb.AddSubscriptionToTxnResponse)
            req = pb.AckRequest(consumer_id=part.consumer_id, positions=[position], txn=self.txn_id.to_wire(),
                                ack_type=pb.ACK_CUMULATIVE if cumulative else pb.ACK_INDIVIDUAL)
            await self.core.with_retries(
                "transactional ack", lambda: self.core.call(part.url, "/v1/consumers/ack",
                                                            _with_consumer(req, part), pb.AckResponse))
        except MagnetarError as exc:
            self.mark_failed(exc)
            raise

    # ---------------------------------------------------------------- ending

    async def _end(self, action: int) -> None:
        reply = await self._call("/v1/txn/end", pb.EndTxnRequest(txn=self.txn_id.to_wire(), action=action),
                                 pb.EndTxnResponse)
        self.state = TransactionState.COMMITTED if reply.status == pb.TXN_COMMITTED else TransactionState.ABORTED

    async def commit(self) -> None:
        if self.state is TransactionState.ABORTED:
            raise InvalidTxnStatusError(f"transaction {self.txn_id} is aborted")
        if self._inflight:  # sends still in flight belong to the transaction
            await asyncio.gather(*list(self._inflight), return_exceptions=True)
        ended = isinstance(self._failure, (InvalidTxnStatusError, ExpiredTransactionError))
        if self._failure is not None and not ended and self.state is TransactionState.OPEN:
            await self.abort()
            raise TransactionHasOperationFailed(
                f"transaction {self.txn_id} was aborted because an operation failed: {self._failure}")
        # A failure because the transaction already ended (timeout, fencing) is answered
        # precisely by the coordinator below rather than as a spoiled transaction.
        self.state = TransactionState.COMMITTING
        try:
            await self._end(pb.TXN_COMMIT)
        except MagnetarError:
            self.state = TransactionState.ERROR
            raise

    async def abort(self) -> None:
        if self.state is TransactionState.COMMITTED:
            raise InvalidTxnStatusError(f"transaction {self.txn_id} is committed")
        self.state = TransactionState.ABORTING
        try:
            await self._end(pb.TXN_ABORT)
        except MagnetarError:
            self.state = TransactionState.ERROR
            raise


def _with_consumer(req: pb.AckRequest, part) -> pb.AckRequest:
    req.consumer_id = part.consumer_id  # current id, even after a reconnect
    return req


async def open_transaction(core: Core, timeout_ms: int) -> Transaction:
    if not isinstance(timeout_ms, int) or timeout_ms <= 0:
        raise ValueError(f"transaction timeout must be a positive number of milliseconds, got {timeout_ms!r}")

    async def attempt() -> Transaction:
        coordinators = await core.coordinators()
        if not coordinators:
            raise TransactionCoordinatorNotFoundError("no transaction coordinator is running")
        ids = sorted(coordinators)
        tcid = ids[next(core._rr) % len(ids)]  # noqa: SLF001 - spread transactions over coordinators
        url = coordinators[tcid]
        reply = await core.call(url, "/v1/txn/new", pb.NewTxnRequest(timeout_ms=timeout_ms), pb.NewTxnResponse)
        return Transaction(core, TxnID(reply.txn.most_bits, reply.txn.least_bits), url, timeout_ms)

    return await core.with_retries("new transaction", attempt)
