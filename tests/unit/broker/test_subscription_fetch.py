"""Subscription.fetch's seek-count check under its lock: a fetch that a seek or a rewind
overtook while it waited for the lock delivers nothing (its client drops what it brings,
so anything counted delivered would never come again)."""

import asyncio
from types import SimpleNamespace

from magnetar_broker.entry import Entry
from magnetar_broker.rates import Rate
from magnetar_broker.subscription.cursor import Cursor
from magnetar_broker.subscription.subscription import Consumer, Subscription
from magnetar_protocol import magnetar_pb2 as pb


class OneEntryLog(SimpleNamespace):
    async def read(self, start: int, limit: int) -> list[Entry]:
        return [Entry(0, "p", 1, 0, b"x")] if start == 0 else []


def subscription() -> tuple[Subscription, Consumer]:
    log = OneEntryLog(msg_out=0, bytes_out=0, rate_out=Rate(0.0), wake=lambda: None)
    sub = Subscription(log, "s", Cursor(), durable=False)
    consumer = Consumer(1, "c", "session", 0, sub)
    sub.add_consumer(consumer, pb.SUB_EXCLUSIVE)
    return sub, consumer


def test_a_fetch_overtaken_by_a_rewind_while_it_waited_for_the_lock_delivers_nothing():
    async def run():
        sub, consumer = subscription()
        await sub.lock.acquire()  # a rewind (or another fetch) holds the subscription
        waiting = asyncio.ensure_future(sub.fetch(consumer, 10, seeks=0))
        await asyncio.sleep(0)
        consumer.seeks = 1  # the client dropped its queue meanwhile
        sub.lock.release()
        assert await waiting == []
        assert sub.deliveries.pending == {}  # nothing counted as delivered
        assert [e.entry_id for e in await sub.fetch(consumer, 10, seeks=1)] == [0]
    asyncio.run(run())
