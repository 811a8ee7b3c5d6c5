"""Backoff and the retry loop: which errors are retried, and the deadline."""

import pytest

import magnetar
from magnetar._retry import Backoff, deadline_after, retry
from magnetar_protocol import errors


class Clock:
    """Virtual time: sleeping advances it, so schedules are checked without waiting."""

    def __init__(self):
        self.now = 100.0
        self.slept = []

    def __call__(self):
        return self.now

    async def sleep(self, seconds):
        self.slept.append(round(seconds, 6))
        self.now += seconds


async def test_delays_double_from_50ms_to_a_1s_cap():
    clock = Clock()
    backoff = Backoff(deadline=float("inf"), clock=clock, sleep=clock.sleep)
    for _ in range(8):
        await backoff.wait("op", errors.ConnectError("x"))
    assert clock.slept == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0]


async def test_the_last_pause_ends_at_the_deadline_then_timeout_chains_the_cause():
    clock = Clock()
    backoff = Backoff(deadline=clock.now + 0.3, clock=clock, sleep=clock.sleep)
    cause = errors.NotOwner("moved")
    await backoff.wait("op", cause)   # 0.05
    await backoff.wait("op", cause)   # 0.1
    await backoff.wait("op", cause)   # 0.15 left of 0.2: sleeps only to the deadline
    assert clock.slept == [0.05, 0.1, 0.15]
    with pytest.raises(magnetar.Timeout) as info:
        await backoff.wait("op", cause)
    assert info.value.__cause__ is cause
    assert "moved" in str(info.value)


async def test_reset_starts_the_schedule_again():
    clock = Clock()
    backoff = Backoff(deadline=float("inf"), clock=clock, sleep=clock.sleep)
    await backoff.wait("op", errors.ConnectError())
    await backoff.wait("op", errors.ConnectError())
    backoff.reset()
    await backoff.wait("op", errors.ConnectError())
    assert clock.slept == [0.05, 0.1, 0.05]


def test_deadline_after_zero_or_none_is_never():
    assert deadline_after(0) == float("inf") and deadline_after(None) == float("inf")
    assert deadline_after(5, clock=lambda: 10.0) == 15.0


@pytest.mark.parametrize("exc", [
    errors.ConnectError(), errors.NotOwner(), errors.ServiceNotReady(), errors.PersistenceError(),
    errors.TooManyRequests(), errors.SessionNotFound(), errors.ProducerNotFound(), errors.ConsumerNotFound(),
])
async def test_transient_errors_are_retried_until_success(exc):
    clock = Clock()
    failures = [exc, exc]
    lost = []

    async def op():
        if failures:
            raise failures.pop()
        return "done"

    result = await retry(op, "op", float("inf"), on_session_lost=lost.append,
                         backoff=Backoff(float("inf"), clock=clock, sleep=clock.sleep))
    assert result == "done" and len(clock.slept) == 2
    assert len(lost) == (2 if isinstance(exc, (errors.SessionNotFound, errors.ProducerNotFound,
                                               errors.ConsumerNotFound)) else 0)


@pytest.mark.parametrize("exc", [
    errors.ProducerBusy(), errors.ProducerFenced(), errors.TopicNotFound(), errors.BadRequest(),
    errors.AuthenticationError(), errors.TransactionConflict(), errors.MessageTooBig(),
])
async def test_other_errors_are_raised_at_once(exc):
    calls = []

    async def op():
        calls.append(1)
        raise exc

    with pytest.raises(type(exc)):
        await retry(op, "op", float("inf"))
    assert len(calls) == 1


async def test_retrying_stops_with_timeout_at_the_deadline():
    clock = Clock()
    calls = []

    async def op():
        calls.append(clock.now)
        raise errors.ConnectError("down")

    with pytest.raises(magnetar.Timeout) as info:
        await retry(op, "op", clock.now + 2.0, backoff=Backoff(clock.now + 2.0, clock=clock, sleep=clock.sleep))
    assert isinstance(info.value.__cause__, errors.ConnectError)
    assert calls[-1] == pytest.approx(102.0)  # one last try right at the deadline
    assert sum(clock.slept) == pytest.approx(2.0)
