"""The SQL of key fencing against a real PostgreSQL: connect bumps epochs by
compare-and-set, keyed transactions claim the key's one slot, a commit cannot start
once the key's epoch moved (an abort can), deletion keeps a tombstone."""

import asyncio

import pytest

from magnetar_coordinator.store import CoordinatorStore
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import NotAllowedError
from magnetar_registry.store import Binding, RegistryStore
from magnetar_storage.db import create_pool


@pytest.fixture
async def stores(database_url):
    pool = await create_pool(database_url, max_size=6)
    coordinator = CoordinatorStore(pool, 0, "c")
    assert await coordinator.claim("http://c", 5)
    yield coordinator, RegistryStore(pool, "r"), pool
    await pool.close()


async def test_connect_bumps_the_epoch_and_keeps_the_binding(stores):
    _, registry, _ = stores
    assert (await registry.connect_new("alice", "K", 1, [0, 1])).epoch == 0
    again = await registry.connect_new("alice", "K", 7, [0, 1, 7])  # the binding is sticky
    assert (again.epoch, again.coordinator_id) == (1, 1)
    assert (await registry.connect_new("bob", "K", 0, [0])).epoch == 0  # another owner's key
    assert await registry.connect_resume("alice", "K", 1, 0, [0, 1]) is not None
    assert await registry.connect_resume("alice", "K", 0, 0, [0, 1]) is None  # fenced epoch


async def test_a_key_bound_to_a_gone_coordinator_is_rebound_without_touching_its_epoch(stores):
    _, registry, _ = stores
    assert (await registry.connect_new("o", "K", 1, [0, 1])).coordinator_id == 1
    # Coordinator 1's process is gone (only 0 and 2 serve their own TCID): a resume keeps
    # the epoch and moves the binding; a stale epoch still moves nothing.
    assert await registry.connect_resume("o", "K", 5, 2, [0, 2]) is None
    assert await registry.connect_resume("o", "K", 0, 2, [0, 2]) == Binding(0, 2)
    assert await registry.connect_resume("o", "K", 0, None, []) == Binding(0, 2)  # none live
    assert await registry.connect_new("o", "K", 0, [0]) == Binding(1, 0)  # new epoch, re-bound


async def test_concurrent_connects_get_distinct_epochs(stores):
    _, registry, _ = stores
    epochs = await asyncio.gather(*(registry.connect_new("o", "race", 0, [0]) for _ in range(5)))
    assert sorted(b.epoch for b in epochs) == [0, 1, 2, 3, 4]


async def test_keyed_transactions_claim_the_one_slot_under_the_current_epoch(stores):
    coordinator, registry, _ = stores
    await registry.connect_new("o", "K", 0, [0])
    await coordinator.new_keyed_txn(1, 60000, "o", "K", 0)
    with pytest.raises(NotAllowedError, match="already has an open transaction"):
        await coordinator.new_keyed_txn(2, 60000, "o", "K", 0)
    assert await coordinator.start_ending(1, pb.TXN_COMMITTING, False, False) == (True, True)
    await coordinator.new_keyed_txn(3, 60000, "o", "K", 0)  # the slot was freed
    await registry.connect_new("o", "K", 0, [0])  # epoch 1 fences epoch 0
    with pytest.raises(NotAllowedError, match="now at epoch 1"):
        await coordinator.new_keyed_txn(4, 60000, "o", "K", 0)
    with pytest.raises(NotAllowedError, match="not connected"):
        await coordinator.new_keyed_txn(5, 60000, "o", "never", 0)
    # Transaction 3 (epoch 0) may no longer commit, only abort.
    assert await coordinator.start_ending(3, pb.TXN_COMMITTING, False, False) == (False, False)
    assert await coordinator.start_ending(3, pb.TXN_ABORTING, False, True) == (True, True)
    assert (await coordinator.get(3)).expired
    assert await registry.unfinished_older("o", "K", 1) == [(0, 1, pb.TXN_COMMITTING),
                                                           (0, 3, pb.TXN_ABORTING)]


async def test_a_deleted_key_keeps_its_epoch_and_refuses_its_holder(stores):
    coordinator, registry, _ = stores
    await registry.connect_new("o", "D", 0, [0])
    await coordinator.new_keyed_txn(1, 60000, "o", "D", 0)
    assert await registry.delete_key("o", "D") == 1
    assert await registry.delete_key("o", "D") is None  # already deleted
    assert await coordinator.start_ending(1, pb.TXN_COMMITTING, False, False) == (False, False)
    with pytest.raises(NotAllowedError, match="deleted"):
        await coordinator.new_keyed_txn(2, 60000, "o", "D", 1)
    assert (await registry.connect_new("o", "D", 0, [0])).epoch == 2  # never backwards
