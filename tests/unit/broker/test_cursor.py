from magnetar_broker.subscription.cursor import WHOLE, Cursor


def test_in_order_acks_move_mark_delete():
    c = Cursor(-1)
    c.note_size(0, 2)
    c.ack(0, 0)
    assert c.mark_delete == -1 and c.is_acked(0, 0) and not c.is_acked(0, 1)
    c.ack(0, 1)
    assert c.mark_delete == 0 and c.acked == {}


def test_out_of_order_acks_are_kept_until_the_gap_closes():
    c = Cursor(-1)
    c.ack(2, WHOLE)
    c.ack(1, WHOLE)
    assert c.mark_delete == -1 and set(c.acked) == {1, 2}
    c.ack(0, WHOLE)
    assert c.mark_delete == 2 and c.acked == {}


def test_unacked_mask():
    c = Cursor(-1)
    c.ack(5, 1)
    assert c.unacked_mask(5, 3) == 0b101
    assert c.unacked_mask(4, 3) == 0b111
    c.ack(5, WHOLE)
    assert c.unacked_mask(5, 3) == 0


def test_cumulative_inside_a_batch():
    c = Cursor(-1)
    c.ack(3, WHOLE)
    c.note_size(1, 4)
    c.ack_cumulative(1, 2)
    assert c.mark_delete == 0
    assert c.unacked_mask(1, 4) == 0b1000
    c.ack_cumulative(1, 3)
    assert c.mark_delete == 1  # entry 1 completes; 2 still open, 3 acked beyond it
    assert set(c.acked) == {3}


def test_encode_decode_round_trip():
    c = Cursor(10)
    c.ack(12, 0)
    c.ack(12, 9)
    c.ack(14, WHOLE)
    back = Cursor.decode(c.mark_delete, c.encode())
    assert back.mark_delete == 10
    assert back.acked == {12: (1 << 9) | 1, 14: -1}


def test_decode_advances_over_complete_entries():
    c = Cursor(3)
    c.ack(5, WHOLE)
    data = c.encode()
    back = Cursor.decode(4, data)  # entry 4 was completed too
    assert back.mark_delete == 5 and back.acked == {}


def test_batch_index_is_bounded_by_the_entry():
    from magnetar_broker.partition.batchcheck import batch_index_problem

    assert batch_index_problem(4, WHOLE, 3, 10000) is None
    assert batch_index_problem(4, 0, 3, 10000) is None
    assert batch_index_problem(4, 2, 3, 10000) is None
    assert "past entry 4, which holds 3" in batch_index_problem(4, 3, 3, 10000)
    assert "past entry 4" in batch_index_problem(4, 2**27, 3, 10000)
    assert "negative" in batch_index_problem(4, -2, 3, 10000)
    assert "negative" in batch_index_problem(4, -(2**31), None, 10000)
    # A trimmed entry: no entry the broker stored held more than its batch limit.
    assert batch_index_problem(4, 9999, None, 10000) is None
    assert "is gone" in batch_index_problem(4, 10000, None, 10000)


def test_ack_first_sets_the_leading_indexes_in_one_step():
    c = Cursor(-1)
    c.ack_first(0, 2, num_messages=3)
    assert c.is_acked(0, 1) and not c.is_acked(0, 2) and c.mark_delete == -1
    c.ack_first(0, 3)
    assert c.mark_delete == 0 and c.acked == {}
    c.ack_first(1, 0)  # nothing
    assert c.acked == {}


def test_a_copy_moves_alone():
    c = Cursor(-1)
    c.note_size(1, 2)
    c.ack(0, WHOLE)
    twin = c.copy()
    twin.ack(1, 0)
    twin.ack(1, 1)
    assert twin.mark_delete == 1  # the copy knew entry 1's size
    assert c.mark_delete == 0 and not c.is_acked(1, 0)
