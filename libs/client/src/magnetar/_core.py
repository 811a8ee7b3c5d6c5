"""Discovery, sessions and retries shared by producers, consumers and transactions."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from dataclasses import dataclass, field

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import (
    ConnectError,
    ConsumerNotFound,
    MagnetarError,
    NotOwner,
    PersistenceError,
    ProducerNotFound,
    ServiceNotReady,
    SessionNotFound,
    Timeout,
    TooManyRequests,
    TransactionCoordinatorNotFoundError,
)

from magnetar._transport import Transport

log = logging.getLogger("magnetar.client")

# Worth another try after a reconnect: the operation did not happen, or happened and will
# be recognised (sequence ids, idempotent ends).
RETRYABLE = (ConnectError, NotOwner, ServiceNotReady, PersistenceError, TooManyRequests,
             SessionNotFound, ProducerNotFound, ConsumerNotFound, TransactionCoordinatorNotFoundError)


async def backoff_until(deadline: float, attempt: int, what: str, cause: Exception) -> None:
    """Sleep before retry ``attempt``, or raise Timeout if the deadline would pass."""
    delay = min(0.05 * (2 ** attempt), 1.0)
    if time.monotonic() + delay > deadline:
        raise Timeout(f"{what}: gave up at the deadline; last error: {cause}") from cause
    await asyncio.sleep(delay)


@dataclass
class _Session:
    url: str
    session_id: str
    keepalive_s: float
    task: asyncio.Task | None = field(default=None, repr=False)


class Core:
    def __init__(self, service_url: str, transport: Transport, operation_timeout_s: float):
        self.urls = [u.strip().rstrip("/") for u in service_url.split(",") if u.strip()]
        if not self.urls:
            raise ValueError("service_url names no broker, e.g. http://localhost:8080")
        self.transport = transport
        self.operation_timeout_s = operation_timeout_s
        self._sessions: dict[str, _Session] = {}
        self._session_locks: dict[str, asyncio.Lock] = {}
        self._rr = itertools.count()
        self.closed = False

    async def call(self, url: str, path: str, request, response_type, timeout: float | None = None):
        return await self.transport.call(url, path, request, response_type,
                                         timeout or self.operation_timeout_s)

    async def any_broker(self, path: str, request, response_type):
        """Ask the brokers in turn (discovery works while any one is up)."""
        start = next(self._rr)
        last: MagnetarError | None = None
        for i in range(len(self.urls)):
            url = self.urls[(start + i) % len(self.urls)]
            try:
                return await self.call(url, path, request, response_type)
            except (ConnectError, ServiceNotReady) as exc:
                last = exc
        raise last

    async def with_retries(self, what: str, op, timeout_s: float | None = None):
        """Run ``op()`` until it succeeds, a non-retryable error, or the deadline."""
        deadline = time.monotonic() + (timeout_s or self.operation_timeout_s)
        attempt = 0
        while True:
            try:
                return await op()
            except RETRYABLE as exc:
                await backoff_until(deadline, attempt, what, exc)
                attempt += 1

    # ---------------------------------------------------------------- discovery

    async def partitions(self, topic: str) -> tuple[str, int]:
        reply = await self.with_retries(f"metadata of {topic}", lambda: self.any_broker(
            "/v1/topics/metadata", pb.PartitionMetadataRequest(topic=topic), pb.PartitionMetadataResponse))
        return reply.topic, reply.partitions

    async def lookup(self, topic: str) -> str:
        reply = await self.any_broker("/v1/topics/lookup", pb.LookupRequest(topic=topic), pb.LookupResponse)
        return reply.broker_url.rstrip("/")

    async def attach(self, topic: str, path: str, make_request, response_type, what: str,
                     deadline: float, timeout: float | None = None):
        """Find the topic's owner, open (or reuse) a session there and send
        ``make_request(session_id)``, retrying through ownership moves and lapsed
        sessions until ``deadline``.  Returns (owner url, session id, reply)."""
        attempt = 0
        url = session_id = ""
        while True:
            try:
                url = await self.lookup(topic)
                session_id = await self.session(url)
                reply = await self.call(url, path, make_request(session_id), response_type, timeout)
                return url, session_id, reply
            except (SessionNotFound, ProducerNotFound, ConsumerNotFound) as exc:
                self.drop_session(url, session_id)
                await backoff_until(deadline, attempt, what, exc)
            except RETRYABLE as exc:
                await backoff_until(deadline, attempt, what, exc)
            attempt += 1

    # ---------------------------------------------------------------- sessions

    async def session(self, url: str) -> str:
        current = self._sessions.get(url)
        if current is not None:
            return current.session_id
        lock = self._session_locks.setdefault(url, asyncio.Lock())
        async with lock:
            current = self._sessions.get(url)
            if current is None:
                reply = await self.call(url, "/v1/sessions/open", pb.OpenSessionRequest(client_name="magnetar-python"),
                                        pb.OpenSessionResponse)
                current = _Session(url, reply.session_id, reply.keepalive_interval_ms / 1000)
                current.task = asyncio.create_task(self._keepalive(current))
                self._sessions[url] = current
            return current.session_id

    def drop_session(self, url: str, session_id: str) -> None:
        """Forget a session the broker no longer knows; the next user opens a new one."""
        current = self._sessions.get(url)
        if current is not None and current.session_id == session_id:
            del self._sessions[url]
            if current.task:
                current.task.cancel()

    async def _keepalive(self, s: _Session) -> None:
        while not self.closed:
            await asyncio.sleep(s.keepalive_s)
            try:
                await self.call(s.url, "/v1/sessions/keepalive", pb.KeepAliveRequest(session_id=s.session_id),
                                pb.KeepAliveResponse, timeout=max(s.keepalive_s, 1.0))
            except SessionNotFound:
                self.drop_session(s.url, s.session_id)
                return
            except MagnetarError as exc:
                log.debug("keepalive to %s failed: %s", s.url, exc)

    async def close(self) -> None:
        self.closed = True
        for s in list(self._sessions.values()):
            if s.task:
                s.task.cancel()
            try:
                await self.call(s.url, "/v1/sessions/close", pb.CloseSessionRequest(session_id=s.session_id),
                                pb.CloseSessionResponse, timeout=2)
            except MagnetarError:
                pass
        self._sessions.clear()
        await self.transport.close()

    # ---------------------------------------------------------------- coordinators

    async def coordinators(self) -> dict[int, str]:
        reply = await self.any_broker("/v1/txn/coordinators", pb.LookupCoordinatorsRequest(),
                                      pb.LookupCoordinatorsResponse)
        return {c.coordinator_id: c.url.rstrip("/") for c in reply.coordinators}
