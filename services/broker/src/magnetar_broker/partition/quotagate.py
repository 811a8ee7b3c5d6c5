"""The backlog quota at a partition's door (docs/operations.md): the verdict the storage
lifecycle measured, the send path's estimate (partition/quota.py, pure), the exact check
it runs when the estimate passes the limit (one at a time), and the re-check after acks
that lets held sends go."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from magnetar_broker.partition.quota import BacklogEstimate, check_before_send
from magnetar_protocol.errors import ProducerBlockedQuotaExceeded
from magnetar_protocol.policies import EXCEPTION, HOLD

log = logging.getLogger("magnetar.broker.topic")

LongPoll = Callable[[float, Callable[[], Awaitable[bool | None]]], Awaitable[bool | None]]


class QuotaGate:
    def __init__(self, topic: str, wake: Callable[[], None], long_poll: LongPoll,
                 closed: Callable[[], bool]) -> None:
        self.topic = topic
        self._wake = wake
        self._long_poll = long_poll
        self._closed = closed
        # The lifecycle's verdict: None, or the policy (HOLD / EXCEPTION) that refuses
        # sends while the backlog is over the limit.
        self.blocked: str | None = None
        self.reason = ""
        self.hold_s = 30.0
        # An estimate kept on append, and the exact check (the lifecycle installs it) run
        # when the estimate passes the limit or an ack may have brought a blocked
        # backlog back.
        self.backlog = BacklogEstimate()
        self._check: Callable[[], Coroutine[Any, Any, None]] | None = None
        self.recheck_ms = 100
        self.appended_bytes = 0  # every byte appended, so a check can add what came in meanwhile
        self._checking: asyncio.Task[None] | None = None
        self._ack_pending = False
        self._tasks: set[asyncio.Task[None]] = set()

    def install(self, check: Callable[[], Coroutine[Any, Any, None]], recheck_ms: int, hold_s: float) -> None:
        """The lifecycle's exact check and its settings (each pass renews them)."""
        self._check, self.recheck_ms, self.hold_s = check, recheck_ms, hold_s

    async def before_send(self) -> None:
        """Run the exact check when the estimate says so; refuse (or hold) while blocked."""
        if self._check is not None:
            now = int(time.time() * 1000)
            if check_before_send(self.backlog, self.blocked, now, self.recheck_ms):
                self.backlog.checked_ms = now
                await self._run_check()
        if self.blocked is not None:
            await self._gate()

    async def _gate(self) -> None:
        """producer_exception refuses at once; producer_request_hold waits (up to
        ``hold_s``) for the lifecycle loop to see the backlog shrink."""
        if self.blocked == HOLD:
            await self._long_poll(self.hold_s, self._clear)
        if self.blocked in (HOLD, EXCEPTION):
            raise ProducerBlockedQuotaExceeded(
                f"{self.topic}: backlog quota exceeded ({self.reason}); policy {self.blocked}. "
                "Consume or expire the backlog (magnetar-admin topics expire-messages / clear-backlog) "
                "or raise the quota (magnetar-admin namespaces set-backlog-quota)")

    async def _clear(self) -> bool | None:
        return True if self.blocked != HOLD else None

    async def _run_check(self) -> None:
        """The exact quota check, one at a time: sends arriving meanwhile share it."""
        task = self._checking
        if (task is None or task.done()) and self._check is not None:
            task = self._checking = asyncio.get_running_loop().create_task(self._check())
        if task is None:
            return
        try:
            await asyncio.shield(task)
        except Exception as exc:  # the pass retries; a send is not failed for a check that failed
            log.warning("%s: backlog quota check failed: %s", self.topic, exc)

    def acked(self) -> None:
        """A subscription acknowledged: a blocked partition checks again shortly (one check
        for a burst of acks), so held sends go as soon as the backlog is under the limit."""
        if self.blocked is None or self._check is None or self._ack_pending:
            return
        self._ack_pending = True
        task = asyncio.get_running_loop().create_task(self._after_ack())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _after_ack(self) -> None:
        await asyncio.sleep(self.recheck_ms / 1000)
        self._ack_pending = False  # acks during the check ask for one more
        if not self._closed():
            await self._run_check()

    def appended(self, nbytes: int) -> None:
        self.appended_bytes += nbytes
        self.backlog.appended(nbytes, int(time.time() * 1000))

    def set(self, blocked: str | None, reason: str = "") -> None:
        was, self.blocked, self.reason = self.blocked, blocked, reason
        if was != blocked:
            log.info("%s: backlog quota %s", self.topic,
                     f"exceeded ({reason}), policy {blocked}" if blocked else "back within limits")
            self._wake()  # held sends look again
