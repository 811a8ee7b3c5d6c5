"""magnetar_protocol.cursorstate: a stored cursor's individual acks, as both the admin's
stats and the broker's Prometheus backlog gauges take them off (Pulsar's msgBacklog)."""

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.cursorstate import WHOLE, acked_beyond, decode_acks


def test_decode_reads_whole_entries_and_batch_masks():
    state = pb.CursorState(entries=[pb.EntryAcks(entry_id=4),
                                    pb.EntryAcks(entry_id=9, acked_bitset=(0b101).to_bytes(1, "little"))])
    assert decode_acks(state.SerializeToString()) == {4: WHOLE, 9: 0b101}
    assert decode_acks(None) == {} == decode_acks(b"")


def test_acked_beyond_counts_only_stored_messages_after_the_mark_delete():
    acks = {3: WHOLE, 5: WHOLE, 6: 0b1, 8: WHOLE, 9: 0b111}
    # 3 is at or before the mark-delete; 8 is no longer stored; 9 holds 2 messages only
    assert acked_beyond(4, acks, {3: 1, 5: 2, 6: 3, 9: 2}) == 2 + 1 + 2
    assert acked_beyond(9, acks, {9: 2}) == 0
