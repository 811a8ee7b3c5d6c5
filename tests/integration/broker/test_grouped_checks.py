"""The broker store's grouped transaction checks: the first-send and first-ack checks of
transactions that arrive together share one statement, and each gets its own answer."""

import asyncio

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_storage.db import create_pool
from magnetar_broker.store import BrokerStore
from magnetar_coordinator.store import CoordinatorStore

from tests.integration.counting import CountingPool

TOPIC = "persistent://public/default/g"


async def test_concurrent_checks_share_a_statement_and_keep_their_own_answers(database_url):
    pool = await create_pool(database_url, max_size=4)
    coordinator = CoordinatorStore(pool, 0, "c")
    assert await coordinator.claim("http://c", 5)
    counting = CountingPool(pool)
    broker = BrokerStore(counting, "b")
    await broker.register("http://b")
    topic_id = await broker.create_topic(TOPIC, "public", "default", -1)
    for txn_id in range(6):
        await coordinator.new_txn(txn_id, 60000, None)
    for txn_id in (0, 2, 4):  # the even ones are registered here
        await coordinator.add_participants(txn_id, [TOPIC], [TOPIC], ["sub"])
    await coordinator.transition(4, pb.TXN_OPEN, pb.TXN_ABORTING)

    counting.statements = 0
    sends = await asyncio.gather(*(broker.txn_send_check(topic_id, (0, i), TOPIC) for i in range(7)))
    acks = await asyncio.gather(*(broker.txn_ack_check(topic_id, TOPIC, "sub", (0, i))
                                  for i in range(7)))
    assert counting.statements <= 4  # 14 checks, a statement or two for each kind
    assert [s[5] for s in sends] == [True, False, True, False, True, False, False]  # registered
    assert [s[3] for s in sends] == [pb.TXN_OPEN] * 4 + [pb.TXN_ABORTING, pb.TXN_OPEN, None]
    assert [a[3] for a in acks] == [s[5] for s in sends]
    assert [a[1] for a in acks] == [s[3] for s in sends]
    await pool.close()
