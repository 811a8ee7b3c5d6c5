"""Service-to-service protobuf calls (the client library has its own transport).

``call`` raises the same exception classes the callee raised (wire error code), or
``ConnectError`` when the callee did not answer.  A service hosted in another's process
(the coordinator in a broker) calls that process's own routes in process, not over HTTP
(``serve_locally``).
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
from google.protobuf.message import Message

from magnetar_protocol.coalesce import Coalescer
from magnetar_protocol.errors import ConnectError, MagnetarError, UnknownError
from magnetar_protocol.wire import PROTOBUF, connect_timeout, decode_error
from magnetar_runtime import tls
from magnetar_runtime.auth import reset_role, set_role
from magnetar_runtime.error_answers import as_magnetar_error

# A call to an address that sends no SYN-ACK (a deleted pod's) fails after this rather
# than after the whole call's timeout, so a commit's fan-out looks the owner up again
# in seconds (issue 19).  Capped by the call's timeout.
CONNECT_TIMEOUT_S = 3.0
log = logging.getLogger("magnetar.rpc")


class RpcClient:
    def __init__(self, timeout_s: float = 10.0, headers: dict[str, str] | None = None,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S):
        self._timeout = aiohttp.ClientTimeout(total=timeout_s,
                                              sock_connect=connect_timeout(connect_timeout_s, timeout_s))
        # This service's own credentials (auth.Authenticator.headers()).
        self._headers = {"content-type": PROTOBUF, **(headers or {})}
        self._session: aiohttp.ClientSession | None = None
        self._coalescer = Coalescer(lambda url, path, req, rtype, _timeout: self.call(url, path, req, rtype),
                                    _decode_error)
        self._local_url: str | None = None
        self._local: dict = {}  # path -> handler(request) of this process's own routes
        self._local_role = ""

    def serve_locally(self, url: str, handlers: dict, role: str) -> None:
        """Calls to ``url`` (this process's own) for a path in ``handlers`` run the handler
        in process, as ``role`` (this service's own, which its token would prove), with the
        errors a remote call would raise."""
        self._local_url, self._local, self._local_role = url.rstrip("/"), dict(handlers), role

    async def _call_locally(self, path: str, request: Message):
        token = set_role(self._local_role)
        try:
            return await self._local[path](request)
        except MagnetarError:
            raise
        except Exception as exc:  # as the route would have answered (and logged) it
            err = as_magnetar_error(exc)
            if isinstance(err, UnknownError):
                log.exception("%s (in process) failed", path)
            raise err from exc
        finally:
            reset_role(token)

    def _is_local(self, base_url: str, path: str) -> bool:
        return path in self._local and base_url.rstrip("/") == self._local_url

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=self._timeout,
                # https:// peers are verified against this process's CA (tls.py).
                connector=aiohttp.TCPConnector(limit=64, ssl=tls.client_ssl() or True))
        return self._session

    async def call(self, base_url: str, path: str, request: Message, response_type: type[Message],
                   headers: dict[str, str] | None = None):
        """``headers``: added to this service's own for this call (the Pulsar listener
        forwards its client's token, so the callee sees that client's role)."""
        if self._local and self._is_local(base_url, path):
            return await self._call_locally(path, request)
        try:
            async with self._http().post(
                base_url.rstrip("/") + path, data=request.SerializeToString(),
                headers={**self._headers, **headers} if headers else self._headers,
            ) as resp:
                body = await resp.read()
                status = resp.status
                content_type = resp.headers.get("content-type", "")
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            raise ConnectError(f"{base_url}{path}: no answer ({type(exc).__name__}: {exc})") from None
        if status == 200:
            return response_type.FromString(body)
        raise decode_error(status, body, content_type, f"{base_url}{path}")

    async def call_coalesced(self, base_url: str, path: str, request: Message,
                             response_type: type[Message]):
        """Like :meth:`call`; calls to one URL and path that pile up behind the ones in
        flight share one ``/v1/batch`` request (magnetar_protocol.coalesce)."""
        if self._local and self._is_local(base_url, path):
            return await self._call_locally(path, request)
        return await self._coalescer.call(base_url, path, request, response_type)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _decode_error(status: int, body: bytes, where: str) -> Exception:
    # A batched call's result is always a service's own protobuf answer.
    return decode_error(status, body, PROTOBUF, where)
