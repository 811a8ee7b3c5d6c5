"""Group commit: many concurrent callers, one database transaction at a time (or
``max_in_flight`` at a time).

Callers ``await submit(item)``; a drain task takes everything queued so far (up to
``max_items``), passes it to ``commit`` in one call, and hands each caller its result
(an exception instance as a result fails that caller alone).  While the commits in
flight run, the next group accumulates, so throughput grows with load and an idle
system commits each item at once.

``max_in_flight`` > 1 is for statements whose items are independent (checks,
compare-and-sets, inserts of distinct rows): an item then waits for a whole commit to
finish only when that many are already running, which shortens each caller's wait at
moderate load.  Writers whose groups must land in order (a partition's log) keep 1.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class GroupCommit(Generic[T, R]):
    def __init__(self, commit: Callable[[list[T]], Awaitable[list[R]]], max_items: int = 256,
                 max_in_flight: int = 1):
        self._commit = commit
        self._max_items = max_items
        self._max_in_flight = max_in_flight
        self._queue: list[tuple[T, asyncio.Future[R]]] = []
        self._tasks: set[asyncio.Task] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        # Held around each commit of a one-at-a-time writer, so that another writer of the
        # same rows (a one-phase commit writing a partition's marker in its own SQL
        # transaction) can stop this one between groups: ``hold()``.
        self._holding = asyncio.Lock() if max_in_flight == 1 else None

    def submit(self, item: T) -> asyncio.Future[R]:
        fut: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append((item, fut))
        if len(self._tasks) < self._max_in_flight:
            self._idle.clear()
            self._tasks.add(asyncio.create_task(self._drain()))
        return fut

    def hold(self) -> asyncio.Lock:
        """``async with writer.hold():`` no group of this writer is being committed, and
        none starts, until the block ends (one-at-a-time writers only)."""
        if self._holding is None:
            raise RuntimeError("only a writer with max_in_flight=1 can be held")
        return self._holding

    async def _commit_held(self, items: list[T]) -> list[R]:
        if self._holding is None:
            return await self._commit(items)
        async with self._holding:
            return await self._commit(items)

    async def idle(self) -> None:
        """Wait until nothing is queued or being committed."""
        await self._idle.wait()

    async def _drain(self) -> None:
        try:
            while self._queue:
                group = self._queue[: self._max_items]
                del self._queue[: self._max_items]
                try:
                    results = await self._commit_held([item for item, _ in group])
                except BaseException as exc:
                    for _, fut in group:
                        if not fut.done():
                            fut.set_exception(exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                for (_, fut), result in zip(group, results):
                    if fut.done():
                        continue
                    if isinstance(result, BaseException):  # this item alone failed
                        fut.set_exception(result)
                    else:
                        fut.set_result(result)
        finally:
            # At once, not in a done callback: a submit between this drain's last look at
            # the queue and a later callback would otherwise find no drain to take it.
            self._tasks.discard(asyncio.current_task())
            if not self._tasks:
                self._idle.set()

    def fail_pending(self, exc: Exception) -> None:
        """Fail everything still queued (not the group already being committed)."""
        queued, self._queue = self._queue, []
        for _, fut in queued:
            if not fut.done():
                fut.set_exception(exc)
