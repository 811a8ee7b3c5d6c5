"""The HTTP transport: request shape, answers, and error mapping (against a local
aiohttp server: real HTTP, no broker)."""

import asyncio
import socket

import aiohttp.abc
import pytest
from aiohttp import web

import magnetar
from magnetar._transport import PROTOBUF, Transport, decode_error
from magnetar_protocol import errors
from magnetar_protocol import magnetar_pb2 as pb
from tests.blackhole import blackhole


@pytest.mark.parametrize("code,cls", [
    (pb.PRODUCER_BUSY, magnetar.ProducerBusy), (pb.PRODUCER_FENCED, magnetar.ProducerFenced),
    (pb.TRANSACTION_CONFLICT, magnetar.TransactionConflict), (pb.TOPIC_NOT_FOUND, magnetar.TopicNotFound),
    (pb.NOT_OWNER, errors.NotOwner), (pb.SESSION_NOT_FOUND, errors.SessionNotFound),
    (pb.MESSAGE_TOO_BIG, magnetar.MessageTooBig), (pb.EXPIRED_TRANSACTION, magnetar.ExpiredTransactionError),
])
def test_a_protobuf_error_body_becomes_its_class(code, cls):
    body = pb.Error(code=code, message="why").SerializeToString()
    exc = decode_error(409, body, "application/x-protobuf; charset=x", "http://b/v1/x")
    assert type(exc) is cls
    assert exc.message == "why" and exc.code == code


@pytest.mark.parametrize("status,cls", [
    (400, errors.BadRequest), (401, magnetar.AuthenticationError), (403, magnetar.AuthorizationError),
    (404, errors.NotFound), (429, errors.TooManyRequests), (502, errors.ServiceNotReady),
    (503, errors.ServiceNotReady), (500, errors.UnknownError), (418, errors.UnknownError),
])
def test_an_answer_without_a_protobuf_error_maps_by_status(status, cls):
    exc = decode_error(status, b'{"detail": "nope"}', "application/json", "http://b/v1/x")
    assert type(exc) is cls
    assert "nope" in exc.message and str(status) in exc.message


def test_an_unreadable_protobuf_error_maps_by_status():
    assert type(decode_error(503, b"\xff\xff\xff", PROTOBUF, "w")) is errors.ServiceNotReady


@pytest.fixture
async def server():
    seen = []

    async def lookup(request):
        seen.append((request.path, dict(request.headers), await request.read()))
        req = pb.LookupRequest.FromString(await request.read())
        return web.Response(body=pb.LookupResponse(topic=req.topic, broker_url="http://owner").SerializeToString(),
                            content_type=PROTOBUF)

    async def busy(request):
        return web.Response(status=409, content_type=PROTOBUF,
                            body=pb.Error(code=pb.PRODUCER_BUSY, message="taken").SerializeToString())

    app = web.Application()
    app.router.add_post("/v1/topics/lookup", lookup)
    app.router.add_post("/v1/producers/create", busy)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}", seen
    await runner.cleanup()


async def test_posts_protobuf_with_the_bearer_token(server):
    url, seen = server
    transport = Transport(auth_token="s3cret")
    try:
        reply = await transport.call(url, "/v1/topics/lookup", pb.LookupRequest(topic="a/b/c"),
                                     pb.LookupResponse)
    finally:
        await transport.close()
    assert reply.broker_url == "http://owner" and reply.topic == "a/b/c"
    path, headers, body = seen[0]
    assert headers["Content-Type"] == PROTOBUF
    assert headers["Authorization"] == "Bearer s3cret"
    assert pb.LookupRequest.FromString(body).topic == "a/b/c"


async def test_no_token_sends_no_authorization_header(server):
    url, seen = server
    transport = Transport()
    try:
        await transport.call(url, "/v1/topics/lookup", pb.LookupRequest(topic="t"), pb.LookupResponse)
    finally:
        await transport.close()
    assert "Authorization" not in seen[0][1]


async def test_an_error_answer_raises_the_services_exception(server):
    url, _ = server
    transport = Transport()
    try:
        with pytest.raises(magnetar.ProducerBusy, match="taken"):
            await transport.call(url, "/v1/producers/create", pb.CreateProducerRequest(),
                                 pb.CreateProducerResponse)
    finally:
        await transport.close()


async def test_no_listener_is_a_connect_error():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    transport = Transport()
    try:
        with pytest.raises(magnetar.ConnectError):
            await transport.call(f"http://127.0.0.1:{port}", "/v1/topics/lookup",
                                 pb.LookupRequest(topic="t"), pb.LookupResponse, timeout=5)
    finally:
        await transport.close()


async def test_an_address_that_never_answers_fails_after_the_connect_timeout_not_the_total():
    """Issue 19: a per-request timeout used to replace the connect timeout, so a connect
    to a deleted pod's address hung for the whole operation timeout (30 s)."""
    transport = Transport(connect_timeout_s=0.2)
    try:
        with blackhole() as port:
            # A hang would end at wait_for's 10 s, far before the request's 600 s.
            with pytest.raises(magnetar.ConnectError, match="cannot connect"):
                await asyncio.wait_for(transport.call(
                    f"http://127.0.0.1:{port}", "/v1/topics/lookup", pb.LookupRequest(topic="t"),
                    pb.LookupResponse, timeout=600), 10)
    finally:
        await transport.close()


async def test_service_calls_keep_a_connect_timeout_too():
    from magnetar_runtime.rpc import RpcClient

    rpc = RpcClient(timeout_s=600, connect_timeout_s=0.2)
    try:
        with blackhole() as port:
            with pytest.raises(magnetar.ConnectError):
                await asyncio.wait_for(rpc.call(f"http://127.0.0.1:{port}", "/v1/topics/lookup",
                                                pb.LookupRequest(topic="t"), pb.LookupResponse), 10)
    finally:
        await rpc.close()


class _Names(aiohttp.abc.AbstractResolver):
    """Resolves every name to 127.0.0.1 and counts the lookups (a DNS server's view)."""

    def __init__(self):
        self.lookups = 0

    async def resolve(self, host, port=0, family=socket.AF_INET):
        self.lookups += 1
        return [{"hostname": host, "host": "127.0.0.1", "port": port, "family": socket.AF_INET,
                 "proto": 0, "flags": socket.AI_NUMERICHOST}]

    async def close(self):
        pass


async def test_a_failed_connect_forgets_the_names_address():
    """A replaced pod keeps its DNS name but not its IP: the IP cached for the name (10 s
    by default in aiohttp) must not be tried again after it failed."""
    names = _Names()
    transport = Transport(connect_timeout_s=0.2, resolver=names)
    try:
        with blackhole() as port:
            for attempt in (1, 2):
                with pytest.raises(magnetar.ConnectError):
                    await transport.call(f"http://broker-0.test:{port}", "/v1/topics/lookup",
                                         pb.LookupRequest(topic="t"), pb.LookupResponse, timeout=5)
                assert names.lookups == attempt
    finally:
        await transport.close()
