"""A whole Magnetar on one machine: PostgreSQL, migrations, and every service as its own
process on loopback.  ``magnetar-local run`` and the end-to-end test fixtures both use
this class, so what the tests exercise is what a developer runs.

Each service runs its console script (``magnetar-broker``, ...) in its own process group
(``start_new_session``), so signals reach the whole group and a test's SIGKILL or SIGSTOP
hits exactly one service, never the test runner.  Logs go to ``<data>/logs/<name>.log``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from magnetar_runtime.local.postgres import LocalPostgres, free_port
from magnetar_runtime.local.processes import (
    SETPRIV,
    command_path,
    exited,
    killpg,
    live_members,
    port_in_use,
    run_sync,
)

__all__ = ["KINDS", "Kind", "LocalCluster", "LocalTls", "ServiceFailed", "ServiceProcess", "fixed_ports",
           "PULSAR_PORT_SUFFIX", "plan", "port_in_use", "run_sync"]


@dataclass(frozen=True)
class Kind:
    """A kind of service: how to run it, how many by default, and its fixed local ports."""

    command: str  # console script, found next to sys.executable (the project's venv)
    count: int  # instances by default
    fixed_port: Callable[[int], int]  # port of instance i under `magnetar-local run`
    id_env: str | None = None  # env var carrying a stable instance id (StatefulSet kinds)
    id_format: str = "{i}"  # that id's value for instance i


# Adding a service kind is one line here.  Order is start order and banner order.
KINDS: dict[str, Kind] = {
    "broker": Kind("magnetar-broker", 2, lambda i: 8080 if i == 0 else 8081 + i,
                   "MAGNETAR_BROKER_ID", "broker-{i}"),
    "coordinator": Kind("magnetar-coordinator", 1, lambda i: 8090 + i,
                        "MAGNETAR_COORDINATOR_ID", "{i}"),
    "registry": Kind("magnetar-registry", 1, lambda i: 8070 + i),
    "admin": Kind("magnetar-admin-service", 1, lambda i: 8081 if i == 0 else 8180 + i),
}


def instance_name(kind: str, index: int) -> str:
    """``broker-0``, ``coordinator-0``; a stateless kind's first instance is just ``admin``.

    A broker's name is also its MAGNETAR_BROKER_ID, so the broker id found in the
    database (e.g. a topic's owner) names the process to kill."""
    if KINDS[kind].id_env is None and index == 0:
        return kind
    return f"{kind}-{index}"


def plan(counts: Mapping[str, int]) -> list[tuple[str, str, int]]:
    """(name, kind, index) of every instance, in start order."""
    unknown = set(counts) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown service kind(s) {sorted(unknown)}; known: {list(KINDS)}")
    return [(instance_name(kind, i), kind, i)
            for kind in KINDS for i in range(counts.get(kind, 0))]


def default_counts() -> dict[str, int]:
    return {kind: k.count for kind, k in KINDS.items()}


# A broker's Pulsar protocol port is keyed "<broker>/pulsar" in ``ports``; under
# ``magnetar-local run`` broker-i listens on 6650 + i (Pulsar's port for the first).
PULSAR_PORT_SUFFIX = "/pulsar"


def fixed_ports(counts: Mapping[str, int]) -> dict[str, int]:
    """The well-known ports ``magnetar-local run`` uses: broker-0 8080, admin 8081, ...,
    broker-0's Pulsar port 6650 (``counts`` overrides the default number of instances
    per kind)."""
    ports = {}
    for name, kind, i in plan(default_counts() | dict(counts)):
        ports[name] = KINDS[kind].fixed_port(i)
        if kind == "broker":
            ports[name + PULSAR_PORT_SUFFIX] = 6650 + i
    return ports


@dataclass(frozen=True)
class LocalTls:
    """The local CA and the one certificate every local service (and PostgreSQL) uses."""

    ca_file: Path
    cert_file: Path
    key_file: Path

    @classmethod
    def make(cls, directory: Path) -> "LocalTls":
        """Made once per data folder, so clients given the CA keep working across runs."""
        files = cls(directory / "ca.crt", directory / "magnetar.crt", directory / "magnetar.key")
        if not all(p.exists() for p in (files.ca_file, files.cert_file, files.key_file)):
            from magnetar_runtime.local.certs import issue, make_ca

            ca = make_ca(directory)
            issue(ca, directory, "magnetar")
        return files

    def env(self, mutual: bool) -> dict[str, str]:
        """The same names the Helm chart sets from its mounted Secret."""
        env = {"MAGNETAR_TLS_ENABLED": "true", "MAGNETAR_TLS_CERT_FILE": str(self.cert_file),
               "MAGNETAR_TLS_KEY_FILE": str(self.key_file), "MAGNETAR_TLS_CA_FILE": str(self.ca_file)}
        if mutual:
            env["MAGNETAR_TLS_REQUIRE_CLIENT_CERT"] = "true"
        return env


class ServiceFailed(RuntimeError):
    """A service died or did not become ready; the message names it and its log file."""


@dataclass
class ServiceProcess:
    name: str
    kind: str
    index: int
    port: int
    log_path: Path
    process: subprocess.Popen | None = field(default=None, repr=False)
    env: dict[str, str] = field(default_factory=dict)  # what the running process got
    pulsar_port: int = 0  # brokers: the Pulsar protocol listener's
    starts: int = 0
    started_at: float = 0.0  # time.monotonic() of the last start
    frozen: bool = False
    tls: bool = False  # every port speaks TLS (https://, pulsar+ssl://)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def pulsar_url(self) -> str:
        if not self.pulsar_port:
            return ""
        return f"{'pulsar+ssl' if self.tls else 'pulsar'}://127.0.0.1:{self.pulsar_port}"

    @property
    def alive(self) -> bool:
        return self.process is not None and not exited(self.process)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.alive else None


class LocalCluster:
    """Start with ``start()`` (or ``with LocalCluster(...) as cluster``), stop with ``close()``.

    ``services`` counts instances per kind (default: ``Kind.count``); ``brokers=`` and
    friends are shortcuts.  ``ports`` fixes ports by instance name (others get free
    ports).  ``env`` is added to every service's environment; ``service_env`` adds per
    kind or per instance name (the name wins).  ``coordinator_in_broker``: no coordinator
    processes; each broker hosts one, its TCID the broker's index.  ``tls``: a local CA
    and certificate (``<data>/tls``, made once, local/certs.py) and every hop over TLS:
    HTTPS and pulsar+ssl:// on every port, verified service-to-service calls,
    PostgreSQL with sslmode=verify-full (when the cluster starts its own);
    ``mutual_tls`` also makes every service require a client certificate."""

    def __init__(self, data_dir: Path | str, *, brokers: int | None = None,
                 coordinators: int | None = None, admin: bool | None = None,
                 registry: bool | None = None, services: Mapping[str, int] | None = None,
                 database_url: str | None = None,
                 durable: bool = True, ports: Mapping[str, int] | None = None,
                 env: Mapping[str, str] | None = None,
                 service_env: Mapping[str, Mapping[str, str]] | None = None,
                 coordinator_in_broker: bool = False, tls: bool = False,
                 mutual_tls: bool = False):
        self.data_dir = Path(data_dir).resolve()
        self.tls = tls or mutual_tls
        self.mutual_tls = mutual_tls
        self.tls_files: LocalTls | None = LocalTls.make(self.data_dir / "tls") if self.tls else None
        counts = default_counts() | dict(services or {})
        for kind, value in (("broker", brokers), ("coordinator", coordinators),
                            ("admin", None if admin is None else int(admin)),
                            ("registry", None if registry is None else int(registry))):
            if value is not None:
                counts[kind] = value
        self.coordinator_in_broker = coordinator_in_broker
        if coordinator_in_broker:
            if coordinators:
                raise ValueError("coordinator_in_broker: the brokers host the coordinators; "
                                 f"do not also ask for {coordinators} coordinator process(es)")
            counts["coordinator"] = 0
        self._given_database_url = database_url or os.environ.get("MAGNETAR_DATABASE_URL") or ""
        self.database_url = self._given_database_url  # or our PostgreSQL's, once started
        self.postgres: LocalPostgres | None = None
        self.durable = durable
        self.extra_env = dict(env or {})
        self.service_env = {key: dict(value) for key, value in (service_env or {}).items()}
        self._lock = threading.RLock()
        ports = dict(ports or {})
        taken = set(ports.values())
        self.services: dict[str, ServiceProcess] = {}
        for name, kind, index in plan(counts):
            port = ports.get(name)
            while port is None or (port in taken and name not in ports):
                port = free_port()  # distinct even if the OS hands one out twice
            taken.add(port)
            self.services[name] = ServiceProcess(name, kind, index, port,
                                                 self.data_dir / "logs" / f"{name}.log", tls=self.tls)
            if kind == "broker":
                pulsar = ports.get(name + PULSAR_PORT_SUFFIX)
                while pulsar is None or (pulsar in taken and name + PULSAR_PORT_SUFFIX not in ports):
                    pulsar = free_port()
                taken.add(pulsar)
                self.services[name].pulsar_port = pulsar

    # ---------------------------------------------------------------- addresses

    def client_ssl(self):
        """An SSLContext trusting the cluster's CA, with its certificate for mutual TLS
        (None without TLS)."""
        if self.tls_files is None:
            return None
        from magnetar_protocol.tlsctx import client_context

        return client_context(str(self.tls_files.ca_file), str(self.tls_files.cert_file),
                              str(self.tls_files.key_file))

    def names(self, kind: str) -> list[str]:
        return [s.name for s in self.services.values() if s.kind == kind]

    def url(self, name: str) -> str:
        return self.services[name].url

    @property
    def broker_urls(self) -> list[str]:
        return [self.url(n) for n in self.names("broker")]

    @property
    def service_url(self) -> str:
        """What a client connects to (as Pulsar's serviceUrl): the first broker."""
        return self.broker_urls[0]

    @property
    def pulsar_urls(self) -> list[str]:
        """Each broker's pulsar:// URL (Pulsar's binary protocol)."""
        return [self.services[n].pulsar_url for n in self.names("broker")]

    @property
    def pulsar_service_url(self) -> str:
        """What a Pulsar client connects to: the first broker's pulsar:// URL."""
        return self.pulsar_urls[0]

    @property
    def admin_url(self) -> str:
        return self.url(self.names("admin")[0])

    @property
    def coordinator_urls(self) -> list[str]:
        return [self.url(n) for n in self.names("coordinator")]

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    def env_for(self, name: str) -> dict[str, str]:
        """Exactly the MAGNETAR_* variables service ``name`` gets; no other MAGNETAR_*
        variable reaches it (the Helm chart sets the same names)."""
        svc = self.services[name]
        kind = KINDS[svc.kind]
        env = {
            "MAGNETAR_DATABASE_URL": self.database_url,
            "MAGNETAR_HOST": "127.0.0.1",
            "MAGNETAR_PORT": str(svc.port),
            "MAGNETAR_ADVERTISED_URL": svc.url,
            "MAGNETAR_LOG_FORMAT": "text",  # people read these logs; the chart uses json
        }
        if kind.id_env:
            env[kind.id_env] = kind.id_format.format(i=svc.index)
        if svc.pulsar_port:
            env["MAGNETAR_PULSAR_PORT"] = str(svc.pulsar_port)
            env["MAGNETAR_ADVERTISED_PULSAR_URL"] = svc.pulsar_url
        if self.coordinator_in_broker and svc.kind == "broker":
            env["MAGNETAR_HOST_COORDINATOR"] = "true"
            env["MAGNETAR_COORDINATOR_ID"] = str(svc.index)
        if self.tls_files is not None:
            env |= self.tls_files.env(self.mutual_tls)
        env |= self.extra_env
        env |= self.service_env.get(svc.kind, {})
        env |= self.service_env.get(name, {})
        return env

    # ---------------------------------------------------------------- lifecycle

    def start(self, name: str | None = None, *, wait: bool = True, timeout: float = 60.0,
              extra_env: Mapping[str, str] | None = None) -> "LocalCluster":
        """Without ``name``: PostgreSQL (unless a database URL was given), migrations,
        then every service, waiting for each /readyz.  With ``name``: (re)start that
        service on its port with its id; ``extra_env`` applies to this start only."""
        with self._lock:
            if name is not None:
                self._spawn(self.services[name], extra_env or {})
                if wait:
                    self.wait_ready(name, timeout)
                return self
            try:
                self._start_all(timeout)
            except BaseException:
                self.close()  # never leave half a cluster behind
                raise
            return self

    def _start_all(self, timeout: float) -> None:
        if not self.database_url:
            tls = self.tls_files
            self.postgres = LocalPostgres(self.data_dir / "postgres", durable=self.durable,
                                          tls=None if tls is None else (tls.cert_file, tls.key_file))
            self.postgres.start(timeout)
            self.database_url = self.postgres.url
            if tls is not None:  # the server's certificate and name checked (libpq's names)
                self.database_url += f"?sslmode=verify-full&sslrootcert={tls.ca_file}"
        from magnetar_storage.migrate import migrate

        run_sync(lambda: migrate(self.database_url))
        for svc in self.services.values():
            self._spawn(svc, {})  # all at once: they start in parallel
        for name in self.services:
            self.wait_ready(name, timeout)

    def _spawn(self, svc: ServiceProcess, extra_env: Mapping[str, str]) -> None:
        if svc.alive:
            raise ServiceFailed(f"{svc.name} is already running (pid {svc.process.pid})")
        if svc.process is not None:
            self._reap(svc)
        svc.env = self.env_for(svc.name) | dict(extra_env)
        # Inherited MAGNETAR_* variables are dropped so env_for() is the whole truth.
        env = {k: v for k, v in os.environ.items() if not k.startswith("MAGNETAR_")} | svc.env
        cmd = [command_path(KINDS[svc.kind].command)]
        if SETPRIV and threading.current_thread() is threading.main_thread():
            # pdeathsig fires when the forking *thread* ends: only the main thread is safe.
            cmd = [SETPRIV, "--pdeathsig", "KILL", "--", *cmd]
        svc.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(svc.log_path, "ab") as log:
            log.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} magnetar-local: starting "
                      f"{svc.name} on {svc.url} ====\n".encode())
            log.flush()
            svc.process = subprocess.Popen(
                cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        svc.starts += 1
        svc.started_at = time.monotonic()
        svc.frozen = False

    def wait_ready(self, name: str, timeout: float = 60.0) -> None:
        """Until ``name`` answers 200 on /readyz; ServiceFailed if it dies or times out."""
        svc = self.services[name]
        deadline = time.monotonic() + timeout
        while True:
            if svc.process is None or exited(svc.process):
                code = None if svc.process is None else svc.process.poll()
                raise ServiceFailed(f"{name} exited with code {code} before it was ready; "
                                    f"log: {svc.log_path}\n{self.log_tail(name)}")
            try:
                with urllib.request.urlopen(svc.url + "/readyz", timeout=2,
                                            context=self.client_ssl()) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass  # not listening yet, or 503 (not ready yet)
            if time.monotonic() > deadline:
                raise ServiceFailed(f"{name} not ready on {svc.url}/readyz within "
                                    f"{timeout:.0f}s; log: {svc.log_path}\n{self.log_tail(name)}")
            time.sleep(0.05)

    def kill(self, name: str, sig: int = signal.SIGKILL, timeout: float = 30.0) -> None:
        """Send ``sig`` to the service's process group; for SIGKILL, also wait until it
        is gone (so ``start(name)`` may follow at once).  A dead service is left alone."""
        with self._lock:
            svc = self.services[name]
            if not svc.alive:
                return
            killpg(svc.process.pid, sig)
            if sig == signal.SIGKILL:
                self._wait_exit([svc], timeout)
            elif sig == signal.SIGSTOP:
                svc.frozen = True
            elif sig == signal.SIGCONT:
                svc.frozen = False

    def stop(self, name: str, timeout: float = 20.0) -> int | None:
        """SIGTERM (graceful: brokers release their leases) and wait; SIGKILL after
        ``timeout``.  Returns the exit code (None if it was not running)."""
        with self._lock:
            svc = self.services[name]
            if svc.process is None:
                return None
            self._terminate([svc], timeout)
            return svc.process.returncode

    def restart(self, name: str, **start_kwargs) -> None:
        """Stop (if running) and start again: same port, same id."""
        self.stop(name)
        self.start(name, **start_kwargs)

    def move(self, name: str, port: int | None = None) -> int:
        """Give a stopped service a new port (a free one by default) and so a new URL,
        from its next start on: as a rescheduled pod comes back at a new IP while
        clients may still hold the old address.  Returns the port."""
        with self._lock:
            svc = self.services[name]
            if svc.alive:
                raise ServiceFailed(f"{name} is running (pid {svc.process.pid}); stop it first")
            taken = {s.port for s in self.services.values()}
            while port is None or port in taken:
                port = free_port()
            svc.port = port
            return port

    def freeze(self, name: str) -> None:
        """SIGSTOP: the process keeps its sockets but does nothing (a long GC pause)."""
        self.kill(name, signal.SIGSTOP)

    def thaw(self, name: str) -> None:
        self.kill(name, signal.SIGCONT)

    def close(self) -> None:
        """Stop every service (in parallel), then PostgreSQL if we started it."""
        with self._lock:
            self._terminate([s for s in self.services.values() if s.process is not None], 20.0)
            if self.postgres is not None:
                self.postgres.stop()
                self.postgres = None
                self.database_url = self._given_database_url  # a new start starts it again

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def _terminate(self, services: list[ServiceProcess], timeout: float) -> None:
        for svc in services:
            if svc.alive:
                killpg(svc.process.pid, signal.SIGCONT)  # a frozen process cannot exit
                killpg(svc.process.pid, signal.SIGTERM)
        self._wait_exit(services, timeout)

    def _wait_exit(self, services: list[ServiceProcess], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = [s for s in services if s.process is not None]
        while pending and time.monotonic() < deadline:
            pending = [s for s in pending if not exited(s.process)]
            if pending:
                time.sleep(0.02)
        for svc in services:
            if svc.process is not None:
                self._reap(svc)

    def _reap(self, svc: ServiceProcess) -> None:
        """SIGKILL whatever is left of the group (children of a killed parent), then
        collect the exit status.  Kill before reaping: see exited()."""
        if svc.process.returncode is None:  # once reaped, the group id may be reused
            killpg(svc.process.pid, signal.SIGKILL)
            # Signals land asynchronously: return only once no member is left running.
            deadline = time.monotonic() + 10
            while live_members(svc.process.pid) and time.monotonic() < deadline:
                time.sleep(0.01)
            svc.process.wait()
        svc.frozen = False

    # ---------------------------------------------------------------- inspection

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.services[name].log_path
        if not path.exists():
            return ""
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - 256 * 1024))  # logs can grow large
            text = f.read().decode(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def owner_of(self, topic: str) -> str | None:
        """The name of the broker that owns ``topic`` now (None if unowned): a broker's
        MAGNETAR_BROKER_ID is its instance name, so the answer can go to ``kill``."""
        from magnetar_protocol.topics import canonical

        rows = self.query("SELECT o.broker_id FROM topic_owners o JOIN topics t USING (topic_id) "
                          "WHERE t.topic = $1", canonical(topic))
        return rows[0][0] if rows else None

    def query(self, sql: str, *args) -> list:
        """The rows of one SQL statement on the cluster's database (for tests and tools)."""
        import asyncpg

        async def fetch():
            conn = await asyncpg.connect(self.database_url)
            try:
                return await conn.fetch(sql, *args)
            finally:
                await conn.close()

        return run_sync(fetch)
