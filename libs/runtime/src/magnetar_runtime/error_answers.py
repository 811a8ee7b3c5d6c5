"""How a service answers an error: in the request's format (magnetar_protocol.wire),
counted in ``magnetar_request_errors_total``.  Its own module so that the app, the auth
middleware, the body limits and the in-process RPC share it without importing each
other."""

from __future__ import annotations

import logging

import asyncpg
from prometheus_client import Counter
from starlette.requests import Request
from starlette.responses import Response

from magnetar_protocol.errors import BadRequest, MagnetarError, PersistenceError, UnknownError
from magnetar_protocol.wire import encode_error

log = logging.getLogger("magnetar.app")

REQUEST_ERRORS = Counter(
    "magnetar_request_errors_total", "Requests answered with an error", ["code"]
)


def error_body(exc: MagnetarError, request_content_type: str) -> tuple[str, bytes]:
    """An error answered in the request's own format: protobuf ``Error`` or JSON."""
    REQUEST_ERRORS.labels(code=type(exc).__name__).inc()
    return encode_error(exc, request_content_type)


def error_response(exc: MagnetarError, request: Request) -> Response:
    media_type, body = error_body(exc, request.headers.get("content-type", ""))
    return Response(body, exc.http_status, media_type=media_type)


def as_magnetar_error(exc: BaseException) -> MagnetarError:
    if isinstance(exc, MagnetarError):
        return exc
    if isinstance(exc, asyncpg.DataError):
        return refused_data(exc)
    if isinstance(exc, (asyncpg.PostgresConnectionError, asyncpg.InterfaceError, OSError)):
        return PersistenceError(f"database unavailable: {exc}")
    return UnknownError(f"internal error: {type(exc).__name__}: {exc}")


def refused_data(exc: asyncpg.DataError) -> BadRequest:
    """A value PostgreSQL refused (out of range, NUL, not a number): the client's fault,
    and permanent, so 400 and not a retryable 503.  The last line behind the edge checks
    (magnetar_protocol.validate): the reason names the error class, never the SQL."""
    log.warning("the database refused a value the edge checks let through: %s: %s",
                type(exc).__name__, exc)
    return BadRequest(f"a value in the request is out of range or not storable "
                      f"({type(exc).__name__}); check ids (< 2^63), counts (< 2^31) and "
                      "strings (no NUL)")


def write_failure(exc: Exception, what: str) -> MagnetarError:
    """The error for a failed database write: 400 when PostgreSQL refused a value in it
    (permanent; retrying cannot help), else a retryable PersistenceError naming ``what``."""
    if isinstance(exc, asyncpg.DataError):
        return refused_data(exc)
    return PersistenceError(f"{what}: {exc}")
