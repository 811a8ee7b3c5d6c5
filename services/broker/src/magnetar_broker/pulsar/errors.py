"""The ERROR frame for a failed request (the ServerError mapping is pure and lives in
magnetar_protocol.pulsar.errors)."""

from __future__ import annotations

from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.errors import MagnetarError
from magnetar_protocol.pulsar.errors import server_error


def message_of(exc: BaseException) -> str:
    return exc.message if isinstance(exc, MagnetarError) else str(exc) or type(exc).__name__


def error_frame(request_id: int, exc: BaseException) -> pb.CommandError:
    return pb.CommandError(request_id=request_id, error=server_error(exc), message=message_of(exc))
