"""What producers, consumers and transactions share: the transport, discovery (any
broker answers it), the sessions, and retries bounded by the operation timeout."""

from __future__ import annotations

import itertools
import logging
import time

from magnetar._partition_watch import DEFAULT_INTERVAL_S
from magnetar._retry import deadline_after, retry
from magnetar._session import Sessions
from magnetar._transport import PROTOBUF, decode_error
from magnetar._txn_pool import TxnPool
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.coalesce import Coalescer
from magnetar_protocol.errors import ConnectError, MagnetarError, ServiceNotReady
from magnetar_protocol.listeners import listener_name_problem
from magnetar_protocol.topics import TopicName

# A transaction keeps its sends for a one-request commit up to this many payload bytes
# (docs/transactions.md): a one-request commit writes the data, so its latency grows
# with it (measured, hosted: 3.7 ms for 10 KB, 17.7 ms for 1 MB against the classic
# commit's 7.7-9.3 ms at any size), while the commit latency of anything bigger must not
# grow with its size (docs/design.md §3).  (c)'s transactions are 200 bytes.
ONE_REQUEST_MAX_BYTES = 8 * 1024
# Coordinators move rarely (a restart keeps the id); a failed call looks them up again.
COORDINATORS_TTL_S = 30.0
# A service URL that did not answer is asked last for this long: with a dead broker in
# the list, lookups would otherwise wait out a connect timeout whenever they start there.
UNANSWERED_PENALTY_S = 30.0

log = logging.getLogger("magnetar.client")


def parse_service_url(service_url: str) -> list[str]:
    """``"http://a:8080, http://b:8080/"`` -> ``["http://a:8080", "http://b:8080"]``."""
    if not isinstance(service_url, str):
        raise TypeError(f"service_url must be a string, not {type(service_url).__name__}")
    urls = [u.strip().rstrip("/") for u in service_url.split(",") if u.strip()]
    if not urls:
        raise ValueError("service_url names no broker, e.g. http://localhost:8080")
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"service_url {url!r} must start with http:// or https://")
    return urls


def check_listener_name(name: str | None) -> str | None:
    """``name`` if usable as ``listener_name`` (None: the internal listener)."""
    if name is not None and (problem := listener_name_problem(name)):
        raise ValueError(problem)
    return name


def discovery_order(urls: list[str], start: int, failed_at: dict[str, float], now: float,
                    penalty_s: float = UNANSWERED_PENALTY_S) -> list[str]:
    """``urls`` rotated to begin at ``start``, those that failed within ``penalty_s``
    moved to the end (still asked: they may be back)."""
    rotated = [urls[(start + i) % len(urls)] for i in range(len(urls))]
    return sorted(rotated, key=lambda url: now - failed_at.get(url, float("-inf")) < penalty_s)


class Core:
    """What producers, consumers and transactions of one client share."""
    def __init__(self, service_url: str, transport, operation_timeout_s: float,
                 listener_name: str | None = None,
                 partitions_update_interval_s: float = DEFAULT_INTERVAL_S,
                 one_request_max_bytes: int = ONE_REQUEST_MAX_BYTES):
        self.urls = parse_service_url(service_url)
        # How often partitioned producers and consumers look for added partitions (0: never).
        self.partitions_update_interval_s = partitions_update_interval_s
        # Lookups answer this advertised listener's URLs (magnetar_protocol.listeners).
        self.listener_name = listener_name or ""
        self.transport = transport
        self.operation_timeout_s = operation_timeout_s
        self.sessions = Sessions(self.call, operation_timeout_s)
        self._rr = itertools.count()
        self._failed_at: dict[str, float] = {}  # service URL -> when it last did not answer
        # Client-side producer ids (CreateProducerRequest.client_producer_id): from 1.
        self.producer_ids = itertools.count(1)
        self.closed = False
        self._coordinators: dict[int, str] = {}
        self._coordinators_at = float("-inf")
        # Transaction calls (NewTxn, registrations, EndTxn, transactional acks) of many
        # concurrent transactions share requests when they pile up.
        self.coalescer = Coalescer(
            self.transport.call, lambda status, body, where: decode_error(status, body, PROTOBUF, where))
        self.txn_pool = TxnPool(self)
        # One-request transactions (_transaction.py): kept up to this many bytes of sends
        # (0: never), and the coordinator URLs that do not commit them (older brokers).
        self.one_request_max_bytes = one_request_max_bytes
        self.no_one_request: set[str] = set()

    async def call(self, url: str, path: str, request, response_type, timeout: float | None = None):
        """One request through the transport (operation timeout by default)."""
        return await self.transport.call(url, path, request, response_type,
                                         timeout or self.operation_timeout_s)

    async def call_coalesced(self, url: str, path: str, request, response_type,
                             timeout: float | None = None):
        """Like :meth:`call`, but sent inside a ``/v1/batch`` request with other calls to
        the same URL and path when those pile up (magnetar_protocol.coalesce)."""
        return await self.coalescer.call(url, path, request, response_type,
                                         timeout or self.operation_timeout_s)

    async def any_broker(self, path: str, request, response_type):
        """Ask the brokers in turn, starting at a rotating one (discovery works while any
        broker is up); a broker that did not answer lately is asked last, so a dead
        one costs each lookup nothing while another answers."""
        now = time.monotonic()
        order = discovery_order(self.urls, next(self._rr), self._failed_at, now)
        last: MagnetarError | None = None
        for url in order:
            try:
                reply = await self.call(url, path, request, response_type)
            except (ConnectError, ServiceNotReady) as exc:
                self._failed_at[url] = time.monotonic()
                last = exc
                continue
            self._failed_at.pop(url, None)
            return reply
        assert last is not None
        raise last

    async def with_retries(self, what: str, op, timeout_s: float | None = None):
        """``op()`` retried on transient errors until the operation timeout."""
        return await retry(op, what, deadline_after(timeout_s or self.operation_timeout_s))

    # ---------------------------------------------------------------- discovery

    async def partitions(self, topic: str) -> tuple[str, int]:
        """(canonical topic name, partition count; 0 = not partitioned)."""
        TopicName.parse(topic)  # InvalidTopicName before any network call
        reply = await self.with_retries(f"metadata of {topic}", lambda: self.any_broker(
            "/v1/topics/metadata", pb.PartitionMetadataRequest(topic=topic),
            pb.PartitionMetadataResponse))
        return reply.topic, reply.partitions

    async def lookup(self, topic: str) -> str:
        """The URL of the broker serving ``topic`` (a partition or non-partitioned topic)."""
        reply = await self.any_broker(
            "/v1/topics/lookup", pb.LookupRequest(topic=topic, listener_name=self.listener_name),
            pb.LookupResponse)
        return reply.broker_url.rstrip("/")

    # ---------------------------------------------------------------- sessions

    async def session(self, url: str) -> str:
        """The session id for a broker URL, opened on first use."""
        return await self.sessions.get(url)

    def drop_session(self, url: str, session_id: str) -> None:
        """Forget a session the broker no longer knows."""
        self.sessions.drop(url, session_id)

    # ---------------------------------------------------------------- coordinators

    async def coordinators(self, fresh: bool = False) -> dict[int, str]:
        """The live transaction coordinators: id -> URL.  Looked up once and kept
        (COORDINATORS_TTL_S at most); ``fresh`` after a coordinator failed us."""
        now = time.monotonic()
        if fresh or not self._coordinators or now - self._coordinators_at > COORDINATORS_TTL_S:
            reply = await self.any_broker(
                "/v1/txn/coordinators",
                pb.LookupCoordinatorsRequest(listener_name=self.listener_name),
                pb.LookupCoordinatorsResponse)
            self._coordinators = {c.coordinator_id: c.url.rstrip("/") for c in reply.coordinators}
            self._coordinators_at = now
        return self._coordinators

    async def coordinator_urls(self, fresh: bool = False) -> list[str]:
        """The distinct coordinator URLs, to spread new transactions over: a coordinator
        that adopted a gone one's TCID answers for both, and counts once."""
        return sorted(set((await self.coordinators(fresh)).values()))

    async def close(self) -> None:
        """Close the sessions and the transport."""
        self.closed = True
        await self.txn_pool.close()
        await self.sessions.close()
        await self.transport.close()
