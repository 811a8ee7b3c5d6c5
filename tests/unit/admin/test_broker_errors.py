"""magnetar_protocol.wire.decode_json_error: a broker's JSON error answer (its
/internal/v1 routes) becomes the class it raised, so the admin answers with it."""

import json

from magnetar_protocol.errors import BadRequest, NotFound, SubscriptionNotFound, TopicTerminated, UnknownError
from magnetar_protocol.wire import decode_json_error, encode_error


def test_round_trip_keeps_the_class_and_reason():
    for exc in (SubscriptionNotFound("no sub 's'"), TopicTerminated("terminated at 4"), BadRequest("bad")):
        _, body = encode_error(exc, "application/json")
        back = decode_json_error(exc.http_status, body, "broker x")
        assert type(back) is type(exc) and back.message == exc.message


def test_unknown_names_and_bodies_fall_back_to_the_status():
    body = json.dumps({"reason": "gone", "code": "SomethingNew"}).encode()
    assert type(decode_json_error(404, body, "broker x")) is NotFound
    err = decode_json_error(500, b"<html>proxy error</html>", "broker x")
    assert isinstance(err, UnknownError) and "broker x" in err.message
