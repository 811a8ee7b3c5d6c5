"""A producer's ``max_pending_messages``: one slot per message from queueing until its
callback ran.

Slots are taken on any thread and released in bulk on the client's event loop, with no
lock on the fast path: ``next()`` on an ``itertools.count`` is atomic under the GIL, so
the n-th message ever taken knows its number, and it may go ahead once at least
``n - limit`` slots were released (which also serves waiters in arrival order).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading

from magnetar._errors import AlreadyClosed, ProducerQueueIsFull


class Slots:
    """The pending-message slots of one producer (see the module docstring)."""
    def __init__(self, limit: int, block: bool = True) -> None:
        self.limit = max(1, limit)
        self.block = block
        self._taken = itertools.count(1)
        self.released = 0  # written on the event loop only
        self._cond = threading.Condition()
        self._blocked = 0  # threads waiting in take()
        # A heap by slot number: release() wakes from the front and stops at the first
        # that must still wait (a list scanned whole made 50,000 waiters quadratic).
        self._async_waiters: list[tuple[int, int, asyncio.Future]] = []
        self._ties = itertools.count()
        self.loop: asyncio.AbstractEventLoop | None = None  # the loop release() runs on
        self.loop_thread: int | None = None
        self.closed = False

    # ---------------------------------------------------------------- any thread

    def take(self) -> None:
        """Take a slot for one message; blocks while the producer is full (or raises
        ProducerQueueIsFull when it must not block)."""
        n = next(self._taken)
        if n - self.released <= self.limit:
            return
        if not self.block or threading.get_ident() == self.loop_thread:
            # Blocking the client's own thread (e.g. from a send callback) would
            # deadlock: the slots are released there.
            self._give_back()
            raise ProducerQueueIsFull(f"{self.limit} messages are pending")
        with self._cond:
            self._blocked += 1
            try:
                while n - self.released > self.limit and not self.closed:
                    self._cond.wait()
            finally:
                self._blocked -= 1
        if self.closed:
            raise AlreadyClosed("the producer was closed")

    def _give_back(self) -> None:
        if self.loop is None or threading.get_ident() == self.loop_thread:
            self.release(1)
        else:
            self.loop.call_soon_threadsafe(self.release, 1)

    # ---------------------------------------------------------------- event loop

    async def take_async(self) -> None:
        """``take`` for coroutines on the event loop: waits without blocking the loop."""
        n = next(self._taken)
        if n - self.released <= self.limit:
            return
        if not self.block:
            self.release(1)
            raise ProducerQueueIsFull(f"{self.limit} messages are pending")
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._async_waiters, (n, next(self._ties), fut))
        await fut

    def release(self, count: int) -> None:
        """``count`` messages settled (event loop only)."""
        self.released += count
        if self._blocked:
            with self._cond:
                self._cond.notify_all()
        waiters = self._async_waiters
        while waiters and (waiters[0][0] - self.released <= self.limit or self.closed):
            _, _, fut = heapq.heappop(waiters)
            if not fut.done():
                if self.closed:
                    fut.set_exception(AlreadyClosed("the producer was closed"))
                else:
                    fut.set_result(None)

    def close(self) -> None:
        """Wake every waiter with AlreadyClosed."""
        self.closed = True
        with self._cond:
            self._cond.notify_all()
        self.release(0)
