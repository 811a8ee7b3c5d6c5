"""HTTP/protobuf transport: the one place the client talks to the network, and the
seam tests substitute (as httpx's transports are)."""

from __future__ import annotations

import asyncio

import aiohttp
from google.protobuf.message import DecodeError, Message

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import ConnectError, UnknownError, error_for_code

PROTOBUF = "application/x-protobuf"


class Transport:
    """POST a protobuf request, return the parsed response or raise the service's error."""

    def __init__(self, auth_token: str | None = None, connections: int = 64):
        self._headers = {"content-type": PROTOBUF}
        if auth_token:
            self._headers["authorization"] = f"Bearer {auth_token}"
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._connections, force_close=False),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
            )
        return self._session

    async def call(self, base_url: str, path: str, request: Message, response_type: type[Message],
                   timeout: float = 30.0) -> Message:
        url = base_url.rstrip("/") + path
        try:
            async with self._http().post(url, data=request.SerializeToString(), headers=self._headers,
                                         timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                body = await resp.read()
                status = resp.status
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise ConnectError(f"{url}: no answer ({type(exc).__name__}: {exc})") from None
        if status == 200:
            return response_type.FromString(body)
        try:
            err = pb.Error.FromString(body)
        except DecodeError:
            raise UnknownError(f"{url}: HTTP {status}: {body[:200]!r}") from None
        raise error_for_code(err.code, err.message)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
