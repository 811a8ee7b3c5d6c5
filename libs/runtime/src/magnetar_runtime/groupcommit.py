"""Group commit: many concurrent callers, one database transaction at a time.

Callers ``await submit(item)``; a single drain task takes everything queued so far (up
to ``max_items``), passes it to ``commit`` in one call, and hands each caller its result (an exception
instance as a result fails that caller alone).
While one commit is in flight the next group accumulates, so throughput grows with load
and an idle system commits each item at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class GroupCommit(Generic[T, R]):
    def __init__(self, commit: Callable[[list[T]], Awaitable[list[R]]], max_items: int = 256):
        self._commit = commit
        self._max_items = max_items
        self._queue: list[tuple[T, asyncio.Future]] = []
        self._task: asyncio.Task | None = None
        self._idle = asyncio.Event()
        self._idle.set()

    def submit(self, item: T) -> asyncio.Future:
        fut = asyncio.get_running_loop().create_future()
        self._queue.append((item, fut))
        if self._task is None:
            self._idle.clear()
            self._task = asyncio.create_task(self._drain())
        return fut

    async def idle(self) -> None:
        """Wait until nothing is queued or being committed."""
        await self._idle.wait()

    async def _drain(self) -> None:
        try:
            while self._queue:
                group = self._queue[: self._max_items]
                del self._queue[: self._max_items]
                try:
                    results = await self._commit([item for item, _ in group])
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
            self._task = None
            self._idle.set()

    def fail_pending(self, exc: Exception) -> None:
        """Fail everything still queued (not the group already being committed)."""
        queued, self._queue = self._queue, []
        for _, fut in queued:
            if not fut.done():
                fut.set_exception(exc)
