"""Sessions: one per broker URL, playing the part of a Pulsar connection.

A session is opened on first use, kept alive every ``keepalive_interval_ms`` by a
background task, forgotten when the broker no longer knows it (the next user opens a
new one and re-creates its producers and consumers), and closed with the client.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import MagnetarError, SessionNotFound

log = logging.getLogger("magnetar.client")

CLIENT_NAME = "magnetar-python"


@dataclass
class Session:
    """One open session: its broker, id and keepalive task."""
    url: str
    session_id: str
    keepalive_s: float
    task: asyncio.Task | None = field(default=None, repr=False)


class Sessions:
    """The client's sessions, by broker URL.  Runs on the client's event loop."""

    def __init__(self, call, operation_timeout_s: float, client_name: str = CLIENT_NAME):
        self._call = call  # (url, path, request, response_type, timeout) -> response
        self._timeout_s = operation_timeout_s
        self._client_name = client_name
        self._by_url: dict[str, Session] = {}
        self._opening: dict[str, asyncio.Lock] = {}
        self.closed = False

    def current(self, url: str) -> Session | None:
        """The open session for ``url``, if any."""
        return self._by_url.get(url)

    async def get(self, url: str) -> str:
        """The session id for ``url``, opening a session if there is none."""
        session = self._by_url.get(url)
        if session is not None:
            return session.session_id
        # One open per URL at a time: partitions reconnecting together share it.
        lock = self._opening.setdefault(url, asyncio.Lock())
        async with lock:
            session = self._by_url.get(url)
            if session is None:
                reply = await self._call(
                    url, "/v1/sessions/open", pb.OpenSessionRequest(client_name=self._client_name),
                    pb.OpenSessionResponse, self._timeout_s)
                interval = (reply.keepalive_interval_ms or 2000) / 1000
                session = Session(url, reply.session_id, interval)
                session.task = asyncio.create_task(self._keepalive(session),
                                                   name=f"magnetar-keepalive {url}")
                self._by_url[url] = session
            return session.session_id

    def drop(self, url: str, session_id: str) -> None:
        """Forget a session the broker no longer knows (only if it is still the current
        one: another partition may already have replaced it)."""
        session = self._by_url.get(url)
        if session is not None and session.session_id == session_id:
            del self._by_url[url]
            if session.task is not None:
                session.task.cancel()

    async def _keepalive(self, session: Session) -> None:
        while not self.closed:
            await asyncio.sleep(session.keepalive_s)
            started = time.monotonic()
            try:
                await self._call(
                    session.url, "/v1/sessions/keepalive",
                    pb.KeepAliveRequest(session_id=session.session_id), pb.KeepAliveResponse,
                    max(session.keepalive_s, 1.0))
            except SessionNotFound:
                self.drop(session.url, session.session_id)
                return
            except MagnetarError as exc:
                # The broker may be restarting; its objects re-connect on their own.
                log.debug("keepalive to %s failed after %.2fs: %s", session.url,
                          time.monotonic() - started, exc)

    async def close(self) -> None:
        """Stop the keepalives and close every session."""
        self.closed = True
        sessions, self._by_url = list(self._by_url.values()), {}
        for session in sessions:
            if session.task is not None:
                session.task.cancel()
        await asyncio.gather(*(self._close_one(s) for s in sessions))

    async def _close_one(self, session: Session) -> None:
        try:
            await self._call(
                session.url, "/v1/sessions/close",
                pb.CloseSessionRequest(session_id=session.session_id), pb.CloseSessionResponse, 2.0)
        except MagnetarError:
            pass  # it lapses on its own
