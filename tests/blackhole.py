"""An address that takes no connections and refuses none: connects to it hang in
SYN-SENT, as they do to the address of a deleted Kubernetes pod (its IP is gone, so
nothing answers and nothing refuses).

How, on loopback and without iptables: a listening socket with a backlog of 0 whose
connections are never accepted.  Once one connection fills its accept queue, Linux
drops every further SYN without an answer (``tcp_conn_request``: "listen queue
overflow"; a SYN is not refused with RST unless ``tcp_abort_on_overflow`` is set, off
by default), so the connecting side retransmits its SYN and waits, in SYN-SENT, exactly
as it would for a vanished host.  Killing a process does not do this (its port answers
RST at once: "connection refused") and neither does SIGSTOP (the kernel still completes
handshakes into the stopped process's 2048-deep backlog).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator


@contextlib.contextmanager
def blackhole(port: int = 0, host: str = "127.0.0.1") -> Iterator[int]:
    """Make ``host:port`` (a free port when 0) a black hole while the block runs;
    yields the port."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAITs
    listener.bind((host, port))
    listener.listen(0)
    port = listener.getsockname()[1]
    filler = socket.create_connection((host, port), timeout=5)  # the one queued connect
    try:
        yield port
    finally:
        filler.close()
        listener.close()


def hangs(host: str, port: int, seconds: float = 0.5) -> bool:
    """Whether a connect to ``host:port`` is still unanswered after ``seconds``."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    probe.settimeout(seconds)
    try:
        probe.connect((host, port))
    except TimeoutError:
        return True
    except OSError:
        return False  # refused or unreachable: an answer
    finally:
        probe.close()
    return False
