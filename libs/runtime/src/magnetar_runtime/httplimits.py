"""Request limits enforced in the HTTP protocol, before a request reaches the app (and
so before authentication): head size (431), body size (413), head read time (408), body
read time and rate (408), and the memory all unfinished bodies of the process may hold
(503).

uvicorn's httptools protocol has no limit on a request's head: httptools gathers a
header whole before handing it over, so one 160 MB header held a broker's event loop
for 34 s (issue #20), and the app's ``await request.body()`` read a 100 MB body whole
before refusing it.  This subclass counts the bytes as they arrive and answers, then
closes the connection, as soon as a limit is passed.

The head limit is exact whatever the read sizes (issue #24): the raw bytes of a head
still arriving are counted (a head that never ends is cut off within one read of the
limit), and a head that completed is measured from what the parser saw (request line
and each header as ``name: value`` CRLF) before the app is started, so a head that
arrived in one read is refused all the same.

A body that trickles (issue #24: 300 connections each holding most of a body, never
closed) is cut off by a total deadline and a minimum average rate after a grace period
(Kestrel's MinRequestBodyDataRate); bytes of unfinished bodies count against one budget
per process, so many slow bodies cannot take the process's memory.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from magnetar_protocol.errors import BadRequest, MessageTooBig, ServiceNotReady
from magnetar_runtime.error_answers import error_body

log = logging.getLogger("magnetar.http")

_REASONS = {408: b"Request Timeout", 413: b"Content Too Large",
            431: b"Request Header Fields Too Large", 503: b"Service Unavailable"}
# How often a body being read is checked against its deadline and rate.
_BODY_CHECK_S = 0.5


@dataclass(frozen=True)
class Limits:
    max_head_bytes: int
    max_body_bytes: int
    head_timeout_s: float
    # Total time from the end of the head to the end of the body.
    body_timeout_s: float = 60.0
    # Average bytes per second a body must keep up after the grace period.
    body_min_rate: int = 1024
    body_rate_grace_s: float = 5.0
    # Bytes of unfinished bodies the whole process may hold at once.
    max_pending_body_bytes: int = 128 * 1024 * 1024


class _Budget:
    """The bytes of unfinished bodies held by every connection of this process."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0


def bounded_protocol(lim: Limits):
    """The uvicorn ``http`` protocol class with these limits."""
    budget = _Budget(lim.max_pending_body_bytes)

    class BoundedHttpToolsProtocol(HttpToolsProtocol):
        _head_bytes = 0        # raw bytes of a head still arriving
        _parsed_head = 0       # the head the parser saw, measured from its parts
        _body_bytes = 0
        _body_held = 0         # this connection's share of the process's budget
        _body_started = 0.0
        _reading_head = True
        _reading_body = False
        _head_timer: asyncio.TimerHandle | None = None
        _body_timer: asyncio.TimerHandle | None = None

        def data_received(self, data: bytes) -> None:
            if self._reading_head:
                if self._head_timer is None:
                    self._head_timer = self.loop.call_later(lim.head_timeout_s, self._head_too_slow)
                self._head_bytes += len(data)  # at most one read (256 KiB) past the limit
            super().data_received(data)
            if self._reading_head and self._head_bytes > lim.max_head_bytes \
                    and not self.transport.is_closing():
                self._refuse(431, self._head_reason())
            elif self._reading_body and self._body_timer is None and not self.transport.is_closing():
                # A body still arriving after this read: watch its deadline and rate.  (Most
                # requests arrive whole in one read and never arm a timer.)
                self._body_timer = self.loop.call_later(_BODY_CHECK_S, self._check_body)

        def _head_reason(self) -> str:
            return (f"request head over {lim.max_head_bytes} bytes "
                    "(setting MAGNETAR_MAX_HEADER_BYTES)")

        def on_message_begin(self) -> None:
            self._body_bytes = 0
            self._parsed_head = 0
            super().on_message_begin()

        def on_url(self, url: bytes) -> None:
            self._parsed_head += len(url)
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._parsed_head += len(name) + len(value) + 4  # ": " and CRLF
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            # The request line: method SP url SP HTTP/1.x CRLF; the blank line ending the head.
            head = self._parsed_head + len(self.parser.get_method()) + 1 + 1 + 8 + 2 + 2
            self._reading_head = False
            self._head_bytes = 0
            self._cancel_head_timer()
            if head > lim.max_head_bytes:
                self._refuse(431, self._head_reason())
                return
            for name, value in self.headers:
                if name == b"content-length" and value.isdigit() and int(value) > lim.max_body_bytes:
                    self._refuse(413, f"request body of {int(value)} bytes is over the limit of "
                                      f"{lim.max_body_bytes} bytes (setting MAGNETAR_MAX_BODY_BYTES)")
                    return
            self._reading_body = True
            self._body_started = time.monotonic()
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            if self.transport.is_closing():
                return
            self._body_bytes += len(body)
            if self._body_bytes > lim.max_body_bytes:  # a chunked body without a length
                self._refuse(413, f"request body over the limit of {lim.max_body_bytes} bytes "
                                  "(setting MAGNETAR_MAX_BODY_BYTES)")
                return
            if budget.held + len(body) > budget.limit:
                self._refuse(503, f"this process already holds {budget.held} bytes of unfinished "
                                  f"request bodies, its limit (setting "
                                  "MAGNETAR_MAX_PENDING_BODY_BYTES); retry")
                return
            budget.held += len(body)
            self._body_held += len(body)
            super().on_body(body)

        def on_message_complete(self) -> None:
            self._end_body()
            if self.transport.is_closing():
                return
            super().on_message_complete()
            self._reading_head = True  # the connection's next request starts with a head

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_head_timer()
            self._end_body()
            super().connection_lost(exc)

        def _end_body(self) -> None:
            self._reading_body = False
            if self._body_timer is not None:
                self._body_timer.cancel()
                self._body_timer = None
            budget.held -= self._body_held
            self._body_held = 0

        def _check_body(self) -> None:
            self._body_timer = None
            if not self._reading_body or self.transport.is_closing():
                return
            if self.flow.read_paused:
                # The app is behind (uvicorn stopped reading): not the client's fault.
                self._body_started += _BODY_CHECK_S
            else:
                elapsed = time.monotonic() - self._body_started
                if elapsed > lim.body_timeout_s:
                    self._refuse(408, f"request body not complete within {lim.body_timeout_s} s "
                                      "(setting MAGNETAR_BODY_READ_TIMEOUT_S)")
                    return
                if elapsed > lim.body_rate_grace_s and \
                        self._body_bytes < lim.body_min_rate * elapsed:
                    self._refuse(408, f"request body arriving at {self._body_bytes / elapsed:.0f} "
                                      f"bytes/s, under the minimum of {lim.body_min_rate} bytes/s "
                                      "(setting MAGNETAR_BODY_MIN_BYTES_PER_S)")
                    return
            self._body_timer = self.loop.call_later(_BODY_CHECK_S, self._check_body)

        def _head_too_slow(self) -> None:
            self._head_timer = None
            if self._reading_head and self._head_bytes and not self.transport.is_closing():
                self._refuse(408, f"request head not complete within {lim.head_timeout_s} s "
                                  "(setting MAGNETAR_HEADER_READ_TIMEOUT_S)")

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _refuse(self, status: int, reason: str) -> None:
            """Answer ``status`` with the reason as JSON, then close: the rest of the
            request is never read."""
            self._cancel_head_timer()
            self._end_body()
            log.warning("refused a request from %s: %d %s", self.client, status, reason)
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete:
                # The app is running (a body passed a limit mid-way): it sees a
                # disconnect, and what it answers is dropped.
                cycle.disconnected = True
                cycle.message_event.set()
            # In the request's format when its head was read (protobuf Error or JSON).
            content_type = "" if self._reading_head else next(
                (v.decode("latin-1") for n, v in self.headers if n == b"content-type"), "")
            exc = (MessageTooBig(reason) if status == 413 else
                   ServiceNotReady(reason) if status == 503 else BadRequest(reason))
            media_type, body = error_body(exc, content_type)
            self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n"
                                 b"connection: close\r\n\r\n%s"
                                 % (status, _REASONS[status], media_type.encode(), len(body), body))
            self.transport.close()

    BoundedHttpToolsProtocol.budget = budget  # for tests and metrics
    return BoundedHttpToolsProtocol
