"""Partition routing: a stable hash for keys, round robin per batch otherwise."""

import random
import zlib

from magnetar._routing import Router, partition_for_key
from magnetar._types import PartitionsRoutingMode


class Part:
    def __init__(self, index):
        self.index = index
        self.sealed_count = 0


def test_key_routing_is_crc32_modulo_partitions():
    for key in ["a", "order-17", "ключ", ""]:
        assert partition_for_key(key, 7) == zlib.crc32(key.encode()) % 7
    router = Router([Part(i) for i in range(5)])
    assert router.keyed("order-17").index == zlib.crc32(b"order-17") % 5
    # Stable: the same key always lands on the same partition.
    assert {router.keyed("order-17").index for _ in range(20)} == {zlib.crc32(b"order-17") % 5}


def test_round_robin_moves_on_only_when_the_filled_batch_was_sealed():
    parts = [Part(i) for i in range(3)]
    router = Router(parts, rng=random.Random(0))
    first = router.keyless()
    assert all(router.keyless() is first for _ in range(10))  # same batch keeps filling
    first.sealed_count += 1                                   # that batch went out
    second = router.keyless()
    assert second.index == (first.index + 1) % 3
    assert router.keyless() is second
    second.sealed_count += 1
    assert router.keyless().index == (first.index + 2) % 3


def test_round_robin_visits_every_partition():
    parts = [Part(i) for i in range(4)]
    router = Router(parts, rng=random.Random(1))
    seen = []
    for _ in range(8):
        part = router.keyless()
        seen.append(part.index)
        part.sealed_count += 1
    assert sorted(seen[:4]) == [0, 1, 2, 3] and seen[4:] == seen[:4]


def test_single_partition_mode_sticks_to_one_partition():
    parts = [Part(i) for i in range(4)]
    router = Router(parts, PartitionsRoutingMode.UseSinglePartition, rng=random.Random(2))
    chosen = router.keyless()
    for _ in range(5):
        chosen.sealed_count += 1
        assert router.keyless() is chosen
    # Keys still hash.
    assert router.keyed("k").index == zlib.crc32(b"k") % 4
