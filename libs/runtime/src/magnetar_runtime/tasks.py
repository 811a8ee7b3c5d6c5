"""One-off background tasks, held until they finish: the event loop keeps only a weak
reference to a task, so one nobody holds can be garbage-collected mid-flight (ruff's
RUF006 refuses a dropped ``create_task`` result).  A failure is logged, as nobody awaits
these tasks.  Periodic work is a ``loops.BackgroundLoop`` instead."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterator


class TaskSet:
    """The background tasks of one owner (a connection, a coordinator): ``spawn`` starts
    one and holds it until done; iterate to cancel or wait for those still running."""

    def __init__(self, owner: str, log: logging.Logger) -> None:
        self.owner = owner
        self._log = log
        self._tasks: set[asyncio.Task] = set()

    def spawn(self, coro: Coroutine) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            self._log.error("%s: background task %s failed: %r", self.owner, task.get_name(), exc, exc_info=exc)

    def __iter__(self) -> Iterator[asyncio.Task]:
        return iter(list(self._tasks))

    def __len__(self) -> int:
        return len(self._tasks)
