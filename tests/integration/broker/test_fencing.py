"""Epoch fencing in SQL: a former owner can never write after a takeover."""

import asyncio

import asyncpg

from tests.integration.broker.brokers import one_entry, two_brokers


async def test_stale_epoch_writes_nothing(database_url):
    pool, a, b, topic_id = await two_brokers(database_url)
    epoch_a = await a.assign_owner(topic_id, "a", 0)
    assert await a.append_entries(topic_id, epoch_a, *one_entry(0)) == (True, True)
    epoch_b = await b.assign_owner(topic_id, "b", epoch_a)
    assert epoch_b == epoch_a + 1
    # The old owner's write is refused and leaves no trace, dedup state included.
    assert await a.append_entries(topic_id, epoch_a, *one_entry(1, seq=1)) == (False, False)
    assert await pool.fetchval("SELECT count(*) FROM entries") == 1
    assert await b.last_sequence_id(topic_id, "p") == 0
    # A compare-and-set with a stale expected epoch loses.
    assert await a.assign_owner(topic_id, "a", epoch_a) is None
    await pool.close()


async def _wait_for_lock_waiter(pool, timeout=5.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not await pool.fetchval("SELECT count(*) FROM pg_locks WHERE NOT granted"):
        assert asyncio.get_running_loop().time() < deadline, "takeover never waited on the lock"
        await asyncio.sleep(0.01)


async def test_takeover_waits_for_an_in_flight_write(database_url):
    """The CAS blocks on the FOR SHARE lock of a write in progress, then wins; the
    write committed before it is visible to the new owner."""
    pool, a, b, topic_id = await two_brokers(database_url)
    epoch_a = await a.assign_owner(topic_id, "a", 0)
    conn = await asyncpg.connect(database_url)
    tx = conn.transaction()
    await tx.start()
    await conn.execute(
        "SELECT 1 FROM topic_owners WHERE topic_id = $1 AND epoch = $2 FOR SHARE", topic_id, epoch_a)
    await conn.execute(
        "INSERT INTO entries VALUES ($1, 0, 'p', 0, 0, 1, 0, 'x')", topic_id)
    takeover = asyncio.create_task(b.assign_owner(topic_id, "b", epoch_a))
    await _wait_for_lock_waiter(pool)
    assert not takeover.done()  # blocked behind the writer
    await tx.commit()
    assert await asyncio.wait_for(takeover, 5) == epoch_a + 1
    assert await b.next_entry_id(topic_id) == 1

    await conn.close()
    await pool.close()


async def test_restart_releases_former_leases(database_url):
    pool, a, b, topic_id = await two_brokers(database_url)
    epoch = await a.assign_owner(topic_id, "a", 0)
    await a.register("http://a")  # a restarted broker fences its former self
    assert await a.my_epoch(topic_id) is None
    assert await a.append_entries(topic_id, epoch, *one_entry(0)) == (False, False)
    await pool.close()

async def test_exclusive_write_with_stale_topic_epoch_is_refused(database_url):
    pool, a, b, topic_id = await two_brokers(database_url)
    epoch = await a.assign_owner(topic_id, "a", 0)
    assert await a.set_topic_epoch(topic_id, epoch, 1)
    assert await a.set_topic_epoch(topic_id, epoch, 2)
    assert await a.append_entries(topic_id, epoch, *one_entry(0), topic_epoch=1) == (True, False)
    assert await pool.fetchval("SELECT count(*) FROM entries") == 0
    assert await a.append_entries(topic_id, epoch, *one_entry(0), topic_epoch=2) == (True, True)
    await pool.close()
