"""One pattern for every background loop (after River's): ``start``, ``stop`` and
``run_once``.  Tests call ``run_once`` directly instead of waiting for a tick."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger("magnetar.loops")


class BackgroundLoop:
    """Runs ``run_once`` every ``interval`` seconds until stopped.

    An exception in one iteration is logged and the loop goes on: a background duty
    (heartbeats, expiry) must survive a passing database error.
    """

    def __init__(self, name: str, interval: float, run_once: Callable[[], Awaitable[None]]):
        self.name = name
        self.interval = interval
        self._run_once = run_once
        self._task: asyncio.Task | None = None
        self._wake = asyncio.Event()

    async def run_once(self) -> None:
        await self._run_once()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self.name)

    def poke(self) -> None:
        """Run the next iteration now instead of at the next tick."""
        self._wake.set()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def _run(self) -> None:
        while True:
            try:
                await self._run_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("background loop %s failed; retrying next tick", self.name)
            try:
                await asyncio.wait_for(self._wake.wait(), self.interval)
            except TimeoutError:
                pass
            self._wake.clear()
