"""The one mapping of an exception to Pulsar's wire: the ``ServerError`` code and message
every failed reply carries (ERROR, SEND_ERROR, a failed LOOKUP or PARTITIONED_METADATA,
the transaction commands' own error fields).  The code table is pure and lives in
magnetar_protocol.pulsar.errors; an exception that is no MagnetarError is a bug, answered
as UnknownError with what it was."""

from __future__ import annotations

from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.errors import MagnetarError, UnknownError
from magnetar_protocol.pulsar.errors import server_error


def failure(exc: BaseException) -> tuple[pb.ServerError, str]:
    """(ServerError, message) of ``exc``."""
    if not isinstance(exc, MagnetarError):
        exc = UnknownError(f"internal error: {exc!r}")
    return server_error(exc), exc.message


def message_of(exc: BaseException) -> str:
    return failure(exc)[1]


def error_frame(request_id: int, exc: BaseException) -> pb.CommandError:
    error, message = failure(exc)
    return pb.CommandError(request_id=request_id, error=error, message=message)
