"""Request limits enforced in the HTTP protocol, before a request reaches the app (and
so before authentication): head size (431), body size (413), head read time (408).

uvicorn's httptools protocol has no limit on a request's head: httptools gathers a
header whole before handing it over, so one 160 MB header held a broker's event loop
for 34 s (issue #20), and the app's ``await request.body()`` read a 100 MB body whole
before refusing it.  This subclass counts the bytes as they arrive and answers, then
closes the connection, as soon as a limit is passed; the bytes are never parsed.
A client that sends its head slower than ``head_timeout_s`` (slow loris) gets 408.
"""

from __future__ import annotations

import asyncio
import logging

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from magnetar_protocol.errors import BadRequest, MessageTooBig
from magnetar_runtime.error_answers import error_body

log = logging.getLogger("magnetar.http")

_REASONS = {408: b"Request Timeout", 413: b"Content Too Large",
            431: b"Request Header Fields Too Large"}


def bounded_protocol(max_head_bytes: int, max_body_bytes: int, head_timeout_s: float):
    """The uvicorn ``http`` protocol class with these limits."""

    class BoundedHttpToolsProtocol(HttpToolsProtocol):
        _head_bytes = 0
        _body_bytes = 0
        _reading_head = True
        _head_timer: asyncio.TimerHandle | None = None

        def data_received(self, data: bytes) -> None:
            if self._reading_head:
                if self._head_timer is None:
                    self._head_timer = self.loop.call_later(head_timeout_s, self._head_too_slow)
                self._head_bytes += len(data)  # at most one read (256 KiB) past the limit
            super().data_received(data)
            if self._reading_head and self._head_bytes > max_head_bytes \
                    and not self.transport.is_closing():
                self._refuse(431, f"request head over {max_head_bytes} bytes "
                                  "(setting MAGNETAR_MAX_HEADER_BYTES)")

        def on_message_begin(self) -> None:
            self._body_bytes = 0
            super().on_message_begin()

        def on_headers_complete(self) -> None:
            self._reading_head = False
            self._head_bytes = 0
            self._cancel_head_timer()
            for name, value in self.headers:
                if name == b"content-length" and value.isdigit() and int(value) > max_body_bytes:
                    self._refuse(413, f"request body of {int(value)} bytes is over the limit of "
                                      f"{max_body_bytes} bytes (setting MAGNETAR_MAX_BODY_BYTES)")
                    return
            super().on_headers_complete()

        def on_body(self, body: bytes) -> None:
            if self.transport.is_closing():
                return
            self._body_bytes += len(body)
            if self._body_bytes > max_body_bytes:  # a chunked body without a length
                self._refuse(413, f"request body over the limit of {max_body_bytes} bytes "
                                  "(setting MAGNETAR_MAX_BODY_BYTES)")
                return
            super().on_body(body)

        def on_message_complete(self) -> None:
            if self.transport.is_closing():
                return
            super().on_message_complete()
            self._reading_head = True  # the connection's next request starts with a head

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_head_timer()
            super().connection_lost(exc)

        def _head_too_slow(self) -> None:
            self._head_timer = None
            if self._reading_head and self._head_bytes and not self.transport.is_closing():
                self._refuse(408, f"request head not complete within {head_timeout_s} s "
                                  "(setting MAGNETAR_HEADER_READ_TIMEOUT_S)")

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _refuse(self, status: int, reason: str) -> None:
            """Answer ``status`` with the reason as JSON, then close: the rest of the
            request is never read."""
            self._cancel_head_timer()
            log.warning("refused a request from %s: %d %s", self.client, status, reason)
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete:
                # The app is running (a body passed the limit mid-way): it sees a
                # disconnect, and what it answers is dropped.
                cycle.disconnected = True
                cycle.message_event.set()
            # In the request's format when its head was read (protobuf Error or JSON).
            content_type = "" if self._reading_head else next(
                (v.decode("latin-1") for n, v in self.headers if n == b"content-type"), "")
            exc = MessageTooBig(reason) if status == 413 else BadRequest(reason)
            media_type, body = error_body(exc, content_type)
            self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n"
                                 b"connection: close\r\n\r\n%s"
                                 % (status, _REASONS[status], media_type.encode(), len(body), body))
            self.transport.close()

    return BoundedHttpToolsProtocol
