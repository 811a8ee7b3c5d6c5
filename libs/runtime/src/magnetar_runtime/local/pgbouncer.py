"""A private pgbouncer in front of a LocalPostgres (tests of magnetar.pg behind a pooler).

pgbouncer refuses to run as root, so as root it runs as the PostgreSQL server's user
through ``setpriv``, like the server itself (postgres.py); its ini and auth file are
written into a folder that user can read.  It listens on a free loopback port only (no
Unix socket), authenticates clients by ``trust`` (the names must be in its auth file, as
pgbouncer requires) and logs into the server with trust too.  The Debian package's own
system service is never used.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from magnetar_runtime.local.postgres import (
    _chown_tree,
    _die_with_parent,
    _open_path_for,
    _privilege_drop,
    free_port,
)


class PgbouncerNotFound(RuntimeError):
    pass


def find_pgbouncer() -> str:
    """The pgbouncer binary: $MAGNETAR_PGBOUNCER, PATH, then Debian's /usr/sbin."""
    for candidate in (os.environ.get("MAGNETAR_PGBOUNCER"), shutil.which("pgbouncer"),
                      "/usr/sbin/pgbouncer"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise PgbouncerNotFound(
        "pgbouncer not found: install it (Debian: apt-get install pgbouncer; .ci/run does) "
        "or set MAGNETAR_PGBOUNCER to the binary")


@dataclass
class LocalPgbouncer:
    """``start()`` writes the configuration and starts pgbouncer; ``stop()`` ends it.

    ``databases``: alias -> its ``[databases]`` options beyond host/port, e.g.
    ``{"app": {"dbname": "e2e_1", "user": "app_pool", "pool_size": "2"}}`` (``user``
    forces the role pgbouncer logs in as, whatever name the client gave).  ``users``:
    the client names it accepts."""

    data_dir: Path
    server_port: int
    databases: dict[str, dict[str, str]]
    users: list[str]
    pool_mode: str = "transaction"
    default_pool_size: int = 10
    run_as: str = os.environ.get("MAGNETAR_PG_USER", "postgres")
    port: int = 0
    process: subprocess.Popen | None = field(default=None, repr=False)

    def url(self, user: str, database: str) -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def start(self, timeout: float = 30.0) -> "LocalPgbouncer":
        binary = find_pgbouncer()
        drop = _privilege_drop(self.run_as)
        self.data_dir = Path(self.data_dir).resolve()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not self.port:
            self.port = free_port()
        (self.data_dir / "userlist.txt").write_text(
            "".join(f'"{user}" ""\n' for user in self.users))
        lines = ["[databases]"]
        for alias, options in self.databases.items():
            given = {"host": "127.0.0.1", "port": str(self.server_port)} | options
            lines.append(f"{alias} = " + " ".join(f"{k}={v}" for k, v in given.items()))
        lines += [
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {self.port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {self.data_dir / 'userlist.txt'}",
            f"pool_mode = {self.pool_mode}",
            f"default_pool_size = {self.default_pool_size}",
            "max_client_conn = 200",
            f"logfile = {self.data_dir / 'pgbouncer.log'}",
            # psycopg and asyncpg may send these; pgbouncer refuses unknown ones otherwise.
            "ignore_startup_parameters = extra_float_digits,options",
        ]
        ini = self.data_dir / "pgbouncer.ini"
        ini.write_text("\n".join(lines) + "\n")
        if os.geteuid() == 0:
            os.chmod(self.data_dir, 0o755)
        _open_path_for(self.data_dir, self.run_as)
        _chown_tree(self.data_dir, self.run_as)
        out = open(self.data_dir / "stdout.log", "ab")
        self.process = subprocess.Popen([*drop, *_die_with_parent(), binary, str(ini)],
                                        stdout=out, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        self._wait_listening(timeout)
        return self

    def _wait_listening(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"pgbouncer exited with code {self.process.returncode}: "
                                   f"{self.log_tail()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"pgbouncer did not listen on {self.port} within {timeout:.0f}s")

    def log_tail(self, lines: int = 20) -> str:
        text = ""
        for name in ("stdout.log", "pgbouncer.log"):
            path = self.data_dir / name
            if path.exists():
                text += path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()  # SIGTERM: immediate shutdown
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
