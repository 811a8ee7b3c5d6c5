"""Two processes claiming one coordinator id can never both act."""

import pytest

from magnetar_coordinator.store import CoordinatorStore, Fenced
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_storage.db import create_pool


async def test_second_claim_waits_for_the_lease_then_fences_the_first(database_url):
    pool = await create_pool(database_url, max_size=4)
    first = CoordinatorStore(pool, 0, "instance-a")
    second = CoordinatorStore(pool, 0, "instance-b")
    assert await first.claim("http://a", ttl_s=5)
    assert not await second.claim("http://b", ttl_s=5)  # the first is alive
    await first.new_txn(await first.allocate_ids(10), 60000, None)
    # The first process stops heartbeating (paused or partitioned): its lease lapses.
    await pool.execute("UPDATE coordinators SET heartbeat_at = now() - interval '1 minute'")
    assert await second.claim("http://b", ttl_s=5)
    assert second.fence_epoch == first.fence_epoch + 1
    with pytest.raises(Fenced):
        await first.new_txn(11, 60000, None)
    with pytest.raises(Fenced):
        await first.transition(0, pb.TXN_OPEN, pb.TXN_COMMITTING)
    assert not await first.heartbeat()
    assert await pool.fetchval("SELECT count(*) FROM transactions") == 1
    await pool.close()


async def test_txn_ids_are_never_reused_across_restarts(database_url):
    pool = await create_pool(database_url, max_size=2)
    one = CoordinatorStore(pool, 3, "x")
    assert await one.claim("http://x", 5)
    first_block = await one.allocate_ids(1000)
    again = CoordinatorStore(pool, 3, "x")  # same instance re-claims at once
    assert await again.claim("http://x", 5)
    assert await again.allocate_ids(1000) == first_block + 1000
    await pool.close()


async def test_registration_only_while_open(database_url):
    pool = await create_pool(database_url, max_size=2)
    store = CoordinatorStore(pool, 1, "x")
    assert await store.claim("http://x", 5)
    await store.new_txn(7, 60000, None)
    assert await store.add_partitions(7, ["persistent://public/default/a"]) == pb.TXN_OPEN
    assert await store.transition(7, pb.TXN_OPEN, pb.TXN_COMMITTING)
    assert not await store.transition(7, pb.TXN_OPEN, pb.TXN_ABORTING)  # CAS lost
    assert await store.add_partitions(7, ["persistent://public/default/b"]) == pb.TXN_COMMITTING
    parts, _ = await store.participants(7)
    assert parts == ["persistent://public/default/a"]
    await pool.close()
