"""magnetar_storage.db.connect_when_ready: the bounded wait for PostgreSQL, with a fake
clock (the real thing is tests/integration/storage/test_migrate_command.py)."""

from __future__ import annotations

import asyncio
import logging

import asyncpg
import pytest

from magnetar_storage.db import DatabaseUnavailable, connect_when_ready, retry_delay

URL = "postgresql://u:topsecret@db:5432/x"


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds


def failing(times: int, error: Exception):
    calls = []

    async def connect(url, timeout):
        calls.append(timeout)
        if len(calls) <= times:
            raise error
        return "connection"
    return connect, calls


def test_retry_delay_backs_off_to_five_seconds():
    assert [retry_delay(n) for n in range(1, 7)] == [0.5, 1, 2, 4, 5, 5]


def test_transient_failures_are_retried_with_a_line_each(caplog):
    clock = Clock()
    connect, calls = failing(3, ConnectionRefusedError(111, "Connect call failed"))
    with caplog.at_level(logging.WARNING, logger="magnetar.db"):
        conn = asyncio.run(connect_when_ready(URL, 60, connect=connect, sleep=clock.sleep, clock=clock))
    assert conn == "connection" and len(calls) == 4
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3 and all("waiting for PostgreSQL (attempt" in line for line in lines)
    assert all("postgresql://u:***@db:5432/x" in line and "topsecret" not in line for line in lines)


def test_the_wait_is_bounded():
    clock = Clock()
    connect, calls = failing(10**6, OSError("no route to host"))
    with pytest.raises(DatabaseUnavailable) as info:
        asyncio.run(connect_when_ready(URL, 30, connect=connect, sleep=clock.sleep, clock=clock))
    assert clock.now <= 30
    assert "not reachable after" in str(info.value) and "topsecret" not in str(info.value)
    assert all(timeout == 10 for timeout in calls)  # one attempt never outlasts the wait much


def test_zero_wait_is_one_try():
    clock = Clock()
    connect, calls = failing(1, OSError("refused"))
    with pytest.raises(DatabaseUnavailable):
        asyncio.run(connect_when_ready(URL, 0, connect=connect, sleep=clock.sleep, clock=clock))
    assert len(calls) == 1


def test_a_wrong_password_fails_at_once_and_points_at_reinstalls():
    clock = Clock()
    connect, calls = failing(1, asyncpg.InvalidPasswordError(
        'password authentication failed for user "u"'))
    with pytest.raises(DatabaseUnavailable) as info:
        asyncio.run(connect_when_ready(URL, 60, connect=connect, sleep=clock.sleep, clock=clock))
    assert len(calls) == 1
    assert "Reinstalling over kept data" in str(info.value) and "topsecret" not in str(info.value)
