"""Issue #24 findings 2 and 4 against the real HTTP protocol (uvicorn + httplimits) on a
real socket, with a trivial app: the head limit holds whatever the read sizes, a body
that trickles or stalls is answered 408 and closed, and unfinished bodies are bounded
per process (503 past the budget, the budget freed when they go)."""

from __future__ import annotations

import asyncio
import select
import socket
import threading
import time

import pytest
import uvicorn

from magnetar_runtime.httplimits import Limits, bounded_protocol
from tests.http_raw import read_answer
from tests.waiting import wait_until

HEAD_LIMIT = 32 * 1024
LIMITS = Limits(max_head_bytes=HEAD_LIMIT, max_body_bytes=1024 * 1024, head_timeout_s=5,
                body_timeout_s=3, body_min_rate=1024, body_rate_grace_s=1,
                max_pending_body_bytes=150 * 1024)
DEADLINE_S = 30


async def _app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    answer = b"got %d" % len(body)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain"),
                            (b"content-length", b"%d" % len(answer))]})
    await send({"type": "http.response.body", "body": answer})


@pytest.fixture(scope="module")
def server():
    protocol = bounded_protocol(LIMITS)
    config = uvicorn.Config(_app, host="127.0.0.1", port=0, http=protocol, log_config=None,
                            lifespan="off", access_log=False)
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(srv.serve()), daemon=True)
    thread.start()
    wait_until(lambda: srv.started, 10, "the test server started")
    port = srv.servers[0].sockets[0].getsockname()[1]
    yield port, protocol
    srv.should_exit = True
    thread.join(10)


def _exchange(port: int, *parts: bytes, then=None) -> tuple[int, bytes]:
    """Send ``parts`` (one write each) on a new connection, call ``then(sock)`` if given,
    and return the answer's status and body."""
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for part in parts:
            sock.sendall(part)
        if then is not None:
            then(sock)
        return read_answer(sock)


def _head(size: int) -> bytes:
    """A GET whose head (request line, headers, blank line) is exactly ``size`` bytes."""
    start = b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: "
    end = b"\r\n\r\n"
    return start + b"a" * (size - len(start) - len(end)) + end


@pytest.mark.parametrize("size,status", [(HEAD_LIMIT, 200), (HEAD_LIMIT + 1, 431),
                                         (40 * 1024, 431), (100 * 1024, 431)])
def test_a_head_in_one_read_is_held_to_the_limit(server, size, status):
    got, body = _exchange(server[0], _head(size))  # one write: on loopback one read
    assert got == status, (size, got, body[:200])
    assert status == 200 or b"MAGNETAR_MAX_HEADER_BYTES" in body


def test_a_head_in_small_reads_is_held_to_the_limit(server):
    head = _head(HEAD_LIMIT + 100)
    got, body = _exchange(server[0], *(head[i:i + 1000] for i in range(0, len(head), 1000)))
    assert got == 431 and b"MAGNETAR_MAX_HEADER_BYTES" in body, (got, body[:200])


POST_HEAD = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"


def test_a_stalled_body_is_cut_off(server):
    got, body = _exchange(server[0], POST_HEAD + b"x" * 90000)  # then nothing: the server must end it
    assert got == 408, (got, body[:200])
    assert b"MAGNETAR_BODY_READ_TIMEOUT_S" in body or b"MAGNETAR_BODY_MIN_BYTES_PER_S" in body


def test_a_trickling_body_is_cut_off_by_its_rate(server):
    def trickle(sock: socket.socket) -> None:
        # 10 bytes every 0.1 s (100 B/s, under 1 KiB/s) until the server answers.
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and not select.select([sock], [], [], 0.1)[0]:
            sock.sendall(b"y" * 10)

    got, body = _exchange(server[0], POST_HEAD, then=trickle)
    assert got == 408 and b"MAGNETAR_BODY_MIN_BYTES_PER_S" in body, (got, body[:200])


def test_a_whole_body_at_once_passes(server):
    assert _exchange(server[0], POST_HEAD + b"z" * 100000) == (200, b"got 100000")


def test_unfinished_bodies_are_bounded_per_process(server):
    port, protocol = server
    first = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S)
    second = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE_S)
    try:
        # 100 KiB of a body held; the budget is 150 KiB.
        first.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 500000\r\n\r\n" + b"a" * 100 * 1024)
        wait_until(lambda: protocol.budget.held >= 100 * 1024, 10, "the first body's bytes held")
        second.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 500000\r\n\r\n" + b"b" * 100 * 1024)
        got, body = read_answer(second)
        assert got == 503 and b"MAGNETAR_MAX_PENDING_BODY_BYTES" in body, (got, body[:200])
        first.close()
        wait_until(lambda: protocol.budget.held == 0, 10, "the budget freed when the bodies went")
    finally:
        first.close()
        second.close()
