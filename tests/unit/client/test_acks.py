"""Grouped acks and delayed negative acks."""

import pytest

from magnetar._acks import AckGroup, NackTracker, UnackedTracker, ack_requests, compact
from magnetar._types import MultiplierRedeliveryBackoff
from magnetar_protocol import magnetar_pb2 as pb


def test_acks_are_taken_as_one_group():
    group = AckGroup()
    assert group.add(1, 0, 3) == 1
    assert group.add(1, 1, 3) == 2
    group.cumulative(0, 5)
    assert len(group) == 3
    assert group.take() == ([(1, 0, 3), (1, 1, 3)], (0, 5))
    assert len(group) == 0 and group.take() == ([], None)


def test_the_highest_cumulative_ack_wins():
    group = AckGroup()
    group.cumulative(5, 2)
    group.cumulative(4, 9)
    group.cumulative(5, 3)
    assert group.take()[1] == (5, 3)


def test_put_back_keeps_order_ahead_of_newer_acks():
    group = AckGroup()
    group.add(1, 0, 2)
    group.add(2, 0, 2)
    taken, cumulative = group.take()
    group.add(3, 0, 2)
    group.put_back(taken, (7, 0))
    assert group.take() == ([(1, 0, 2), (2, 0, 2), (3, 0, 2)], (7, 0))


def test_requests_hold_individual_positions_once_and_the_cumulative_separately():
    reqs = ack_requests(9, "s", [(1, 0, 5), (1, 1, 5), (1, 0, 5)], (0, 3))
    assert [r.ack_type for r in reqs] == [pb.ACK_INDIVIDUAL, pb.ACK_CUMULATIVE]
    assert all(r.consumer_id == 9 for r in reqs)
    assert [(p.entry_id, p.batch_index) for p in reqs[0].positions] == [(1, 0), (1, 1)]
    assert [(p.entry_id, p.batch_index) for p in reqs[1].positions] == [(0, 3)]
    assert ack_requests(9, "s", [], None) == []


def test_an_entry_acked_whole_and_in_order_becomes_one_position():
    whole = [(4, i, 3) for i in range(3)]
    assert compact(whole) == [(4, -1)]
    assert compact([(9, 0, 1)]) == [(9, -1)]
    assert compact(whole + [(5, 0, 2)] + [(6, i, 2) for i in range(2)]) == [(4, -1), (5, 0), (6, -1)]


def test_partly_acked_or_out_of_order_entries_stay_individual():
    assert compact([(4, 0, 3), (4, 1, 3)]) == [(4, 0), (4, 1)]                 # one missing
    assert compact([(4, 1, 3), (4, 0, 3), (4, 2, 3)]) == [(4, 1), (4, 0), (4, 2)]
    assert compact([(4, 0, 3), (4, 0, 3), (4, 2, 3)]) == [(4, 0), (4, 2)]     # a repeat
    assert compact([(4, 0, 3), (5, 1, 3), (4, 2, 3)]) == [(4, 0), (5, 1), (4, 2)]
    assert compact([(4, 0, 0), (4, 1, 0)]) == [(4, 0), (4, 1)]                 # size unknown


def test_nacks_come_due_after_the_delay_grouped_by_partition():
    nacks = NackTracker(delay_s=1.0)
    nacks.add(0, (5, 0), now=10.0)
    nacks.add(1, (6, 0), now=10.2)
    nacks.add(0, (7, 1), now=10.4)
    assert nacks.next_due() == 11.0
    assert nacks.take_due(10.99) == {}
    assert nacks.take_due(11.2) == {0: [(5, 0)], 1: [(6, 0)]}
    assert nacks.next_due() == 11.4 and len(nacks) == 1
    assert nacks.take_due(12.0) == {0: [(7, 1)]}
    assert nacks.next_due() is None


def test_a_backoff_orders_nacks_by_their_own_delay():
    backoff = MultiplierRedeliveryBackoff(min_delay_ms=100, max_delay_ms=1000, multiplier=3)
    nacks = NackTracker(delay_s=60.0, backoff=backoff)
    nacks.add(0, (1, 0), now=10.0, redelivery_count=2)   # 900 ms
    nacks.add(0, (2, 0), now=10.0, redelivery_count=0)   # 100 ms
    nacks.add(0, (3, 0), now=10.0, redelivery_count=5)   # capped at 1 s
    assert nacks.next_due() == 10.1
    assert nacks.take_due(10.5) == {0: [(2, 0)]}
    assert nacks.take_due(10.95) == {0: [(1, 0)]}
    assert nacks.take_due(11.0) == {0: [(3, 0)]}


def test_the_multiplier_backoff_is_pulsars_shape():
    backoff = MultiplierRedeliveryBackoff(min_delay_ms=1000, max_delay_ms=60_000, multiplier=2)
    assert [backoff.next(n) for n in range(8)] == [1000, 2000, 4000, 8000, 16000, 32000, 60000, 60000]
    assert backoff.next(10_000) == 60_000  # no float overflow
    assert MultiplierRedeliveryBackoff().next(1) == 20_000  # Pulsar's builder defaults: 10 s x 2
    for bad in [dict(min_delay_ms=-1), dict(min_delay_ms=5, max_delay_ms=4), dict(multiplier=1),
                dict(multiplier=True), dict(max_delay_ms=1.5)]:
        with pytest.raises(ValueError):
            MultiplierRedeliveryBackoff(**bad)


def test_the_unacked_tracker_hands_out_a_message_one_timeout_to_one_tick_after_it_came():
    tracker = UnackedTracker(timeout_s=3.0, tick_s=1.0)  # 4 buckets
    tracker.add((0, 1, 0))
    assert [tracker.tick() for _ in range(3)] == [[], [], []]
    tracker.add((0, 2, 0))
    assert tracker.tick() == [(0, 1, 0)]
    assert [tracker.tick() for _ in range(3)] == [[], [], [(0, 2, 0)]]
    assert len(tracker) == 0


def test_acks_take_messages_out_of_the_unacked_tracker():
    tracker = UnackedTracker(timeout_s=1.0, tick_s=1.0)
    for key in [(0, 1, 0), (0, 1, 1), (0, 2, 0), (0, 3, 0), (1, 1, 0), (1, 5, 0)]:
        tracker.add(key)
    tracker.add((0, 1, 0))  # received again: counted once
    tracker.remove((0, 1, 1))
    tracker.remove((9, 9, 9))  # not held: nothing happens
    tracker.remove_through(0, 2, -1)  # a cumulative ack through entry 2 of partition 0
    tracker.remove((1, 5, -1))  # a whole-entry ack
    assert sorted(tracker.tick() + tracker.tick()) == [(0, 3, 0), (1, 1, 0)]
    tracker.add((0, 7, 0))
    tracker.clear()
    assert tracker.tick() + tracker.tick() == [] and len(tracker) == 0


def test_a_tick_longer_than_the_timeout_is_cut_to_it():
    assert UnackedTracker(timeout_s=1.0, tick_s=5.0).tick_s == 1.0
