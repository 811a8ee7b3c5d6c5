"""The one wait-with-deadline helper of the test suite (no sleep-and-hope): poll a
condition until it holds, fail naming what did not happen.  A sync form for tests that
drive real processes and an async twin for tests inside an event loop."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def _failure(what: str, timeout: float, explain: Callable[[], str] | None) -> AssertionError:
    detail = f"\n{explain()}" if explain else ""
    return AssertionError(f"{what}: not within {timeout:g} s{detail}")


def wait_until(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.05,
               explain: Callable[[], str] | None = None) -> T:
    """Poll ``predicate`` until it returns something truthy (returned); after ``timeout``
    seconds fail naming ``what``, with ``explain()`` (e.g. a log tail) if given."""
    deadline = time.monotonic() + timeout
    while True:
        if result := predicate():
            return result
        if time.monotonic() > deadline:
            raise _failure(what, timeout, explain)
        time.sleep(interval)


async def async_wait_until(predicate: Callable[[], T], timeout: float, what: str,
                           interval: float = 0.002, explain: Callable[[], str] | None = None) -> T:
    """:func:`wait_until` inside an event loop: the loop keeps running between polls."""
    deadline = time.monotonic() + timeout
    while True:
        if result := predicate():
            return result
        if time.monotonic() > deadline:
            raise _failure(what, timeout, explain)
        await asyncio.sleep(interval)
