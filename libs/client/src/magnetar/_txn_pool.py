"""A busy client's pool of open transactions: NewTxn for many (docs/transactions.md).

An idle client's ``new_transaction()`` asks a coordinator for one transaction and
waits, as Pulsar's does.  When calls come faster than one per ``HOLD_S``, the client
also asks for blocks of transactions in the background (one NewTxn with ``count``,
sized to the rate) and hands those out without a round trip.

A pooled transaction's deadline at the coordinator is ``HOLD_S`` later than its
timeout alone would put it, and one not handed out within ``HOLD_S`` of its request is
aborted.  The client counts a pooled transaction's timeout from ``new_transaction()``
itself (``Transaction.deadline``), so it always gives up before the coordinator would.

A coordinator from before NewTxn for many ignores ``count`` and ``hold_ms``: its one
transaction, whose deadline lacks the hold, is aborted, and no block is asked of it again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

from magnetar._types import TxnID
from magnetar_protocol import magnetar_pb2 as pb

log = logging.getLogger("magnetar.client")

HOLD_S = 1.0
MAX_BLOCK = 64
RELEASE_ON_CLOSE_S = 2.0


class TxnPool:
    def __init__(self, core) -> None:
        self.core = core
        self.timeout_ms: int | None = None  # the timeout of the pooled transactions
        self.ready: deque[tuple[TxnID, str, float]] = deque()  # (id, coordinator, asked at)
        self._calls: deque[float] = deque()  # new_transaction() times, the last HOLD_S
        self._leasing: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self._no_blocks: set[str] = set()  # coordinators that ignore count (older versions)
        self.leased = 0  # for tests and stats: transactions that came in blocks

    def take(self, timeout_ms: int) -> tuple[TxnID, str] | None:
        """A pooled transaction (id, coordinator URL) with this timeout, or None: then
        the caller opens one itself.  Either way, note the call for the pool's size."""
        now = time.monotonic()
        self._calls.append(now)
        while self._calls[0] < now - HOLD_S:
            self._calls.popleft()
        if timeout_ms != self.timeout_ms:
            self._release(self.ready)
            self.ready.clear()
            self.timeout_ms = timeout_ms
        stale = []
        while self.ready and self.ready[0][2] < now - HOLD_S:
            stale.append(self.ready.popleft())
        self._release(stale)
        taken = self.ready.popleft()[:2] if self.ready else None
        self._refill(timeout_ms)
        return taken

    def _refill(self, timeout_ms: int) -> None:
        # Sized to about a quarter of a hold's worth of calls: used well within HOLD_S,
        # and little is left to abort when the calls stop.
        block = min(MAX_BLOCK, len(self._calls) // 4)
        if block < 2 or self._leasing is not None or len(self.ready) > block // 2 or self.core.closed:
            return
        self._leasing = asyncio.ensure_future(self._lease(block, timeout_ms))

    async def _lease(self, count: int, timeout_ms: int) -> None:
        try:
            urls = await self.core.coordinator_urls()
            url = urls[next(self.core._rr) % len(urls)]
            if url in self._no_blocks:
                return
            asked = time.monotonic()
            reply = await self.core.call_coalesced(
                url, "/v1/txn/new", pb.NewTxnRequest(timeout_ms=timeout_ms, count=count,
                                                     hold_ms=int(HOLD_S * 1000)),
                pb.NewTxnResponse)
        except Exception as exc:  # only an optimisation: new_transaction() opens its own
            log.debug("leasing %d transactions failed: %s", count, exc)
            return
        finally:
            self._leasing = None
        block = [(TxnID(reply.txn.most_bits, least), url, asked)
                 for least in (reply.txn.least_bits, *reply.more_least_bits)]
        if len(block) < count:  # count >= 2 here: this coordinator ignored it (and the hold)
            log.info("coordinator %s does not lease blocks of transactions (an older "
                     "version); opening each one there on its own", url)
            self._no_blocks.add(url)
            self._release(block)
            return
        if timeout_ms != self.timeout_ms or self.core.closed:
            self._release(block)
            return
        self.leased += len(block)
        self.ready.extend(block)

    def _release(self, entries) -> None:
        """Abort pooled transactions nobody took (in the background)."""
        for txn_id, url, _ in entries:
            task = asyncio.ensure_future(self._abort(txn_id, url))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _abort(self, txn_id: TxnID, url: str) -> None:
        try:
            await self.core.call_coalesced(url, "/v1/txn/end", pb.EndTxnRequest(
                txn=txn_id.to_wire(), action=pb.TXN_ABORT), pb.EndTxnResponse)
        except Exception as exc:  # it times out at the coordinator instead
            log.debug("aborting unused pooled transaction %s failed: %s", txn_id, exc)

    async def close(self) -> None:
        """Abort what is still pooled (bounded: the coordinator's timeout is the backstop)."""
        if self._leasing is not None:
            self._leasing.cancel()
        self._release(self.ready)
        self.ready.clear()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=RELEASE_ON_CLOSE_S)
