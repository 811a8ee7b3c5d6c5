"""HTTP/protobuf transport: the one place the client touches the network, and the seam
unit tests substitute (as httpx's transports are).

Anything with ``async call(url, path, request, response_type, timeout=None)`` and
``async close()`` can stand in for :class:`Transport`.
"""

from __future__ import annotations

import asyncio
import ssl as _ssl

import aiohttp
from google.protobuf.message import DecodeError, Message
from yarl import URL

from magnetar_protocol.errors import ConnectError, TlsError, UnknownError

# The codec shared with the services' RPC; re-exported for the client's other modules.
from magnetar_protocol.wire import PROTOBUF, connect_timeout, decode_error

__all__ = ["CONNECT_TIMEOUT_S", "PROTOBUF", "Transport", "decode_error"]

# A connect that gets no SYN-ACK (the cached address of a deleted pod, a dead host)
# fails after this instead of after the whole request's timeout (issue 19: 30.1 s
# measured on Kubernetes with only a total timeout, 5.0 s with this one kept).
CONNECT_TIMEOUT_S = 5.0


class Transport:
    """POSTs protobuf requests over one pooled aiohttp session (made on first use, in
    the event loop that uses it) and returns the parsed answer or raises its error."""

    def __init__(self, auth_token: str | None = None, connections: int = 64,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S, resolver=None,
                 ssl: _ssl.SSLContext | None = None) -> None:
        # ``resolver``: an aiohttp resolver (e.g. aiohttp.AsyncResolver); default aiohttp's.
        # ``ssl``: for https:// services (magnetar_protocol.tlsctx); default: the system's CAs.
        self._ssl = ssl
        self._headers = {"Content-Type": PROTOBUF, "Accept": PROTOBUF}
        if auth_token:
            self._headers["Authorization"] = f"Bearer {auth_token}"
        self._connections = connections
        self._connect_timeout_s = connect_timeout_s
        self._resolver = resolver
        self._session: aiohttp.ClientSession | None = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._connections, resolver=self._resolver,
                                               ssl=self._ssl or True),
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
                    timeout=self._timeout(timeout)) as resp:
                body = await resp.read()
                status = resp.status
                content_type = resp.headers.get("Content-Type", "")
        except (aiohttp.ClientConnectorCertificateError, aiohttp.ClientConnectorSSLError) as exc:
            # Not trusted (another CA, expired, another name): no retry helps.
            raise TlsError(f"{where}: TLS handshake failed ({exc})") from None
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            # Refused, unreachable or no SYN-ACK: nothing was sent.  Forget the name's
            # resolved address too (a replaced pod has a new IP under the old name).
            self._forget_address(url)
            raise ConnectError(f"{where}: cannot connect ({type(exc).__name__}: {exc})") from None
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

    def _timeout(self, total: float | None) -> aiohttp.ClientTimeout:
        """A request's timeout: ``total`` for the exchange, and the connect timeout kept
        (a per-request ClientTimeout replaces the session's, connect timeout included)."""
        return aiohttp.ClientTimeout(total=total, sock_connect=connect_timeout(self._connect_timeout_s, total))

    def _forget_address(self, url: str) -> None:
        session = self._session
        if session is None or not isinstance(session.connector, aiohttp.TCPConnector):
            return
        parsed = URL(url)
        if parsed.host:
            session.connector.clear_dns_cache(parsed.host, parsed.port)

    async def close(self) -> None:
        """Close the connection pool."""
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
