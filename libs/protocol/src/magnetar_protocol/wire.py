"""The transport core of Magnetar's protobuf-over-HTTP calls, shared by the client
(magnetar/_transport.py), the services' RPC (magnetar_runtime/rpc.py) and the services'
error answers (magnetar_runtime/error_answers.py): the content type, how an error is
written into and read back from an answer's body, and the connect-timeout rule.  Pure
(protobuf and JSON only): each caller keeps its own HTTP session, for the reasons in
docs/architecture.md ("One transport core").
"""

from __future__ import annotations

import json

from google.protobuf.message import DecodeError

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import (
    AuthenticationError,
    AuthorizationError,
    BadRequest,
    MagnetarError,
    MessageTooBig,
    NotFound,
    ServiceNotReady,
    TooManyRequests,
    UnknownError,
    error_for_code,
    to_wire,
)

PROTOBUF = "application/x-protobuf"
JSON = "application/json"

# For answers without a protobuf Error body (a proxy, a load balancer, a crashed worker):
# the HTTP status alone says what kind of failure it was.
_BY_STATUS: dict[int, type[MagnetarError]] = {
    400: BadRequest, 401: AuthenticationError, 403: AuthorizationError, 404: NotFound,
    413: MessageTooBig, 431: BadRequest,
    429: TooManyRequests, 502: ServiceNotReady, 503: ServiceNotReady, 504: ServiceNotReady,
}


def _all_classes() -> dict[str, type[MagnetarError]]:
    found, pending = {}, [MagnetarError]
    while pending:
        cls = pending.pop()
        found[cls.__name__] = cls
        pending.extend(cls.__subclasses__())
    return found


_BY_NAME = _all_classes()


def is_protobuf(content_type: str) -> bool:
    return content_type.split(";")[0].strip().lower() == PROTOBUF


def encode_error(exc: MagnetarError, request_content_type: str) -> tuple[str, bytes]:
    """An error answered in the request's own format: protobuf ``Error`` or JSON
    ``{"reason", "code"}``; (content type, body)."""
    if request_content_type.startswith(PROTOBUF):
        return PROTOBUF, to_wire(exc).SerializeToString()
    return JSON, json.dumps({"reason": exc.message, "code": type(exc).__name__}).encode()


def decode_error(status: int, body: bytes, content_type: str, where: str) -> MagnetarError:
    """The exception a non-200 answer stands for: the service's ``magnetar.v1.Error``
    when the body is one, else a class chosen by the HTTP status."""
    if is_protobuf(content_type):
        try:
            err = pb.Error.FromString(body)
        except DecodeError:
            pass
        else:
            return error_for_code(err.code, err.message or f"{where}: HTTP {status}")
    cls = _BY_STATUS.get(status, UnknownError)
    text = body[:200].decode("utf-8", "replace")
    return cls(f"{where}: HTTP {status}: {text}")


def decode_json_error(status: int, body: bytes, where: str) -> MagnetarError:
    """The exception a JSON error answer (``{"reason", "code"}``, encode_error's JSON
    form: the code is the class name) stands for; by HTTP status when the name is unknown."""
    try:
        answer = json.loads(body)
        reason, name = str(answer["reason"]), str(answer.get("code", ""))
    except (ValueError, KeyError, TypeError):
        return decode_error(status, body, "", where)
    cls = _BY_NAME.get(name) or _BY_STATUS.get(status, UnknownError)
    return cls(reason)


def connect_timeout(connect_s: float, total_s: float | None) -> float:
    """A request's connect timeout: kept even when the request sets its own total (an
    address that sends no SYN-ACK fails in seconds, issue 19), never above the total."""
    return connect_s if total_s is None else min(connect_s, total_s)
