"""HTTP/protobuf transport: the one place the client touches the network, and the seam
unit tests substitute (as httpx's transports are).

Anything with ``async call(url, path, request, response_type, timeout=None)`` and
``async close()`` can stand in for :class:`Transport`.
"""

from __future__ import annotations

import asyncio

import aiohttp
from google.protobuf.message import DecodeError, Message

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import (
    AuthenticationError,
    AuthorizationError,
    BadRequest,
    ConnectError,
    MagnetarError,
    MessageTooBig,
    NotFound,
    ServiceNotReady,
    TooManyRequests,
    UnknownError,
    error_for_code,
)

PROTOBUF = "application/x-protobuf"

# For answers without a protobuf Error body (a proxy, a load balancer, a crashed worker):
# the HTTP status alone says what kind of failure it was.
_BY_STATUS: dict[int, type[MagnetarError]] = {
    400: BadRequest, 401: AuthenticationError, 403: AuthorizationError, 404: NotFound,
    413: MessageTooBig, 431: BadRequest,
    429: TooManyRequests, 502: ServiceNotReady, 503: ServiceNotReady, 504: ServiceNotReady,
}


def decode_error(status: int, body: bytes, content_type: str, where: str) -> MagnetarError:
    """The exception a non-200 answer stands for: the service's ``magnetar.v1.Error``
    when the body is one, else a class chosen by the HTTP status."""
    if content_type.split(";")[0].strip().lower() == PROTOBUF:
        try:
            err = pb.Error.FromString(body)
        except DecodeError:
            pass
        else:
            return error_for_code(err.code, err.message or f"{where}: HTTP {status}")
    cls = _BY_STATUS.get(status, UnknownError)
    text = body[:200].decode("utf-8", "replace")
    return cls(f"{where}: HTTP {status}: {text}")


class Transport:
    """POSTs protobuf requests over one pooled aiohttp session (made on first use, in
    the event loop that uses it) and returns the parsed answer or raises its error."""

    def __init__(self, auth_token: str | None = None, connections: int = 64,
                 connect_timeout_s: float = 5.0) -> None:
        self._headers = {"Content-Type": PROTOBUF, "Accept": PROTOBUF}
        if auth_token:
            self._headers["Authorization"] = f"Bearer {auth_token}"
        self._connections = connections
        self._connect_timeout_s = connect_timeout_s
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._connections),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._connect_timeout_s),
                skip_auto_headers=("User-Agent",),
            )
        return self._session

    async def call(self, url: str, path: str, request: Message, response_type: type[Message],
                   timeout: float | None = 30.0) -> Message:
        """POST ``request`` to ``url + path``; ``timeout`` bounds the whole exchange."""
        where = url.rstrip("/") + path
        try:
            async with self._http().post(
                    where, data=request.SerializeToString(), headers=self._headers,
                    timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                body = await resp.read()
                status = resp.status
                content_type = resp.headers.get("Content-Type", "")
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            # No answer: the request may or may not have been applied; callers retry
            # only what is safe to repeat (sends carry sequence ids for that).
            raise ConnectError(f"{where}: no answer ({type(exc).__name__}: {exc})") from None
        if status == 200:
            try:
                return response_type.FromString(body)
            except DecodeError as exc:
                raise UnknownError(f"{where}: unreadable answer: {exc}") from None
        raise decode_error(status, body, content_type, where)

    async def close(self) -> None:
        """Close the connection pool."""
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
