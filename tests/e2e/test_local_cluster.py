"""The local cluster itself, with real processes: every service healthy, the exact
environment each gets, SIGKILL and restart, freeze and thaw, whole-group kills, and the
``magnetar-local run`` command on its own durable PostgreSQL."""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from magnetar_runtime.local.cluster import KINDS, Kind, LocalCluster, ServiceFailed, run_sync
from magnetar_runtime.local.postgres import LocalPostgres
from tests.waiting import wait_until

pytestmark = pytest.mark.e2e


def _get(url: str, timeout: float = 5) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.status, resp.read().decode()


def _gone(pid: int) -> bool:
    """Exited: no such process, or a zombie nobody reaped yet."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "\nState:\tZ" in status


def _refused(url: str) -> bool:
    try:
        _get(url, timeout=1)
    except urllib.error.URLError as exc:
        return isinstance(exc.reason, ConnectionRefusedError)
    return False


def test_every_process_is_healthy_ready_and_exports_metrics(cluster):
    assert list(cluster.services) == ["broker-0", "broker-1", "coordinator-0", "registry", "admin"]
    for name, svc in cluster.services.items():
        status, body = _get(cluster.url(name) + "/healthz")
        assert status == 200 and f'"service":"{svc.kind}"' in body.replace(" ", "")
        assert _get(cluster.url(name) + "/readyz")[0] == 200
        status, body = _get(cluster.url(name) + "/metrics")
        assert status == 200 and "python_info" in body
        # Its own process group, so a signal to it never reaches pytest or a sibling.
        assert os.getpgid(svc.pid) == svc.pid != os.getpgid(0)
    assert "pulsar_txn_active_count" in _get(cluster.url("coordinator-0") + "/metrics")[1]
    assert len({svc.pid for svc in cluster.services.values()}) == 5


def test_each_process_gets_exactly_the_variables_env_for_names(cluster_factory, monkeypatch):
    monkeypatch.setenv("MAGNETAR_STRAY_SETTING", "must-not-leak")
    cluster = cluster_factory(brokers=1)
    for name, svc in cluster.services.items():
        raw = Path(f"/proc/{svc.pid}/environ").read_bytes().split(b"\0")
        env = dict(item.decode().split("=", 1) for item in raw if b"=" in item)
        got = {k: v for k, v in env.items() if k.startswith("MAGNETAR_")}
        assert got == cluster.env_for(name), name
    assert cluster.env_for("broker-0")["MAGNETAR_BROKER_ID"] == "broker-0"
    assert cluster.env_for("coordinator-0")["MAGNETAR_COORDINATOR_ID"] == "0"
    assert "MAGNETAR_BROKER_ID" not in cluster.env_for("admin")
    assert cluster.env_for("broker-0")["MAGNETAR_LEASE_TTL_MS"] == "2000"  # the test settings


def test_sigkilled_broker_restarts_on_the_same_port_with_the_same_identity(cluster):
    before = cluster.services["broker-1"].pid
    cluster.kill("broker-1", signal.SIGKILL)
    assert not cluster.services["broker-1"].alive and _gone(before)
    assert _refused(cluster.url("broker-1") + "/healthz")
    assert _get(cluster.url("broker-0") + "/readyz")[0] == 200  # the others carry on
    cluster.start("broker-1")
    assert cluster.services["broker-1"].pid != before
    status, body = _get(cluster.url("broker-1") + "/internal/v1/owned-topics")
    assert status == 200 and '"brokerId":"broker-1"' in body.replace(" ", "")
    log = cluster.services["broker-1"].log_path.read_text()
    assert log.count("magnetar-local: starting broker-1") == 2  # one log, both lives


def test_freeze_stops_answering_until_thaw(cluster):
    cluster.freeze("broker-0")
    with pytest.raises((TimeoutError, socket.timeout, urllib.error.URLError)):
        _get(cluster.url("broker-0") + "/healthz", timeout=1)
    assert cluster.services["broker-0"].alive
    cluster.thaw("broker-0")
    assert _get(cluster.url("broker-0") + "/healthz")[0] == 200


def test_stop_is_graceful_and_restart_keeps_the_port(cluster):
    port = cluster.services["admin"].port
    # SIGTERM: uvicorn runs the app's shutdown, then re-raises the signal (hence -15).
    assert cluster.stop("admin") in (0, -signal.SIGTERM)
    assert cluster.log_tail("admin", 5).count("Application shutdown complete") == 1
    assert _refused(cluster.url("admin") + "/healthz")
    cluster.restart("admin")
    assert cluster.services["admin"].port == port
    assert _get(cluster.url("admin") + "/readyz")[0] == 200


# A stand-in service that starts a child deaf to SIGTERM and leaves it behind however it
# exits, as a service spawning helpers might: the cluster must still leave nothing running.
FORKER = """\
#!{python}
import http.server, os, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import signal, time; "
                          "signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
open(os.environ["CHILD_PID_FILE"], "w").write(str(child.pid))

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"ok")
    def log_message(self, *args):
        pass

http.server.HTTPServer(("127.0.0.1", int(os.environ["MAGNETAR_PORT"])), Handler).serve_forever()
"""


@pytest.mark.parametrize("how", ["kill", "stop", "close"])
def test_no_process_of_a_service_outlives_it(how, database_url, tmp_path, monkeypatch):
    script = tmp_path / "forker"
    script.write_text(textwrap.dedent(FORKER).format(python=sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setitem(KINDS, "forker", Kind(str(script), 1, lambda i: 0))
    cluster = LocalCluster(tmp_path / "data", services={"broker": 0, "coordinator": 0, "admin": 0, "registry": 0},
                           database_url=database_url,
                           service_env={"forker": {"CHILD_PID_FILE": str(tmp_path / "child")}})
    try:
        cluster.start()
        child = int((tmp_path / "child").read_text())
        assert not _gone(child)
        if how == "kill":
            cluster.kill("forker")
        elif how == "stop":
            cluster.stop("forker")
        else:
            cluster.close()
        assert _gone(child), f"{how} left the service's child running"
    finally:
        cluster.close()


def test_a_service_that_cannot_start_names_itself_and_its_log(database_url, tmp_path):
    cluster = LocalCluster(tmp_path, services={"broker": 1, "coordinator": 0, "admin": 0, "registry": 0},
                           database_url=database_url,
                           env={"MAGNETAR_LEASE_TTL_MS": "-1"})  # fails validation
    with pytest.raises(ServiceFailed, match=r"broker-0 exited with code -?\d+ .*broker-0\.log"):
        cluster.start(timeout=30)
    assert not cluster.services["broker-0"].alive


def test_migrations_and_owner_of_on_the_cluster_database(cluster):
    assert cluster.query("SELECT count(*) FROM magnetar_migrations")[0][0] >= 1
    assert cluster.owner_of("never-used-topic") is None


class _Run:
    """``magnetar-local run`` as a developer runs it, its output read line by line."""

    def __init__(self, data_dir: Path, *args: str):
        self.proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "magnetar-local"), "run", "--data-dir",
             str(data_dir), "--any-ports", "--brokers", "1", *args],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float = 90) -> re.Match:
        deadline = time.monotonic() + timeout
        while True:
            for line in self.seen:
                if m := re.search(pattern, line):
                    self.seen.remove(line)
                    return m
            try:
                self.seen.append(self.lines.get(timeout=max(0.0, deadline - time.monotonic())))
            except queue.Empty:
                raise AssertionError(f"no line matching {pattern!r}; got:\n" + "\n".join(self.seen)) from None

    def banner(self) -> dict[str, str]:
        found = {key: self.wait_for(rf"^\s+{label}\s+(\S+)").group(1) for key, label in (
            ("service", r"service URL \(clients\)"), ("admin", "admin URL"),
            ("postgres", "PostgreSQL"))}
        found["pids"] = {m.group(1): int(m.group(2)) for m in
                         (self.wait_for(rf"^\s+({name})\s+\S+\s+pid (\d+)")
                          for name in ("broker-0", "coordinator-0", "admin"))}
        return found

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Stop it as a user would; return its exit code (at once if it already ended)."""
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(sig)
        code = self.proc.wait(60)
        self.wait_for("^Stopped.$", 5)
        return code


def _sql(url: str, statement: str):
    import asyncpg

    async def go():
        conn = await asyncpg.connect(url)
        try:
            return await conn.fetchval(statement)
        finally:
            await conn.close()

    return run_sync(go)


@pytest.fixture
def private_dir():
    """A folder 0700 like /root: as root, PostgreSQL (another user) must still reach it."""
    path = Path(tempfile.mkdtemp(prefix="magnetar-local-run-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_magnetar_local_run_restarts_the_dead_keeps_data_and_leaves_nothing_behind(private_dir):
    data_dir = private_dir / ".magnetar"
    first = _Run(data_dir)
    try:
        urls = first.banner()
        assert _get(urls["service"] + "/readyz")[0] == 200
        assert _get(urls["admin"] + "/readyz")[0] == 200
        assert _sql(urls["postgres"], "SHOW fsync") == "on"  # durable across restarts
        _sql(urls["postgres"], "CREATE TABLE kept AS SELECT 42 AS x")

        os.kill(urls["pids"]["broker-0"], signal.SIGKILL)
        first.wait_for(r"broker-0 DIED \(exit code -9\)")
        first.wait_for(r"broker-0 restarted on " + re.escape(urls["service"]))
        assert _get(urls["service"] + "/readyz")[0] == 200

        second = _Run(data_dir)  # the same folder while the first runs: refused
        assert second.proc.wait(30) != 0
        second.wait_for("another magnetar-local .* is running")

        # Killed outright, it still takes every service and PostgreSQL with it.
        pids = [*urls["pids"].values(), LocalPostgres(data_dir / "postgres").running_pid()]
        first.proc.kill()
        wait_until(lambda: all(_gone(pid) for pid in pids), 30, "every child is gone")
    finally:
        first.stop()

    again = _Run(data_dir)
    try:
        urls = again.banner()
        assert _sql(urls["postgres"], "SELECT x FROM kept") == 42
        assert again.stop(signal.SIGINT) == 0  # Ctrl-C: orderly
        assert not (data_dir / "postgres" / "pgdata" / "postmaster.pid").exists()
        assert all(_gone(pid) for pid in urls["pids"].values())
    finally:
        again.stop()
