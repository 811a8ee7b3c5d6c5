"""Reading an HTTP/1.1 answer off a raw socket, for the tests that speak HTTP by hand
(request limits: heads, bodies and timings no HTTP client would send)."""

from __future__ import annotations

import socket


def read_answer(sock: socket.socket) -> tuple[int, bytes]:
    """The status and body of the answer on ``sock``: read until the server closes, or
    until a kept-alive answer's Content-Length is in."""
    data = b""
    while True:
        try:
            got = sock.recv(65536)
        except ConnectionResetError:
            break
        if not got:
            break
        data += got
        head, sep, body = data.partition(b"\r\n\r\n")
        if sep and b"connection: close" not in head.lower():
            lengths = [line.split(b":", 1)[1] for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")]
            if lengths and len(body) >= int(lengths[0]):
                break
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 "), data[:200]
    return int(head.split()[1]), body
