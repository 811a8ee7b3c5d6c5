"""Where a reader starts, and whether it has more to read."""

from magnetar._reader import has_more, initial_start, start_position
from magnetar._types import LATEST_ENTRY, MessageId


def pos(position_and_inclusive):
    position, inclusive = position_and_inclusive
    return position.entry_id, position.batch_index, inclusive


def test_earliest_is_entry_zero_inclusive():
    assert pos(start_position(MessageId.earliest, False, None)) == (0, -1, True)


def test_latest_is_the_latest_entry():
    assert pos(start_position(MessageId.latest, False, None)) == (LATEST_ENTRY, -1, False)


def test_a_message_id_starts_after_it_unless_inclusive():
    assert pos(start_position(MessageId(-1, 0, 0, 3), False, None)) == (0, 0, False)
    assert pos(start_position(MessageId(-1, 7, 2, 3), True, None)) == (7, 2, True)


def test_after_a_reconnect_it_starts_just_after_the_last_message_returned():
    assert pos(start_position(MessageId.earliest, True, (12, 4))) == (12, 4, False)
    assert pos(start_position(MessageId.latest, False, (3, 0))) == (3, 0, False)


def test_has_more_compares_with_the_last_returned_message():
    assert has_more((5, 2), (5, 1), None, -1)
    assert not has_more((5, 2), (5, 2), None, -1)
    assert not has_more(None, None, (0, -1, True), -1)


def test_has_more_before_anything_was_returned_uses_the_start():
    earliest = initial_start(MessageId.earliest, False)
    assert has_more((0, 0), None, earliest, -1)
    exclusive = initial_start(MessageId(-1, 5, 2, 3), False)
    assert not has_more((5, 2), None, exclusive, -1)
    assert has_more((6, 0), None, exclusive, -1)
    inclusive = initial_start(MessageId(-1, 5, 2, 3), True)
    assert has_more((5, 2), None, inclusive, -1)
    assert not has_more((5, 1), None, inclusive, -1)


def test_a_latest_reader_has_more_once_something_arrived_after_its_cursor():
    assert initial_start(MessageId.latest, False) is None
    assert not has_more((9, 0), None, None, mark_delete=9)
    assert has_more((10, 0), None, None, mark_delete=9)
