"""Pulsar's pending-ack rules, at the rule level."""

import pytest

from magnetar_broker.subscription.cursor import WHOLE, Cursor
from magnetar_broker.subscription.pendingack import PendingAcks
from magnetar_protocol.errors import TransactionConflict

T1, T2 = (0, 1), (0, 2)


def test_message_pending_in_one_transaction_only():
    p, c = PendingAcks(), Cursor(-1)
    p.add(T1, p.check_individual(T1, [(3, 0)], c), False)
    assert p.check_individual(T1, [(3, 0)], c) == []  # same txn again: nothing new
    with pytest.raises(TransactionConflict):
        p.check_individual(T2, [(3, 0)], c)
    with pytest.raises(TransactionConflict):
        p.check_individual(T2, [(3, WHOLE)], c)


def test_acking_an_acked_message_conflicts():
    p, c = PendingAcks(), Cursor(5)
    with pytest.raises(TransactionConflict):
        p.check_individual(T1, [(5, 0)], c)


def test_one_cumulative_holder_moving_forward():
    p, c = PendingAcks(), Cursor(-1)
    p.check_cumulative(T1, 4, WHOLE, c)
    p.add(T1, [(4, WHOLE)], True)
    with pytest.raises(TransactionConflict):
        p.check_cumulative(T2, 9, WHOLE, c)
    with pytest.raises(TransactionConflict):
        p.check_cumulative(T1, 2, WHOLE, c)
    p.check_cumulative(T1, 6, WHOLE, c)
    with pytest.raises(TransactionConflict):
        p.check_individual(T2, [(1, 0)], c)  # under T1's cumulative ack


def test_cumulative_over_another_txns_individual_ack_conflicts():
    p, c = PendingAcks(), Cursor(-1)
    p.add(T2, [(2, 0)], False)
    with pytest.raises(TransactionConflict):
        p.check_cumulative(T1, 3, WHOLE, c)


def test_take_and_mask():
    p = PendingAcks()
    p.add(T1, [(1, 0), (1, 2)], False)
    p.add(T2, [(2, WHOLE)], False)
    assert p.mask(1, 3) == 0b101 and p.mask(2, 4) == 0b1111 and p.mask(0, 2) == 0
    assert p.take(T1) == ([(1, 0), (1, 2)], None)
    assert p.mask(1, 3) == 0
    p.add(T1, [(5, 1)], True)
    assert p.mask(4, 2) == 0b11 and p.mask(5, 4) == 0b11 and p.mask(6, 2) == 0
    assert p.take(T1) == ([], (5, 1))


def test_load_keeps_the_furthest_cumulative_row():
    p = PendingAcks()
    p.load([(3, -1, 0, 1, True), (7, -1, 0, 1, True), (2, 1, 0, 2, False)])
    assert p.cumulative == ((0, 1), 7, -1)
    assert p.holder(2, 1) == (0, 2)


def test_cumulative_at_or_below_the_same_txns_position_conflicts():
    """Pulsar's PendingAckHandleImpl: a cumulative ack at or below the position the same
    transaction already holds, or at or below the mark-delete position, is a conflict."""
    p, c = PendingAcks(), Cursor(2)
    p.check_cumulative(T1, 5, 3, c)
    p.add(T1, [(5, 3)], True)
    for entry_id, index in [(5, 3), (5, 1), (4, WHOLE), (3, 0)]:
        with pytest.raises(TransactionConflict):
            p.check_cumulative(T1, entry_id, index, c)
    p.check_cumulative(T1, 5, 4, c)       # forward inside the entry
    p.check_cumulative(T1, 5, WHOLE, c)   # the whole entry is past its every index
    p.add(T1, [(5, WHOLE)], True)
    with pytest.raises(TransactionConflict):
        p.check_cumulative(T1, 5, 7, c)
    for entry_id in (2, 1):  # at or below mark-delete
        with pytest.raises(TransactionConflict):
            PendingAcks().check_cumulative(T1, entry_id, WHOLE, c)


def test_peek_answers_what_take_would_and_leaves_it_held():
    p, c = PendingAcks(), Cursor(-1)
    p.add(T1, p.check_individual(T1, [(5, 1), (3, 0)], c), False)
    p.check_cumulative(T2, 2, WHOLE, c)
    p.add(T2, [(2, WHOLE)], True)
    assert p.peek(T1) == ([(3, 0), (5, 1)], None)
    assert p.peek(T2) == ([], (2, WHOLE))
    assert p.holds(T1) and p.holds(T2)  # a one-phase commit's write may still roll back
    assert p.take(T1) == ([(3, 0), (5, 1)], None)
    assert p.take(T2) == ([], (2, WHOLE))
