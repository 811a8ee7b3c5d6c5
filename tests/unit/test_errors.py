import pickle

import pytest

from magnetar_protocol import errors
from magnetar_protocol import magnetar_pb2 as pb


def test_every_wire_code_maps_to_its_own_class():
    for name, code in pb.ErrorCode.items():
        exc = errors.error_for_code(code, "why")
        assert exc.code == code, name
        assert exc.message == "why"


@pytest.mark.parametrize("cls,status", [
    (errors.ProducerBusy, 409), (errors.InvalidTopicName, 400), (errors.MessageTooBig, 400),
    (errors.TopicNotFound, 404), (errors.AuthenticationError, 401),
    (errors.AuthorizationError, 403), (errors.PersistenceError, 503),
])
def test_http_status_follows_the_tree(cls, status):
    assert cls.http_status == status
    assert issubclass(cls, errors.MagnetarError)


def test_round_trip_through_the_wire_and_pickle():
    wire = errors.to_wire(errors.ProducerFenced("old epoch"))
    back = errors.error_for_code(wire.code, wire.message)
    assert type(back) is errors.ProducerFenced
    assert type(pickle.loads(pickle.dumps(back))) is errors.ProducerFenced


def test_retryable_errors():
    assert errors.NotOwner.retryable and errors.PersistenceError.retryable
    assert not errors.ProducerBusy.retryable
