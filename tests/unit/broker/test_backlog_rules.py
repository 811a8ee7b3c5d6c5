"""subscription/backlog.py: where skip, peek and resets land on a cursor."""

from magnetar_broker.subscription.backlog import (
    WHOLE,
    SkipPlan,
    due_positions,
    lowest_bits,
    message_id_problem,
    plan_skip,
    reset_time_problem,
)
from magnetar_broker.subscription.cursor import Cursor

# Entries 0..3 of 1, 3, 1 and 2 messages.
ENTRIES = [(0, 1), (1, 3), (2, 1), (3, 2)]
SIZES = dict(ENTRIES)


def test_skip_whole_entries_then_part_of_a_batch():
    cursor = Cursor(-1)
    plan = plan_skip(cursor, ENTRIES, 3)
    assert plan.whole == [0] and plan.partial == {1: 0b011} and plan.skipped == 3
    plan.apply(cursor, SIZES)
    assert cursor.mark_delete == 0
    assert due_positions(cursor, ENTRIES, 10) == [(1, 2), (2, 0), (3, 0), (3, 1)]


def test_skip_steps_over_messages_already_acknowledged():
    cursor = Cursor(-1)
    cursor.ack(1, 1, 3)   # the middle message of entry 1
    cursor.ack(2, WHOLE)  # entry 2 whole
    plan = plan_skip(cursor, ENTRIES, 3)
    # m(0,0), m(1,0), m(1,2) are the next three due: the acked ones are not counted, and
    # entry 1's due messages are all of what it has left (acknowledged whole).
    assert plan.whole == [0, 1] and not plan.partial and plan.skipped == 3
    plan.apply(cursor, SIZES)
    assert cursor.mark_delete == 2  # entry 1 completes, entry 2 was done
    assert due_positions(cursor, ENTRIES, 10) == [(3, 0), (3, 1)]


def test_skip_past_the_end_skips_what_there_is():
    cursor = Cursor(-1)
    plan = plan_skip(cursor, ENTRIES, 100)
    assert plan.skipped == 7 and plan.whole == [0, 1, 2, 3]
    plan.apply(cursor, SIZES)
    assert cursor.mark_delete == 3 and due_positions(cursor, ENTRIES, 10) == []


def test_skip_over_chunks_continues_the_same_plan():
    cursor = Cursor(-1)
    plan = SkipPlan()
    plan_skip(cursor, ENTRIES[:2], 5, plan)
    assert plan.skipped == 4
    plan_skip(cursor, ENTRIES[2:], 5, plan)
    assert plan.skipped == 5 and plan.whole == [0, 1, 2] and not plan.partial


def test_skip_leaves_messages_a_transaction_holds():
    cursor = Cursor(-1)

    def held(entry_id, num_messages):
        return 0b010 if entry_id == 1 else 0  # (1, 1) is pending in a transaction

    plan = plan_skip(cursor, ENTRIES, 4, held=held)
    assert plan.whole == [0, 2] and plan.partial == {1: 0b101} and plan.skipped == 4
    plan.apply(cursor, SIZES)
    assert not cursor.is_acked(1, 1)


def test_skip_zero_changes_nothing():
    cursor = Cursor(-1)
    plan = plan_skip(cursor, ENTRIES, 0)
    assert plan.skipped == 0 and not plan.whole and not plan.partial


def test_peek_positions_in_delivery_order_and_bounded():
    cursor = Cursor(0)
    cursor.ack(1, 0, 3)
    assert due_positions(cursor, ENTRIES[1:], 2) == [(1, 1), (1, 2)]
    assert due_positions(cursor, ENTRIES[1:], 0) == []


def test_lowest_bits():
    assert lowest_bits(0b101101, 3) == 0b001101
    assert lowest_bits(0b1, 5) == 0b1


def test_message_id_problems():
    assert message_id_problem(3, -1, 10, 0) is None
    assert message_id_problem(9, 2, 10, 0) is None
    assert "past the end" in message_id_problem(10, -1, 10, 0)
    assert "log is empty" in message_id_problem(0, -1, 0, None)
    assert "no longer stored" in message_id_problem(2, -1, 10, 5)
    assert "negative" in message_id_problem(-3, -1, 10, 0)
    assert "below -1" in message_id_problem(1, -2, 10, 0)


def test_reset_time_must_be_in_the_past():
    now = 1_700_000_000_000
    assert reset_time_problem(now - 60_000, now) is None
    assert reset_time_problem(now + 500, now) is None  # clocks a little apart
    assert "in the future" in reset_time_problem(now + 60_000, now)
    assert "negative" in reset_time_problem(-1, now)
