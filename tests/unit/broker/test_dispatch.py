import random

from magnetar_broker.subscription.dispatch import (
    WHOLE,
    Deliveries,
    HashRing,
    dispatch_key,
    failover_active,
    key_hash,
    mask_indices,
)


def test_delivery_and_individual_ack():
    d = Deliveries()
    d.delivered(1, 0, 0b111)
    assert d.unacked[1] == 3 and d.holder(0, 2) == 1
    d.acked(0, 1)
    assert d.pending[0] == {1: 0b101} and d.unacked[1] == 2
    d.acked(0, WHOLE)
    assert d.pending == {} and d.unacked[1] == 0


def test_nack_counts_and_redelivers_only_chosen_messages():
    d = Deliveries()
    d.delivered(1, 7, 0b11)
    assert d.release(1, [(7, 1)]) == 1
    assert d.redeliver == {7: 0b10}
    assert d.counts_for(7, [0, 1]) == [0, 1]
    d.delivered(2, 7, 0b10)
    assert d.redeliver == {} and d.holder(7, 1) == 2


def test_consumer_loss_redelivers_everything_it_held():
    d = Deliveries()
    d.delivered(1, 0, 0b1)
    d.delivered(1, 1, 0b11)
    d.delivered(2, 2, 0b1)
    assert d.forget_consumer(1) == 3
    assert d.redeliver == {0: 1, 1: 3}
    assert d.pending == {2: {2: 1}}


def test_cumulative_ack_drops_everything_before():
    d = Deliveries()
    for e in range(3):
        d.delivered(1, e, 0b11)
    d.release(1, [(0, WHOLE)])
    d.acked_cumulative(2, 0)
    assert d.redeliver == {} and d.pending == {2: {1: 0b10}} and d.unacked[1] == 1


def test_failover_active_is_pulsars_rule():
    consumers = [(0, "b", 11), (0, "a", 10), (1, "c", 12)]
    assert failover_active(consumers, -1) == 10
    assert failover_active(consumers, 1) == 11
    assert failover_active(consumers, 5) == 12
    assert failover_active([], 0) is None


def test_hash_ring_moves_only_a_share_of_keys():
    before = HashRing([(1, "a"), (2, "b")])
    after = HashRing([(1, "a"), (2, "b"), (3, "c")])
    keys = [key_hash(f"k{i}") for i in range(2000)]
    moved = sum(before.owner(k) != after.owner(k) for k in keys)
    assert all(after.owner(k) == 3 for k in keys if before.owner(k) != after.owner(k))
    assert 300 < moved < 1100
    assert HashRing().owner(5) is None


def test_similar_keys_spread_over_key_shared_consumers():
    # Consumer ids are random, so judge many rings: with a well-mixed hash, ten keys
    # that differ in one character all land on one of two consumers ~0.2% of the
    # time (2 * 0.5**10).  crc32, being linear, did so for ~6% of rings.
    rng = random.Random(3)
    keys = [key_hash(f"key{i}") for i in range(10)]
    lopsided = 0
    for _ in range(2000):
        ring = HashRing([(rng.getrandbits(63), "c0"), (rng.getrandbits(63), "c1")])
        lopsided += len({ring.owner(k) for k in keys}) < 2
    assert lopsided < 40


def test_mask_indices():
    assert mask_indices(0b10110) == [1, 2, 4]


def test_an_entry_handed_to_the_same_consumer_again_is_counted_once():
    deliveries = Deliveries()
    for entry_id in (0, 1, 2):
        deliveries.delivered(7, entry_id, 0b1)
    deliveries.delivered(7, 2, 0b1)  # a retried fetch hands entry 2 out again
    assert deliveries.unacked[7] == 3
    deliveries.acked(1, 0)
    assert deliveries.unacked[7] == 2


def test_key_shared_dispatches_by_the_ordering_key_before_the_partition_key():
    assert dispatch_key(b"order", "part") == b"order"
    assert dispatch_key(None, "part") == "part"
    assert dispatch_key(b"", "part") == b""          # an empty ordering key is still one
    assert dispatch_key(None, None) is None
    # A key hashes alike as text or as its UTF-8 bytes.
    assert key_hash("k1") == key_hash(b"k1") and key_hash(None) == key_hash(b"")
