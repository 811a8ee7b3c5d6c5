"""Bad input at the edge of every service (issue 20, finding 5): 400 with a reason from
proto_route, the NUL-in-URL guard, JWT subjects, and database DataErrors, never a 500
with the database's text or a retryable 503."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import jwt
import pytest

from magnetar_broker.partition.dedup import drop_persisted
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import AuthenticationError, BadRequest, PersistenceError
from magnetar_runtime.app import FastPath, create_app, proto_route
from magnetar_runtime.auth import Authenticator
from magnetar_runtime.error_answers import as_magnetar_error, write_failure
from magnetar_runtime.settings import ServiceSettings
from tests.unit.test_fast_path import call

SECRET = "a-secret-of-at-least-thirty-two-bytes"


def app_with(handler):
    app = create_app("test")
    proto_route(app, "/v1/echo", pb.AckRequest, handler)

    @app.get("/json/{name}")
    async def named(name: str, owner: str | None = None) -> dict:
        return {"name": name, "owner": owner}

    return FastPath(app)


def test_a_request_out_of_range_never_reaches_the_handler():
    reached = []

    async def handler(msg):
        reached.append(msg)
        return pb.AckResponse()

    asgi = app_with(handler)
    bad = pb.AckRequest(positions=[pb.Position(entry_id=1, batch_index=-3)]).SerializeToString()
    status, body = asyncio.run(call(asgi, "POST", "/v1/echo", bad))
    assert status == 400 and not reached
    assert "AckRequest.positions[0].batch_index = -3" in pb.Error.FromString(body).message
    # the same call inside a /v1/batch
    batch = pb.BatchRequest(calls=[pb.BatchCall(path="/v1/echo", body=bad)]).SerializeToString()
    status, body = asyncio.run(call(asgi, "POST", "/v1/batch", batch))
    assert status == 200 and pb.BatchResponse.FromString(body).results[0].status == 400 and not reached
    good = pb.AckRequest(positions=[pb.Position(entry_id=1, batch_index=-1)]).SerializeToString()
    assert asyncio.run(call(asgi, "POST", "/v1/echo", good))[0] == 200 and reached


def test_a_database_data_error_is_a_400_that_does_not_quote_sql():
    async def handler(msg):
        raise asyncpg.NumericValueOutOfRangeError("bigint out of range in INSERT INTO secret_table")

    status, body = asyncio.run(call(app_with(handler), "POST", "/v1/echo", b""))
    message = pb.Error.FromString(body).message
    assert status == 400 and "NumericValueOutOfRangeError" in message
    assert "secret_table" not in message
    for exc in (asyncpg.CharacterNotInRepertoireError("x"), asyncpg.UntranslatableCharacterError("x"),
                asyncpg.InvalidTextRepresentationError("x"), asyncpg.DataError("x")):
        assert isinstance(as_magnetar_error(exc), BadRequest)


def test_a_failed_write_is_permanent_only_when_postgresql_refused_a_value():
    assert isinstance(write_failure(asyncpg.NumericValueOutOfRangeError("x"), "store"), BadRequest)
    retry = write_failure(ConnectionResetError("gone"), "could not store batch")
    assert isinstance(retry, PersistenceError) and retry.retryable


@pytest.mark.parametrize("path, query", [("/json/a%00b", b""), ("/json/a", b"owner=x%00"),
                                         ("/json/a", b"owner=\x00")])
def test_nul_in_a_path_or_query_is_a_400(path, query):
    asgi = app_with(None)

    async def get(path: str, query: bytes):
        from urllib.parse import unquote
        scope_path = unquote(path)
        sent = []
        scope = {"type": "http", "method": "GET", "path": scope_path, "raw_path": path.encode(),
                 "query_string": query, "headers": [], "http_version": "1.1", "scheme": "http",
                 "server": ("t", 80), "client": ("t", 1), "root_path": ""}

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            sent.append(message)

        await asgi(scope, receive, send)
        start = next(m for m in sent if m["type"] == "http.response.start")
        return start["status"], b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")

    status, body = asyncio.run(get(path, query))
    assert status == 400 and "NUL" in json.loads(body)["reason"]
    assert asyncio.run(get("/json/a", b"owner=x"))[0] == 200


def test_a_token_whose_subject_holds_nul_or_a_lone_surrogate_is_refused():
    auth = Authenticator(ServiceSettings(auth_enabled=True, auth_jwt_secret=SECRET))
    for sub in ("al\x00ice", "\ud800"):
        raw = jwt.encode({"sub": sub}, SECRET, "HS256")
        with pytest.raises(AuthenticationError, match="NUL character or is not valid Unicode"):
            auth.role_of("Bearer " + raw)
    assert auth.role_of("Bearer " + jwt.encode({"sub": "ünï"}, SECRET, "HS256")) == "ünï"


def test_a_partial_resend_whose_messages_do_not_pass_the_stored_id_is_a_400():
    # The header says up to 100, the messages stop at 4, 4 is stored: was an IndexError.
    batch = pb.MessageBatch(messages=[pb.SingleMessage(sequence_id=i) for i in (3, 4)]).SerializeToString()
    with pytest.raises(BadRequest, match="no message in the batch is"):
        drop_persisted(batch, 4)
    with pytest.raises(BadRequest, match="not a valid MessageBatch"):
        drop_persisted(b"\xff\xff\xff", 4)
