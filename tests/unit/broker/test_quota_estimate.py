"""The backlog quota on the send path (partition/quota.py): an estimate kept on append,
and when a send asks for an exact check."""

from magnetar_broker.partition.quota import BacklogEstimate, check_before_send
from magnetar_protocol.policies import EVICTION, EXCEPTION, HOLD, BacklogQuota

NOW = 10_000_000_000


def estimate(policy=EXCEPTION, limit_size=100, limit_time=-1, backlog=0, oldest=None, subscribed=True):
    est = BacklogEstimate()
    est.measured(BacklogQuota(limit_size, limit_time, policy), subscribed, backlog, oldest)
    return est


def test_appends_raise_the_estimate_past_the_limit():
    est = estimate(backlog=90)
    assert not est.over(NOW)
    est.appended(10, NOW)
    assert not est.over(NOW)  # 100 is not beyond 100
    est.appended(1, NOW)
    assert est.over(NOW)


def test_an_exact_check_replaces_the_estimate():
    est = estimate(backlog=500)
    assert est.over(NOW)
    est.measured(est.quota, True, 20, None)  # the consumers caught up
    assert not est.over(NOW)


def test_no_subscription_no_backlog():
    est = estimate(subscribed=False)
    est.appended(1000, NOW)
    assert est.backlog_bytes == 0 and not est.over(NOW)


def test_the_age_limit_counts_from_the_first_append_into_an_empty_backlog():
    est = estimate(limit_size=-1, limit_time=5)
    est.appended(1, NOW)
    assert est.oldest_ms == NOW
    est.appended(1, NOW + 3000)
    assert est.oldest_ms == NOW  # the oldest stays the oldest
    assert not est.over(NOW + 5000)
    assert est.over(NOW + 5001)


def test_only_hold_and_exception_concern_sends():
    assert estimate(policy=HOLD, backlog=101).over(NOW)
    assert not estimate(policy=EVICTION, backlog=101).over(NOW)  # the pass evicts
    none = BacklogEstimate()
    none.appended(10**9, NOW)
    assert not none.over(NOW)


def test_a_send_asks_for_a_check_on_the_first_crossing_then_at_most_once_per_interval():
    est = estimate(backlog=101)
    assert check_before_send(est, None, NOW, 100)  # never checked: at once
    est.checked_ms = NOW
    assert not check_before_send(est, None, NOW + 99, 100)
    assert check_before_send(est, None, NOW + 100, 100)


def test_no_check_under_the_limit_or_when_already_blocked():
    assert not check_before_send(estimate(backlog=50), None, NOW, 100)
    assert not check_before_send(estimate(backlog=500), EXCEPTION, NOW, 100)  # the gate decides
