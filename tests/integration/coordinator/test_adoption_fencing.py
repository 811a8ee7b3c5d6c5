"""Adopting a gone coordinator's TCID is the same compare-and-set on its row as a
restart: only while nobody heartbeats it, one adopter at a time, and the TCID's own
process takes it back at once, after which every write of the adopter is refused."""

import asyncio

import pytest

from magnetar_coordinator.store import CoordinatorStore, Fenced
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_storage.db import create_pool

TTL_S = 5


async def lapse(pool, tcid: int) -> None:
    """The TCID's process stops heartbeating (killed): its lease is older than the TTL."""
    await pool.execute("UPDATE coordinators SET heartbeat_at = now() - interval '1 minute' "
                       "WHERE coordinator_id = $1", tcid)


@pytest.fixture
async def pool(database_url):
    pool = await create_pool(database_url, max_size=8)
    yield pool
    await pool.close()


async def test_adoption_waits_for_the_lease_and_only_one_adopter_wins(pool):
    owner = CoordinatorStore(pool, 1, "owner-1")
    assert await owner.claim("http://c1", TTL_S)
    await owner.new_txn(5, 60000, None)
    adopter = CoordinatorStore(pool, 1, "process-0")
    assert not await adopter.adopt("http://c0", TTL_S, 0)  # the owner is alive
    await lapse(pool, 1)
    rivals = [CoordinatorStore(pool, 1, f"process-{i}") for i in (0, 2, 3)]
    won = await asyncio.gather(*(r.adopt(f"http://c{i}", TTL_S, i)
                                 for r, i in zip(rivals, (0, 2, 3))))
    assert sorted(won) == [False, False, True]
    [winner] = [r for r, w in zip(rivals, won) if w]
    assert winner.fence_epoch == owner.fence_epoch + 1
    row = await pool.fetchrow("SELECT url, adopted_by FROM coordinators WHERE coordinator_id = 1")
    assert row["url"] == f"http://c{row['adopted_by']}"  # lookups now answer the adopter
    # The adopter acts for TCID 1 with its epoch; the dead owner's writes are refused.
    assert await winner.start_ending(5, pb.TXN_ABORTING, True, False) == (True, True)
    with pytest.raises(Fenced):
        await owner.transition(5, pb.TXN_ABORTING, pb.TXN_ABORTED)


async def test_the_owner_claims_back_at_once_and_the_adopter_writes_nothing_after(pool):
    first = CoordinatorStore(pool, 1, "owner-1")
    assert await first.claim("http://c1", TTL_S)
    for txn_id in (1, 2, 3):
        await first.new_txn(txn_id, 60000, None)
    await first.add_partitions(1, ["persistent://public/default/a"])
    assert await first.start_ending(1, pb.TXN_COMMITTING, False, False) == (True, True)
    await pool.execute("UPDATE transactions SET status = 2, ended_at = now() - interval '2 days' "
                       "WHERE txn_id = 3")
    await lapse(pool, 1)
    adopter = CoordinatorStore(pool, 1, "process-0")
    assert await adopter.adopt("http://c0", TTL_S, 0)
    assert await adopter.heartbeat()

    # The TCID's own process restarts: it claims the row at once, though the adopter's
    # heartbeat is fresh (a restart of a non-adopted TCID would wait for the lease).
    back = CoordinatorStore(pool, 1, "owner-1-restarted")
    assert await back.claim("http://c1", TTL_S)
    assert back.fence_epoch == adopter.fence_epoch + 1
    assert await pool.fetchval("SELECT adopted_by FROM coordinators WHERE coordinator_id = 1") is None

    # Every durable write of the adopter for TCID 1 now finds the epoch moved.
    assert not await adopter.heartbeat()
    with pytest.raises(Fenced):
        await adopter.transition(1, pb.TXN_COMMITTING, pb.TXN_COMMITTED)
    with pytest.raises(Fenced):
        await adopter.start_ending(2, pb.TXN_ABORTING, True, False)
    with pytest.raises(Fenced):
        await adopter.add_partitions(2, ["persistent://public/default/b"])
    with pytest.raises(Fenced):
        await adopter.new_txn(9, 60000, None)
    with pytest.raises(Fenced):
        await adopter.allocate_ids(10)
    assert await adopter.purge_ended(3600) == 0
    await adopter.release()  # a late release of the adopter must not lapse the owner's lease
    assert await back.heartbeat()
    statuses = dict(await pool.fetch("SELECT txn_id, status FROM transactions ORDER BY txn_id"))
    assert statuses == {1: pb.TXN_COMMITTING, 2: pb.TXN_OPEN, 3: pb.TXN_COMMITTED}
    assert await back.purge_ended(3600) == 1  # the owner's purge still works
    # And the owner's own re-claim is unaffected: an adopter cannot take a live TCID.
    assert not await CoordinatorStore(pool, 1, "process-2").adopt("http://c2", TTL_S, 2)


async def test_orphans_lists_the_gone_tcids_and_the_live_owners(pool):
    for tcid in (0, 1, 2):
        assert await CoordinatorStore(pool, tcid, f"p{tcid}").claim(f"http://c{tcid}", TTL_S)
    await lapse(pool, 1)
    await pool.execute("UPDATE coordinators SET heartbeat_at = now() - interval '1 day' "
                       "WHERE coordinator_id = 2")  # released on SIGTERM
    store = CoordinatorStore(pool, 0, "p0")
    gone, live = await store.orphans(TTL_S)
    assert [t for t, _ in gone] == [1, 2] and 55 < gone[0][1] < 120
    assert live == [0]
    assert await CoordinatorStore(pool, 1, "p0").adopt("http://c0", TTL_S, 0)
    gone, live = await store.orphans(TTL_S)
    assert [t for t, _ in gone] == [2] and live == [0]  # an adopted TCID is no owner
