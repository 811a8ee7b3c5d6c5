"""FastPath: protobuf POSTs go straight to their endpoint (still authenticated); every
other request goes through the app's middleware stack."""

import jwt

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_runtime.app import FastPath, create_app, proto_route
from magnetar_runtime.auth import Authenticator, current_role
from magnetar_runtime.settings import ServiceSettings

SECRET = "a-secret-of-at-least-thirty-two-bytes"


async def call(asgi, method: str, path: str, body: bytes = b"", token: str | None = None):
    headers = [(b"content-type", b"application/x-protobuf")]
    if token:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    scope = {"type": "http", "method": method, "path": path, "raw_path": path.encode(),
             "query_string": b"", "headers": headers, "http_version": "1.1", "scheme": "http",
             "server": ("test", 80), "client": ("test", 1), "root_path": ""}
    sent = []

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        sent.append(message)

    await asgi(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def build(auth_enabled: bool):
    settings = ServiceSettings(auth_enabled=auth_enabled, auth_jwt_secret=SECRET)
    app = create_app("test", auth=Authenticator(settings))
    through_stack = []

    @app.middleware("http")
    async def record(request, call_next):
        through_stack.append(request.url.path)
        return await call_next(request)

    async def echo(msg: pb.TxnId) -> pb.TxnId:
        return pb.TxnId(most_bits=msg.most_bits, least_bits=len(current_role()))

    proto_route(app, "/v1/echo", pb.TxnId, echo)
    return FastPath(app), through_stack


async def test_protobuf_routes_skip_the_stack_and_others_do_not():
    asgi, through_stack = build(auth_enabled=False)
    status, body = await call(asgi, "POST", "/v1/echo", pb.TxnId(most_bits=7).SerializeToString())
    assert status == 200 and pb.TxnId.FromString(body).most_bits == 7
    assert through_stack == []  # no middleware ran
    status, _ = await call(asgi, "GET", "/healthz")
    assert status == 200 and through_stack == ["/healthz"]


async def test_the_fast_path_is_authenticated_like_the_app():
    asgi, _ = build(auth_enabled=True)
    status, body = await call(asgi, "POST", "/v1/echo", b"")
    assert status == 401 and pb.Error.FromString(body).code == pb.AUTHENTICATION_ERROR
    token = jwt.encode({"sub": "alice"}, SECRET, algorithm="HS256")
    status, body = await call(asgi, "POST", "/v1/echo", b"", token=token)
    assert status == 200 and pb.TxnId.FromString(body).least_bits == len("alice")


def batch(*calls: tuple[str, bytes]) -> bytes:
    return pb.BatchRequest(calls=[pb.BatchCall(path=p, body=b) for p, b in calls]).SerializeToString()


async def test_a_batch_runs_each_call_and_answers_each_in_order():
    asgi, _ = build(auth_enabled=False)
    status, body = await call(asgi, "POST", "/v1/batch", batch(
        ("/v1/echo", pb.TxnId(most_bits=1).SerializeToString()),
        ("/v1/echo", b"\xff\xff"),  # not a TxnId: that call alone fails
        ("/v1/nowhere", b""),
        ("/v1/batch", b""),  # batches do not nest
        ("/v1/echo", pb.TxnId(most_bits=5).SerializeToString())))
    assert status == 200
    results = pb.BatchResponse.FromString(body).results
    assert [r.status for r in results] == [200, 400, 400, 400, 200]
    assert [pb.TxnId.FromString(results[i].body).most_bits for i in (0, 4)] == [1, 5]
    assert pb.Error.FromString(results[1].body).code == pb.BAD_REQUEST
    assert "not a protobuf route" in pb.Error.FromString(results[2].body).message


async def test_a_batch_is_authenticated_and_its_calls_run_as_the_caller():
    asgi, _ = build(auth_enabled=True)
    status, _ = await call(asgi, "POST", "/v1/batch", batch(("/v1/echo", b"")))
    assert status == 401
    token = jwt.encode({"sub": "bob"}, SECRET, algorithm="HS256")
    status, body = await call(asgi, "POST", "/v1/batch", batch(("/v1/echo", b""), ("/v1/echo", b"")),
                              token=token)
    results = pb.BatchResponse.FromString(body).results
    assert status == 200 and [pb.TxnId.FromString(r.body).least_bits for r in results] == [3, 3]
