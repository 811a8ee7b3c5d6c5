"""The per-role transaction limits (issue 24), as pure rules."""

import pytest

from magnetar_coordinator.txnlimits import LimitExceeded, RoleTxnLimits


def test_open_transactions_are_bounded_per_role():
    limits = RoleTxnLimits(max_open=100, max_per_s=0)
    for _ in range(4):
        limits.admit("a", 25, now=0)
    with pytest.raises(LimitExceeded, match="MAGNETAR_MAX_OPEN_TXNS_PER_ROLE"):
        limits.admit("a", 1, now=0)
    limits.admit("b", 100, now=0)  # another role has its own count
    assert limits.open_count("a") == 100
    # The database says 10 are still OPEN; 5 were opened while it was read.
    limits.reset_open({"a": 10}, {"a": 5})
    assert limits.open_count("a") == 15 and limits.open_count("b") == 0
    limits.admit("a", 85, now=0)
    with pytest.raises(LimitExceeded):
        limits.admit("a", 1, now=0)


def test_new_transactions_per_second_are_bounded_per_role():
    limits = RoleTxnLimits(max_open=0, max_per_s=100)
    limits.admit("a", 64, now=10.0)
    with pytest.raises(LimitExceeded, match="MAGNETAR_MAX_NEW_TXNS_PER_ROLE_PER_S"):
        limits.admit("a", 64, now=10.0)
    limits.admit("a", 36, now=10.0)           # the rest of the second's burst
    with pytest.raises(LimitExceeded):
        limits.admit("a", 1, now=10.0)
    limits.admit("a", 50, now=10.5)           # half a second refills 50
    limits.admit("z", 100, now=10.5)          # other roles are not affected
    limits.forget_idle(now=100.0)             # idle full buckets go
    assert limits._buckets == {}


def test_a_refused_request_counts_nothing():
    limits = RoleTxnLimits(max_open=10, max_per_s=0)
    with pytest.raises(LimitExceeded):
        limits.admit("a", 11, now=0)
    assert limits.open_count("a") == 0
