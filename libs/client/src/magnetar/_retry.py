"""Which failures are worth another try, and the backoff between tries.

docs/protocol.md: a lapsed session (or a producer/consumer gone with it) is re-opened
and re-created; NotOwner, no answer, 429 and 503 are retried after a new lookup, with
backoff, until the operation's deadline.  Everything else is raised at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from magnetar_protocol.errors import (
    ConnectError,
    ConsumerNotFound,
    NotOwner,
    ProducerNotFound,
    ServiceNotReady,
    SessionNotFound,
    Timeout,
    TooManyRequests,
    TransactionCoordinatorNotFoundError,
)

# The session (a Pulsar connection) lapsed: open a new one, re-create, retry at once.
SESSION_LOST = (SessionNotFound, ProducerNotFound, ConsumerNotFound)
# Look the topic up again and retry after a pause (PersistenceError is a ServiceNotReady).
TRANSIENT = (ConnectError, NotOwner, ServiceNotReady, TooManyRequests,
             TransactionCoordinatorNotFoundError)
RETRYABLE = SESSION_LOST + TRANSIENT

FIRST_DELAY_S = 0.05
MAX_DELAY_S = 1.0

T = TypeVar("T")


def deadline_after(seconds: float | None, clock: Callable[[], float] = time.monotonic) -> float:
    """The monotonic deadline ``seconds`` from now; None or 0 means never."""
    return clock() + seconds if seconds else float("inf")


class Backoff:
    """Exponential pauses (50 ms doubling to 1 s) bounded by a deadline.

    ``clock`` and ``sleep`` are injectable so the schedule is testable without waiting.
    """

    def __init__(self, deadline: float, first: float = FIRST_DELAY_S, cap: float = MAX_DELAY_S,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.deadline = deadline
        self.first = first
        self.cap = cap
        self.attempt = 0
        self._clock = clock
        self._sleep = sleep

    def next_delay(self) -> float:
        return min(self.first * (2 ** self.attempt), self.cap)

    def expired(self) -> bool:
        return self._clock() >= self.deadline

    async def wait(self, what: str, cause: BaseException) -> None:
        """Pause before the next try, or raise Timeout when it would end past the deadline."""
        delay = self.next_delay()
        left = self.deadline - self._clock()
        if left <= 0:
            raise Timeout(f"{what}: gave up at the deadline; last error: {cause}") from cause
        # Never sleep beyond the deadline: one last try right at it beats giving up early.
        await self._sleep(min(delay, left))
        self.attempt += 1

    def reset(self) -> None:
        self.attempt = 0


async def retry(op: Callable[[], Awaitable[T]], what: str, deadline: float,
                on_session_lost: Callable[[BaseException], None] | None = None,
                backoff: Backoff | None = None) -> T:
    """Run ``op()`` until it succeeds, raises a non-retryable error (raised as is), or
    the deadline passes (Timeout, chained to the last error)."""
    backoff = backoff or Backoff(deadline)
    while True:
        try:
            return await op()
        except SESSION_LOST as exc:
            if on_session_lost is not None:
                on_session_lost(exc)
            await backoff.wait(what, exc)
        except TRANSIENT as exc:
            await backoff.wait(what, exc)
