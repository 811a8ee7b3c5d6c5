"""Failpoints for crash tests: ``MAGNETAR_FAILPOINTS=name1,name2`` makes the process
SIGKILL itself when it reaches ``failpoint("name1")``, so a test can crash a service at
an exact instruction (as FreeBSD's and TiKV's failpoints do).  Unset, a failpoint is a
set lookup."""

from __future__ import annotations

import os
import signal
import sys

_ARMED = frozenset(p.strip() for p in os.environ.get("MAGNETAR_FAILPOINTS", "").split(",") if p.strip())


def failpoint(name: str) -> None:
    if name in _ARMED:
        print(f"failpoint {name}: SIGKILL", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
