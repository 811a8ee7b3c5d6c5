"""The one mapping of an exception to Pulsar's wire (magnetar_broker.pulsar.errors.failure):
every failed reply (ERROR, SEND_ERROR, a failed LOOKUP, the transaction commands' own
error fields) carries what it gives."""

from magnetar_broker.pulsar.errors import error_frame, failure
from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.errors import NotOwner, ProducerBusy


def test_a_magnetar_error_keeps_its_code_and_message():
    assert failure(ProducerBusy("producer 'p' is already connected")) == (
        pb.ProducerBusy, "producer 'p' is already connected")
    assert failure(NotOwner("moved"))[0] == pb.ServiceNotReady  # the client looks the topic up again


def test_any_other_exception_is_an_unknown_error_saying_what_it_was():
    assert failure(ValueError("boom")) == (pb.UnknownError, "internal error: ValueError('boom')")
    frame = error_frame(7, KeyError("k"))
    assert (frame.request_id, frame.error, frame.message) == (7, pb.UnknownError, "internal error: KeyError('k')")
