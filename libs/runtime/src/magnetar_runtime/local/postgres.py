"""A private PostgreSQL server from the machine's binaries.

PostgreSQL refuses to run as root, so when we are root the server (and initdb) run as
an unprivileged user (``postgres`` by default) through ``setpriv``; the data folder is
handed to that user.  Clients connect over TCP on 127.0.0.1 with trust auth.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import random
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

DB_USER = "magnetar"
DB_NAME = "magnetar"


class PostgresNotFound(RuntimeError):
    pass


def find_pg_bin() -> Path:
    """The folder holding initdb and postgres: $MAGNETAR_PG_BIN, PATH, then Debian's."""
    if env := os.environ.get("MAGNETAR_PG_BIN"):
        return Path(env)
    if initdb := shutil.which("initdb"):
        folder = Path(initdb).resolve().parent  # follow /usr/local/bin symlinks
        if all((folder / tool).exists() for tool in ("postgres", "pg_isready", "psql")):
            return folder
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    if candidates:
        return Path(candidates[0]).parent
    raise PostgresNotFound(
        "PostgreSQL server binaries not found: install them (Debian: apt-get install "
        "postgresql-15), set MAGNETAR_PG_BIN to the folder holding initdb and postgres, "
        "or point MAGNETAR_DATABASE_URL at an existing server"
    )


_handed_out: set[int] = set()


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A free loopback port for a service to bind a moment later.  Chosen below the
    kernel's ephemeral range, because a port the kernel hands out (bind to 0) is just as
    likely to become the source port of some outgoing connection before the service
    binds it (seen: "address already in use" with Spark and many clients running); and
    never one this process handed out before."""
    low = _ephemeral_low()
    if low > 12000:
        for _ in range(200):
            port = random.randint(10000, low - 1)
            if port in _handed_out:
                continue
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
            _handed_out.add(port)
            return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (a postmaster's backends)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _privilege_drop(user: str) -> list[str]:
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam(user)
    except KeyError:
        raise PostgresNotFound(
            f"running as root, PostgreSQL must run as another user, and user {user!r} does "
            f"not exist: install the server package (it creates 'postgres') or set "
            f"MAGNETAR_PG_USER to an unprivileged user"
        ) from None
    return ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--"]


def _die_with_parent() -> list[str]:
    """Fast-shutdown the server when the process that started it dies, even by SIGKILL,
    instead of leaving an orphan that holds the data folder.  Set after the privilege
    drop (a second setpriv): Linux clears the parent-death signal on a change of user.
    Only from the main thread: the signal fires when the *thread* that forked ends."""
    if shutil.which("setpriv") is None or threading.current_thread() is not threading.main_thread():
        return []
    return ["setpriv", "--pdeathsig", "INT", "--"]


def _open_path_for(path: Path, user: str) -> None:
    """As root, let ``user`` reach ``path``: add search permission (o+x: enter, not
    list) to every ancestor that denies it, e.g. /root, which is 0700 on Debian."""
    if os.geteuid() != 0:
        return
    pw = pwd.getpwnam(user)
    for folder in reversed(path.parents):
        st = folder.stat()
        if st.st_uid == pw.pw_uid or st.st_mode & stat.S_IXOTH:
            continue
        if st.st_gid == pw.pw_gid and st.st_mode & stat.S_IXGRP:
            continue
        os.chmod(folder, st.st_mode | stat.S_IXOTH)
        print(f"magnetar: made {folder} searchable by others (o+x) so PostgreSQL, running "
              f"as {user!r}, can reach {path}", file=sys.stderr)


def _chown_tree(path: Path, user: str) -> None:
    if os.geteuid() != 0:
        return
    pw = pwd.getpwnam(user)
    for root, _dirs, files in os.walk(path):
        os.chown(root, pw.pw_uid, pw.pw_gid)
        for name in files:
            os.chown(os.path.join(root, name), pw.pw_uid, pw.pw_gid)


@dataclass
class LocalPostgres:
    """``start()`` initialises (first time only) and starts the server; ``stop()`` ends it."""

    data_dir: Path
    port: int = 0
    durable: bool = True  # False: fsync off, for throwaway test clusters
    run_as: str = os.environ.get("MAGNETAR_PG_USER", "postgres")
    settings: dict[str, str] = field(default_factory=dict)  # more `-c name=value`
    # (certificate, key) files: the server offers TLS with them (clients may then ask
    # for sslmode=verify-full); copied next to the data, owned by the server's user.
    tls: tuple[Path, Path] | None = None
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"postgresql://{DB_USER}@127.0.0.1:{self.port}/{DB_NAME}"

    def start(self, timeout: float = 60.0) -> "LocalPostgres":
        bin_dir = find_pg_bin()
        self.data_dir = Path(self.data_dir).resolve()
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        pgdata = self.data_dir / "pgdata"
        sockets = self.data_dir / "sockets"
        sockets.mkdir(parents=True, exist_ok=True)
        drop = _privilege_drop(self.run_as)
        if os.geteuid() == 0:
            os.chmod(self.data_dir, 0o755)
        _open_path_for(self.data_dir, self.run_as)
        if pid := self.running_pid():
            raise RuntimeError(
                f"a PostgreSQL (pid {pid}) is already running on {pgdata}: another Magnetar "
                f"uses this data folder, or one was killed and left it behind (stop it with "
                f"`kill -INT {pid}`)"
            )
        if not (pgdata / "PG_VERSION").exists():
            pgdata.mkdir(parents=True, exist_ok=True)
            _chown_tree(self.data_dir, self.run_as)
            done = subprocess.run(
                [*drop, str(bin_dir / "initdb"), "-D", str(pgdata), "-U", DB_USER,
                 "--auth=trust", "-E", "UTF8", "--no-sync", "--locale=C"],
                check=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            )
            if done.returncode != 0:
                shutil.rmtree(pgdata, ignore_errors=True)  # a half-made cluster: retry clean
                raise RuntimeError(f"initdb failed for {pgdata}:\n{done.stderr.strip()}")
        _chown_tree(sockets, self.run_as)
        if not self.port:
            self.port = free_port()
        settings = {
            "listen_addresses": "127.0.0.1",
            "unix_socket_directories": str(sockets),
            "max_connections": "300",
            "shared_buffers": "256MB",
            "wal_level": "minimal",
            "max_wal_senders": "0",
            "max_wal_size": "2GB",
            "log_min_messages": "warning",
            "logging_collector": "off",
        }
        if not self.durable:
            settings |= {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
        if self.tls is not None:
            settings |= self._tls_settings()
        settings |= self.settings
        args = [*drop, *_die_with_parent(), str(bin_dir / "postgres"), "-D", str(pgdata),
                "-p", str(self.port)]
        for key, value in settings.items():
            args += ["-c", f"{key}={value}"]
        log = open(self.data_dir / "postgres.log", "ab")
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        self._wait_ready(bin_dir, timeout)
        self._ensure_database(bin_dir)
        return self

    def _tls_settings(self) -> dict[str, str]:
        # PostgreSQL reads its key only if the server's user owns it and nobody else can.
        cert, key = self.data_dir / "server.crt", self.data_dir / "server.key"
        shutil.copyfile(self.tls[0], cert)
        shutil.copyfile(self.tls[1], key)
        key.chmod(0o600)
        if os.geteuid() == 0:
            pw = pwd.getpwnam(self.run_as)
            for path in (cert, key):
                os.chown(path, pw.pw_uid, pw.pw_gid)
        return {"ssl": "on", "ssl_cert_file": str(cert), "ssl_key_file": str(key)}

    def _wait_ready(self, bin_dir: Path, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"PostgreSQL exited with code {self.process.returncode}; see "
                    f"{self.data_dir / 'postgres.log'}"
                )
            ok = subprocess.run(
                [str(bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-q"],
                check=False,
            )
            if ok.returncode == 0:
                return
            time.sleep(0.1)
        raise TimeoutError(f"PostgreSQL did not accept connections within {timeout:.0f}s")

    def _ensure_database(self, bin_dir: Path) -> None:
        psql = [str(bin_dir / "psql"), "-h", "127.0.0.1", "-p", str(self.port),
                "-U", DB_USER, "-d", "postgres", "-tAc"]
        exists = subprocess.run(
            [*psql, f"SELECT 1 FROM pg_database WHERE datname = '{DB_NAME}'"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
        if not exists:
            subprocess.run([*psql, f"CREATE DATABASE {DB_NAME}"], check=True,
                           capture_output=True)

    def create_database(self, name: str, template: str | None = None) -> str:
        """A fresh database on this server, empty or a copy of ``template`` (a database
        nobody is connected to); returns its URL."""
        psql = [str(find_pg_bin() / "psql"), "-h", "127.0.0.1",
                "-p", str(self.port), "-U", DB_USER, "-d", "postgres", "-tAc"]
        copy = f' TEMPLATE "{template}"' if template else ""
        # Two commands: psql -c runs one string as one transaction, and DROP DATABASE
        # refuses to run inside one.
        self.drop_database(name)
        subprocess.run([*psql, f'CREATE DATABASE "{name}"{copy}'], check=True, capture_output=True)
        return f"postgresql://{DB_USER}@127.0.0.1:{self.port}/{name}"

    def running_pid(self) -> int | None:
        """The pid of a live postmaster on this data folder, ours or left behind."""
        try:
            pid = int((Path(self.data_dir) / "pgdata" / "postmaster.pid").read_text().split()[0])
            os.kill(pid, 0)
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError, IndexError):
            return None
        return pid if b"postgres" in cmdline else None  # the pid may have been reused

    def stop_stale(self, timeout: float = 30.0) -> int | None:
        """Stop a postmaster left running on this data folder by a killed parent; only
        call it while holding the folder (see ``magnetar-local``).  Returns its pid."""
        pid = self.running_pid()
        if pid is None or (self.process is not None and self.process.pid == pid):
            return None
        os.kill(pid, signal.SIGINT)  # fast shutdown: roll back clients, checkpoint
        deadline = time.monotonic() + timeout
        while self.running_pid() == pid:
            if time.monotonic() > deadline:
                raise TimeoutError(f"PostgreSQL pid {pid} did not stop within {timeout:.0f}s")
            time.sleep(0.05)
        return pid

    def drop_database(self, name: str) -> None:
        psql = [str(find_pg_bin() / "psql"), "-h", "127.0.0.1",
                "-p", str(self.port), "-U", DB_USER, "-d", "postgres", "-tAc"]
        subprocess.run([*psql, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'], check=True,
                       capture_output=True)

    def stop(self, timeout: float = 30.0) -> None:
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()  # SIGTERM: smart shutdown
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL the whole server, postmaster and backends (crash tests), and return
        once every one of them is gone: a backend that outlives its postmaster keeps the
        shared memory, and a start() right after would fail ("pre-existing shared memory
        block is still in use")."""
        if self.process is not None and self.process.poll() is None:
            backends = _children(self.process.pid)
            self.process.kill()
            self.process.wait()
            for pid in backends:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + timeout
            while any(_alive(pid) for pid in backends):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"PostgreSQL backends {backends} outlived their "
                                       f"postmaster for {timeout:.0f}s after SIGKILL")
                time.sleep(0.01)
        self.process = None
