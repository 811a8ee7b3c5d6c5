"""A whole Magnetar on one machine: PostgreSQL, migrations, and every service as its own
process on loopback.  ``magnetar-local run`` and the end-to-end test fixtures both use
this class, so what the tests exercise is what a developer runs."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from magnetar_runtime.local.postgres import LocalPostgres, free_port

# Service kind -> console script.  Adding a kind is one line here.
COMMANDS = {
    "broker": "magnetar-broker",
    "coordinator": "magnetar-coordinator",
    "admin": "magnetar-admin-service",
}


def command_path(script: str) -> str:
    """The console script installed next to this Python (the project's venv)."""
    beside = Path(sys.executable).parent / script
    return str(beside) if beside.exists() else (shutil.which(script) or script)


@dataclass
class ServiceProcess:
    name: str
    kind: str
    port: int
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


class ServiceFailed(RuntimeError):
    pass


class LocalCluster:
    def __init__(self, data_dir: Path | str, *, brokers: int = 2, coordinators: int = 1,
                 admin: bool = True, database_url: str | None = None, durable: bool = True,
                 ports: dict[str, int] | None = None, extra_env: dict[str, str] | None = None):
        self.data_dir = Path(data_dir).resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.database_url = database_url or os.environ.get("MAGNETAR_DATABASE_URL") or ""
        self.postgres: LocalPostgres | None = None
        self.durable = durable
        self.extra_env = dict(extra_env or {})
        ports = ports or {}
        self.services: dict[str, ServiceProcess] = {}
        plan = [(f"broker-{i}", "broker") for i in range(brokers)]
        plan += [(f"coordinator-{i}", "coordinator") for i in range(coordinators)]
        plan += [("admin", "admin")] if admin else []
        for name, kind in plan:
            port = ports.get(name) or free_port()
            self.services[name] = ServiceProcess(name, kind, port, {}, self.data_dir / "logs" / f"{name}.log")

    # ---------------------------------------------------------------- environment

    def env_for(self, name: str) -> dict[str, str]:
        """Exactly the MAGNETAR_* variables a service gets (the Helm chart sets the same)."""
        svc = self.services[name]
        env = {
            "MAGNETAR_DATABASE_URL": self.database_url,
            "MAGNETAR_HOST": "127.0.0.1",
            "MAGNETAR_PORT": str(svc.port),
            "MAGNETAR_ADVERTISED_URL": svc.url,
            "MAGNETAR_LOG_FORMAT": "text",
        }
        if svc.kind == "broker":
            env["MAGNETAR_BROKER_ID"] = name
        if svc.kind == "coordinator":
            env["MAGNETAR_COORDINATOR_ID"] = name.rsplit("-", 1)[1]
        env.update(self.extra_env)
        return env

    @property
    def broker_urls(self) -> list[str]:
        return [s.url for s in self.services.values() if s.kind == "broker"]

    @property
    def admin_url(self) -> str:
        return self.services["admin"].url

    def url(self, name: str) -> str:
        return self.services[name].url

    # ---------------------------------------------------------------- lifecycle

    def start(self, timeout: float = 60.0) -> "LocalCluster":
        if not self.database_url:
            self.postgres = LocalPostgres(self.data_dir / "postgres", durable=self.durable).start()
            self.database_url = self.postgres.url
        from magnetar_storage.migrate import migrate

        asyncio.run(migrate(self.database_url))
        for name in self.services:
            self.start_service(name, wait=False)
        for name in self.services:
            self.wait_ready(name, timeout)
        return self

    def start_service(self, name: str, wait: bool = True, extra_env: dict | None = None,
                      timeout: float = 60.0) -> None:
        svc = self.services[name]
        if svc.alive:
            return
        svc.env = self.env_for(name) | (extra_env or {})
        svc.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(svc.log_path, "ab")
        svc.process = subprocess.Popen(
            [command_path(COMMANDS[svc.kind])], env=os.environ | svc.env,
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: a kill reaches its children
        )
        log.close()
        if wait:
            self.wait_ready(name, timeout)

    def wait_ready(self, name: str, timeout: float = 60.0) -> None:
        svc = self.services[name]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not svc.alive:
                raise ServiceFailed(f"{name} exited (code {svc.process.returncode}); see {svc.log_path}\n"
                                    + self.log_tail(name))
            try:
                with urllib.request.urlopen(svc.url + "/readyz", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.05)
        raise ServiceFailed(f"{name} not ready within {timeout:.0f}s; see {svc.log_path}\n" + self.log_tail(name))

    def send_signal(self, name: str, sig: int) -> None:
        svc = self.services[name]
        if svc.alive:
            os.killpg(svc.process.pid, sig)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        self.send_signal(name, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            self.services[name].process.wait(30)

    def stop(self, name: str) -> None:
        self.kill(name, signal.SIGTERM)

    def restart(self, name: str, **kwargs) -> None:
        if self.services[name].alive:
            self.stop(name)
        self.start_service(name, **kwargs)

    def freeze(self, name: str) -> None:
        self.send_signal(name, signal.SIGSTOP)

    def thaw(self, name: str) -> None:
        self.send_signal(name, signal.SIGCONT)

    def close(self) -> None:
        for svc in self.services.values():
            if svc.alive:
                try:
                    os.killpg(svc.process.pid, signal.SIGCONT)
                    os.killpg(svc.process.pid, signal.SIGTERM)
                    svc.process.wait(15)
                except (subprocess.TimeoutExpired, ProcessLookupError):
                    if svc.alive:
                        os.killpg(svc.process.pid, signal.SIGKILL)
                        svc.process.wait()
        if self.postgres is not None:
            self.postgres.stop()

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # ---------------------------------------------------------------- inspection

    def log_tail(self, name: str, lines: int = 40) -> str:
        path = self.services[name].log_path
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def owner_of(self, topic: str) -> str | None:
        """The service name of the broker that owns ``topic`` now (None if unowned)."""
        import asyncpg

        async def query():
            conn = await asyncpg.connect(self.database_url)
            try:
                return await conn.fetchval(
                    "SELECT o.broker_id FROM topic_owners o JOIN topics t USING (topic_id) "
                    "WHERE t.topic = $1", topic)
            finally:
                await conn.close()

        return asyncio.run(query())
