"""Process plumbing for the local cluster: ports, console scripts, process groups.

Each service runs in its own process group (``start_new_session``) so one signal reaches
all of it and nothing else; these helpers signal, watch and reap such groups safely."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import psutil


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def command_path(script: str) -> str:
    """The console script installed next to this Python (the project's venv)."""
    beside = Path(sys.executable).parent / script
    return str(beside) if beside.exists() else (shutil.which(script) or script)


def run_sync(make_coro: Callable[[], object]):
    """Run a coroutine to completion from sync code, even inside a running event loop
    (an async test calling ``cluster.owner_of``): then it runs on a helper thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make_coro())
    result: dict = {}

    def target():
        try:
            result["value"] = asyncio.run(make_coro())
        except BaseException as exc:  # re-raised on the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["value"]


def exited(proc: subprocess.Popen) -> bool:
    """Whether ``proc`` has exited, WITHOUT reaping it: an unreaped leader keeps its
    process group id reserved, so killing the group afterwards can never hit a stranger."""
    if proc.returncode is not None:
        return True
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped elsewhere
        proc.poll()
        return True
    return info is not None


def live_members(pgid: int) -> list[int]:
    """Processes of group ``pgid`` that still run (zombies are done)."""
    members = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                members.append(proc.pid)
        except (OSError, psutil.Error):
            pass  # exited while we looked
    return members


def killpg(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


# `setpriv --pdeathsig KILL` makes a service die with the process that started it, so a
# SIGKILLed test run or `magnetar-local` leaves no orphan holding ports and connections.
SETPRIV = shutil.which("setpriv") if sys.platform == "linux" else None
