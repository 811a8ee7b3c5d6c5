"""max_pending_messages: slots taken per message, released in bulk."""

import asyncio
import threading

import pytest

from magnetar._errors import AlreadyClosed, ProducerQueueIsFull
from magnetar._slots import Slots


def test_take_within_the_limit_does_not_block():
    slots = Slots(3)
    for _ in range(3):
        slots.take()


def test_non_blocking_producer_raises_when_full_and_gives_the_slot_back():
    slots = Slots(2, block=False)
    slots.take()
    slots.take()
    with pytest.raises(ProducerQueueIsFull):
        slots.take()
    slots.release(1)  # one message settled: one more fits (the failed take gave its slot back)
    slots.take()
    with pytest.raises(ProducerQueueIsFull):
        slots.take()


def test_a_blocked_thread_goes_on_when_slots_are_released():
    slots = Slots(1)
    slots.take()
    passed = threading.Event()

    def sender():
        slots.take()
        passed.set()

    thread = threading.Thread(target=sender, daemon=True)
    thread.start()
    assert not passed.wait(0.05)  # full: the sender waits
    slots.release(1)
    assert passed.wait(5), "the blocked sender was not woken"
    thread.join(5)


def test_closing_wakes_blocked_threads_with_already_closed():
    slots = Slots(1)
    slots.take()
    outcome = []

    def sender():
        try:
            slots.take()
        except AlreadyClosed as exc:
            outcome.append(exc)

    thread = threading.Thread(target=sender, daemon=True)
    thread.start()
    while not slots._blocked and thread.is_alive():
        thread.join(0.001)
    slots.close()
    thread.join(5)
    assert len(outcome) == 1


def test_taking_on_the_loop_thread_never_blocks():
    slots = Slots(1)
    slots.loop_thread = threading.get_ident()
    slots.take()
    with pytest.raises(ProducerQueueIsFull):
        slots.take()


async def test_take_async_waits_without_blocking_the_loop():
    slots = Slots(1)
    await slots.take_async()
    waiter = asyncio.ensure_future(slots.take_async())
    await asyncio.sleep(0)
    assert not waiter.done()
    slots.release(1)
    await asyncio.wait_for(waiter, 5)


async def test_take_async_waiters_are_served_in_order():
    slots = Slots(1)
    await slots.take_async()
    first = asyncio.ensure_future(slots.take_async())
    second = asyncio.ensure_future(slots.take_async())
    await asyncio.sleep(0)
    slots.release(1)
    await asyncio.wait_for(first, 5)
    await asyncio.sleep(0)
    assert not second.done()
    slots.release(1)
    await asyncio.wait_for(second, 5)
