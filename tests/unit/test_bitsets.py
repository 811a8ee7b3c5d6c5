"""magnetar_protocol.bitsets: set bits of a batch-index mask, linear in its size."""

from __future__ import annotations

import random

from magnetar_protocol.bitsets import set_bits


def test_set_bits_lists_the_indexes_lowest_first():
    assert set_bits(0) == []
    assert set_bits(-1) == []
    assert set_bits(0b1) == [0]
    assert set_bits(0b1011_0000_0001) == [0, 8, 9, 11]
    rng = random.Random(7)
    for _ in range(200):
        bits = sorted(rng.sample(range(3000), rng.randint(1, 40)))
        assert set_bits(sum(1 << b for b in bits)) == bits


def test_a_mask_with_a_high_bit_is_cheap():
    # 2^27: the 16 MB mask of issue #20 (bit by bit this took minutes); one scan here.
    assert set_bits(1 << (1 << 27) | 0b101) == [0, 2, 1 << 27]
