"""rates.py: sliding-window rates of a topic's and a subscription's messages and bytes."""

import pytest

from magnetar_broker.rates import Rate


def test_rate_over_the_window():
    rate = Rate(now=100.0, window_s=10)
    for second in range(100, 120):
        rate.add(second + 0.5, 10, 1000)
    # The last 10 one-second buckets: 100 messages, 10,000 bytes over 10 s.
    assert rate.rates(120.0) == pytest.approx((10.0, 1000.0))


def test_a_young_counter_is_not_diluted_over_the_whole_window():
    rate = Rate(now=100.0, window_s=10)
    rate.add(100.2, 50, 500)
    rate.add(101.5, 50, 500)
    assert rate.rates(102.0) == pytest.approx((50.0, 500.0))  # 100 messages in 2 s


def test_rates_fall_to_zero_once_traffic_stops():
    rate = Rate(now=0.0, window_s=10)
    rate.add(1.0, 100, 100)
    assert rate.rates(5.0)[0] > 0
    assert rate.rates(12.5) == (0.0, 0.0)


def test_the_first_second_counts_as_one_second():
    rate = Rate(now=10.0, window_s=10)
    rate.add(10.1, 7, 70)
    assert rate.rates(10.2) == pytest.approx((7.0, 70.0))
