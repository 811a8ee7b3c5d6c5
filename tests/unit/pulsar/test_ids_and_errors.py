"""Pure rules of the Pulsar listener: message ids, batch-index acks (ack_set bits mean
*unacked*) and the ServerError a Magnetar error is answered with."""

from __future__ import annotations

from magnetar_protocol import errors
from magnetar_protocol import magnetar_pb2 as mpb
from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.pulsar import ids
from magnetar_protocol.pulsar.errors import server_error


def positions(mid, cumulative, size):
    return [(p.entry_id, p.batch_index) for p in ids.ack_positions(mid, cumulative, size)]


def test_bitset_words_round_trip_including_the_sign_bit():
    words = ids.indices_to_words([0, 2, 63, 64], 70)
    assert words[0] < 0            # bit 63 set: a negative int64 on the wire
    assert ids.words_to_indices(words, 70) == [0, 2, 63, 64]


def test_individual_ack_set_acks_the_clear_bits_only():
    mid = pb.MessageIdData(ledger_id=0, entry_id=7, ack_set=[0b1101])   # the wheel acking message 1 of 4
    assert positions(mid, False, 4) == [(7, 1)]


def test_ack_set_all_clear_is_the_whole_entry_and_plain_ids_too():
    assert positions(pb.MessageIdData(ledger_id=0, entry_id=7, ack_set=[0]), False, 4) == [(7, -1)]
    assert positions(pb.MessageIdData(ledger_id=0, entry_id=7), False, None) == [(7, -1)]
    assert positions(pb.MessageIdData(ledger_id=0, entry_id=7, batch_index=2), False, None) == [(7, 2)]


def test_cumulative_ack_set_stops_before_the_first_unacked_message():
    assert positions(pb.MessageIdData(ledger_id=0, entry_id=7, ack_set=[0b1100]), True, 4) == [(7, 1)]
    assert positions(pb.MessageIdData(ledger_id=0, entry_id=7, ack_set=[0b1111]), True, 4) == [(6, -1)]
    assert positions(pb.MessageIdData(ledger_id=0, entry_id=0, ack_set=[0b1111]), True, 4) == []


def test_earliest_and_latest_sentinels():
    assert ids.is_earliest(pb.MessageIdData(ledger_id=ids.U64, entry_id=ids.U64))
    assert ids.is_latest(pb.MessageIdData(ledger_id=ids.LATEST_ENTRY, entry_id=ids.LATEST_ENTRY))
    assert not ids.is_earliest(ids.message_id(0, -1))


def test_server_errors_follow_the_most_specific_class():
    assert server_error(errors.ProducerFenced("x")) == pb.ProducerFenced
    assert server_error(errors.ProducerBusy("x")) == pb.ProducerBusy
    assert server_error(errors.MessageTooBig("x")) == pb.NotAllowedError
    assert server_error(errors.InvalidTopicName("x")) == pb.InvalidTopicName
    assert server_error(errors.NotOwner("x")) == pb.ServiceNotReady       # retried after a lookup
    assert server_error(errors.PersistenceError("x")) == pb.PersistenceError
    assert server_error(errors.AuthorizationError("x")) == pb.AuthorizationError
    assert server_error(ValueError("x")) == pb.UnknownError
    assert mpb.Position  # the positions above are Magnetar's
