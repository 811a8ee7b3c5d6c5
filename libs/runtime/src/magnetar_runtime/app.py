"""The app factory every service uses: health, readiness, metrics, error mapping.

Services add protobuf routes with :func:`proto_route` (plain Starlette routes: the hot
paths skip FastAPI's validation layer, ~60 µs a request) and JSON routes with FastAPI.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from fastapi import FastAPI
from google.protobuf.message import DecodeError, Message
from prometheus_client import CONTENT_TYPE_LATEST, Histogram, generate_latest
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import (
    BadRequest,
    MagnetarError,
    UnknownError,
    to_wire,
)
from magnetar_protocol.validate import check_message
from magnetar_protocol.wire import PROTOBUF
from magnetar_runtime.auth import Authenticator, AuthMiddleware
from magnetar_runtime.error_answers import as_magnetar_error, error_response
from magnetar_storage.db import create_pool
from magnetar_storage.listeners import publish_listeners

M = TypeVar("M", bound=Message)  # a route's request message

log = logging.getLogger("magnetar.app")

def create_app(
    name: str,
    *,
    lifespan: Callable[[FastAPI], AsyncIterator[None]] | None = None,
    ready: Callable[[], Awaitable[bool]] | None = None,
    auth: Authenticator | None = None,
) -> FastAPI:
    """A FastAPI app with /healthz, /readyz and /metrics, Magnetar error mapping and,
    when ``auth`` is enabled, bearer-token authentication of every other path."""

    @asynccontextmanager
    async def _lifespan(app: FastAPI):
        if lifespan is None:
            yield
        else:
            async with asynccontextmanager(lifespan)(app):
                yield

    app = FastAPI(title=f"Magnetar {name}", lifespan=_lifespan)
    app.add_middleware(RejectNulInUrl)
    if auth is not None:
        app.state.auth = auth
        app.add_middleware(AuthMiddleware, authenticator=auth)

    @app.exception_handler(MagnetarError)
    async def _magnetar_error(request: Request, exc: MagnetarError) -> Response:
        return error_response(exc, request)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict:
        return {"status": "ok", "service": name}

    @app.get("/readyz", include_in_schema=False)
    async def readyz() -> Response:
        ok = await ready() if ready else True
        return JSONResponse({"ready": ok, "service": name}, status_code=200 if ok else 503)

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return app


class RejectNulInUrl:
    """400 for a path or query string holding a NUL character (``%00``): no name, owner
    or page token may hold one, and PostgreSQL text cannot store one.  Checked once
    here, before any route (protobuf routes check their bodies' strings themselves)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and (
                "\x00" in scope["path"] or b"%00" in scope["query_string"]
                or b"\x00" in scope["query_string"]):
            exc = BadRequest(f"{scope['method']} {scope['path']!r}: the path or query string "
                             "contains a NUL character (%00), which no name, role or token may hold")
            headers = dict(scope.get("headers") or ())
            response = error_response(exc, _HeadersOnly(headers))
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class _HeadersOnly:
    """Enough of a Request for error_response: its content type."""

    def __init__(self, headers: dict[bytes, bytes]) -> None:
        self.headers = {"content-type": headers.get(b"content-type", b"").decode("latin-1")}


BATCH_PATH = "/v1/batch"
MAX_BATCH_CALLS = 1000

BATCH_CALLS = Histogram(
    "magnetar_batch_calls", "Calls carried by one /v1/batch request",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 1000))


# (path, request type, handler): one protobuf route.
ProtoRoute = tuple[str, type[Any], Callable[[Any], Awaitable[Message]]]


def proto_routes(app: FastAPI, routes: Iterable[ProtoRoute]) -> None:
    """``proto_route`` for each of ``routes``."""
    for path, request_type, handler in routes:
        proto_route(app, path, request_type, handler)


def proto_route(
    app: FastAPI,
    path: str,
    request_type: type[M],
    handler: Callable[[M], Awaitable[Message]],
) -> None:
    """POST ``path``: parse the body as ``request_type``, answer the handler's message.
    The route can also be called inside a ``/v1/batch`` request (added with the first
    protobuf route)."""
    type_name = request_type.DESCRIPTOR.full_name

    async def invoke(body: bytes) -> tuple[int, bytes]:
        """The call itself: (HTTP status, response or Error bytes)."""
        try:
            try:
                msg = request_type.FromString(body)
            except (DecodeError, RuntimeWarning) as exc:
                raise BadRequest(f"{path}: body is not a valid {type_name}: {exc}") from None
            check_message(msg)  # out-of-range ids, NULs, unknown enums: 400 here, not deep inside
            reply = await handler(msg)
            return 200, reply.SerializeToString()
        except Exception as exc:  # every failure becomes a wire error, never a 500 page
            err = as_magnetar_error(exc)
            if isinstance(err, UnknownError):
                log.exception("%s failed", path)
            return err.http_status, to_wire(err).SerializeToString()

    async def endpoint(request: Request) -> Response:
        try:
            body = await request.body()
        except Exception as exc:  # the client went away mid-body
            err = as_magnetar_error(exc)
            return Response(to_wire(err).SerializeToString(), err.http_status, media_type=PROTOBUF)
        status, answer = await invoke(body)
        return Response(answer, status, media_type=PROTOBUF)

    app.router.routes.append(Route(path, endpoint, methods=["POST"]))

    async def direct(scope, receive, send) -> None:
        response = await endpoint(Request(scope, receive))
        await response(scope, receive, send)

    # The same endpoint for FastPath, behind the same authentication as the app's.
    auth = getattr(app.state, "auth", None)
    fast = getattr(app.state, "fast_routes", None)
    if fast is None:
        fast = app.state.fast_routes = {}
    fast[path] = AuthMiddleware(direct, auth) if auth is not None else direct

    # The handler itself, for calls from inside this process (rpc.RpcClient.serve_locally).
    handlers = getattr(app.state, "proto_handlers", None)
    if handlers is None:
        handlers = app.state.proto_handlers = {}
    handlers.setdefault(path, handler)

    calls = getattr(app.state, "proto_calls", None)
    if calls is None:
        calls = app.state.proto_calls = {}
        proto_route(app, BATCH_PATH, pb.BatchRequest, lambda req: run_batch(calls, req))
    if path != BATCH_PATH:
        calls[path] = invoke


async def run_batch(calls: dict, request: pb.BatchRequest) -> pb.BatchResponse:
    """Every call of a /v1/batch request, concurrently (each in its own task, with the
    caller's identity); results in the calls' order."""
    if len(request.calls) > MAX_BATCH_CALLS:
        raise BadRequest(f"{BATCH_PATH}: {len(request.calls)} calls in one batch; "
                         f"send at most {MAX_BATCH_CALLS}")
    BATCH_CALLS.observe(len(request.calls))

    async def one(call: pb.BatchCall) -> pb.BatchResult:
        invoke = calls.get(call.path)
        if invoke is None:
            err = BadRequest(f"{BATCH_PATH}: {call.path!r} is not a protobuf route of this "
                             "service (batches cannot nest)")
            return pb.BatchResult(status=err.http_status, body=to_wire(err).SerializeToString())
        status, body = await invoke(call.body)
        return pb.BatchResult(status=status, body=body)

    if len(request.calls) == 1:
        return pb.BatchResponse(results=[await one(request.calls[0])])
    return pb.BatchResponse(results=await asyncio.gather(*(one(c) for c in request.calls)))


class FastPath:
    """The ASGI entry point services run: a POST to a protobuf route goes straight to its
    endpoint (one dict lookup, then authentication) instead of through FastAPI's
    middleware stack and the router's regex scan, which a profile put at a third of a
    service's time on the transaction path.  Everything else (JSON, probes, lifespan)
    goes to the app unchanged."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            fast = getattr(self.app.state, "fast_routes", None)
            endpoint = fast.get(scope["path"]) if fast else None
            if endpoint is not None:
                await endpoint(scope, receive, send)
                return
        await self.app(scope, receive, send)


def service_app(name: str, settings, make_service, add_routes) -> FastAPI:
    """The app of a service with a database pool and a ``service`` object that has
    ``start()``, ``stop()`` and ``ready``: the pool and service live as long as the app,
    routes are added once the service exists, /readyz follows ``service.ready``.
    ``make_service(pool, auth)`` gets the app's Authenticator."""
    state: dict = {}
    auth = Authenticator(settings)

    async def lifespan(app: FastAPI):
        pool = await create_pool(settings.database_url, max_size=settings.db_pool_size)
        # Before the service registers itself live, so no lookup finds it without them.
        await publish_listeners(pool, settings.url, settings.listeners)
        service = make_service(pool, auth)
        state["service"] = service
        add_routes(app, service)
        await service.start()
        try:
            yield
        finally:
            await service.stop()
            await pool.close()

    async def ready() -> bool:
        service = state.get("service")
        return bool(service and service.ready)

    return create_app(name, lifespan=lifespan, ready=ready, auth=auth)
