"""A keyed client's connection to its transaction key (seed 000).

The first ``new_transaction()`` connects the key through a registry with epoch -1: the
registry bumps the key's epoch, aborts the previous holder's open transaction, and
answers the new epoch and the coordinator the key is bound to.  Every transaction of
this client is then opened on that coordinator under that epoch, one at a time.  A
newer connection elsewhere fences this one: its ``new_transaction()`` raises
``NotAllowedError`` and its transaction's operations ``ExpiredTransactionError``.
"""

from __future__ import annotations

import asyncio

from magnetar._core import Core
from magnetar._transaction import Transaction, check_timeout
from magnetar._types import TxnID
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import (
    ConnectError,
    ServiceNotReady,
    TransactionCoordinatorNotFoundError,
)
from magnetar_protocol.keys import key_problem


def validate_key(key: str) -> str:
    """The key itself, or ValueError saying what is wrong with it."""
    if problem := key_problem(key):
        raise ValueError(problem)
    return key


class KeyConnection:
    def __init__(self, core: Core, key: str) -> None:
        self.core = core
        self.key = validate_key(key)
        self.epoch = -1  # -1: not connected yet (the seed's first-connection epoch)
        self.coordinator_id: int | None = None
        self._coordinator_url = ""  # the registry's answer for coordinator_id
        self._connect_lock = asyncio.Lock()
        self._registry_url: str | None = None  # looked up once, again when it fails

    async def _registry(self) -> str:
        if self._registry_url:
            return self._registry_url
        reply = await self.core.any_broker(
            "/v1/registry/lookup", pb.LookupRegistryRequest(listener_name=self.core.listener_name),
            pb.LookupRegistryResponse)
        if not reply.urls:
            raise ServiceNotReady("no transaction-key registry is running "
                                  "(start magnetar-registry)")
        self._registry_url = reply.urls[next(self.core._rr) % len(reply.urls)].rstrip("/")
        return self._registry_url

    async def connect(self, epoch: int | None = None) -> int:
        """Connect presenting ``epoch`` (default: the one this client holds; -1 takes the
        key over).  Returns the epoch now held."""
        async with self._connect_lock:
            presented = self.epoch if epoch is None else epoch

            async def attempt() -> pb.ConnectKeyResponse:
                try:
                    return await self.core.call(
                        await self._registry(), "/v1/keys/connect",
                        pb.ConnectKeyRequest(transaction_key=self.key, epoch=presented),
                        pb.ConnectKeyResponse)
                except (ConnectError, ServiceNotReady):
                    self._registry_url = None  # gone or stopping: ask a broker again
                    raise

            reply = await self.core.with_retries(f"connect transaction key {self.key!r}", attempt)
            self.epoch, self.coordinator_id = reply.epoch, reply.coordinator_id
            self._coordinator_url = reply.coordinator_url.rstrip("/")
            return self.epoch

    async def open_transaction(self, timeout_ms: int) -> Transaction:
        # One open transaction per key is the coordinator's rule (NotAllowedError): only
        # it knows whether our last transaction timed out or was aborted meanwhile.
        check_timeout(timeout_ms)
        if self.epoch < 0:
            await self.connect(-1)

        failed = False

        async def attempt() -> Transaction:
            nonlocal failed
            url = (await self.core.coordinators(fresh=failed)).get(self.coordinator_id)
            failed = True  # a retry (if any) looks the coordinators up again
            if url is None:
                # Nobody answers for the key's coordinator (its process is gone and no
                # live one adopted it yet): reconnecting with our epoch re-binds the key
                # to a live coordinator, fencing nobody.
                await self.connect()
                url = self._coordinator_url or None
            if url is None:
                raise TransactionCoordinatorNotFoundError(
                    f"coordinator {self.coordinator_id}, which transaction key {self.key!r} is "
                    "bound to, is not running")
            reply = await self.core.call(url, "/v1/txn/new", pb.NewTxnRequest(
                timeout_ms=timeout_ms, transaction_key=self.key, key_epoch=self.epoch),
                pb.NewTxnResponse)
            return Transaction(self.core, TxnID(reply.txn.most_bits, reply.txn.least_bits), url,
                               timeout_ms)

        return await self.core.with_retries("new transaction", attempt)
