"""``magnetar-local``: run a whole Magnetar on this machine (like ``pulsar standalone``).

    magnetar-local run [--data-dir .magnetar] [--brokers 2] [--coordinators 1] [--fresh]
                       [--coordinator-in-broker] [--tls | --mutual-tls]
    magnetar-local env [--brokers 2] [--coordinators 1] [--coordinator-in-broker] [--tls]

``run`` keeps data under the data folder across restarts (PostgreSQL with fsync on),
restarts a service that dies, and stops everything on Ctrl-C or SIGTERM.  ``env`` prints
the MAGNETAR_* variables each service gets.  ``--tls`` makes a local CA (kept in
``<data>/tls``) and runs every hop over TLS (https://, pulsar+ssl://, PostgreSQL with
sslmode=verify-full); ``--mutual-tls`` also requires client certificates.
"""

from __future__ import annotations

import argparse
import fcntl
import importlib.util
import os
import shutil
import signal
import sys
import time
from pathlib import Path

from magnetar_runtime.local.cluster import (
    KINDS,
    LocalCluster,
    ServiceFailed,
    fixed_ports,
    port_in_use,
)
from magnetar_runtime.local.postgres import LocalPostgres, PostgresNotFound
from magnetar_storage.dsn import redact, redact_text

# A service that dies within this long of its start counts as crash-looping: wait
# longer before each further restart (1 s, 2 s, 4 s ... 30 s) instead of spinning.
STABLE_AFTER_S = 60.0
MAX_BACKOFF_S = 30.0


class Stop(Exception):
    """Raised in the main thread by SIGINT, SIGTERM or SIGHUP."""


# The repository's examples/, when running from a checkout (editable install).
EXAMPLES = Path(__file__).resolve().parents[5] / "examples"


def _here(path: Path) -> str:
    """``path`` as short as a copy-paste allows: relative when under the current folder."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def _has_admin_cli(cluster: LocalCluster) -> bool:
    """Whether the ``magnetar-admin`` command (package ``magnetar``) is installed here."""
    if not cluster.names("admin"):
        return False
    try:
        return importlib.util.find_spec("magnetar.admin_cli") is not None
    except ImportError:
        return False


def banner(cluster: LocalCluster) -> str:
    curl = f"curl -s{_tls_flags(cluster, '--cacert', '--cert', '--key')}"
    pg_log = cluster.data_dir / "postgres" / "postgres.log"
    lines = [
        "",
        f"Magnetar is running; data in {cluster.data_dir}",
        "",
        f"  service URL (clients)  {cluster.service_url}",
        f"  admin URL              {cluster.admin_url}" if cluster.names("admin") else None,
        f"  Pulsar service URL     {cluster.pulsar_service_url}  (unmodified Pulsar clients; "
        "docs/pulsar-protocol.md)" if cluster.names("broker") else None,
        f"  PostgreSQL             {redact(cluster.database_url)}",
        f"  logs                   {cluster.log_dir}/<service>.log"
        + (f" and {pg_log}" if cluster.postgres else ""),
        f"  TLS CA (trust it)      {cluster.tls_files.ca_file}  (clients: "
        "tls_trust_certs_file_path=...; magnetar-admin --tls-trust-cert-path ...)"
        if cluster.tls_files else None,
        f"  client certificate     {cluster.tls_files.cert_file} and its key "
        f"{cluster.tls_files.key_file} (mutual TLS is on)" if cluster.mutual_tls else None,
        "",
        "  processes:",
    ]
    for name, svc in cluster.services.items():
        hosted = (f" (and coordinator {svc.index})"
                  if cluster.coordinator_in_broker and svc.kind == "broker" else "")
        pulsar = f" and {svc.pulsar_url}" if svc.pulsar_url else ""
        lines.append(f"    {name:<16} {svc.url:<24} pid {svc.process.pid}{hosted}{pulsar}")
    tour = _here(EXAMPLES / "produce_consume.py") if EXAMPLES.is_dir() else None
    lines += [
        "",
        "Try, in another terminal (README.md, 'A five-minute tour'):",
        f"  {_here(Path(sys.executable))} {tour} {cluster.service_url}" if tour else None,
        f"  {_here(Path(sys.executable).parent / 'magnetar-admin')} --admin-url "
        f"{cluster.admin_url}{_tls_flags(cluster, '--tls-trust-cert-path', '--tls-cert-file', '--tls-key-file')}"
        " topics list public/default"
        if _has_admin_cli(cluster) else None,
        f"  {curl} {cluster.admin_url}/admin/v2/persistent/public/default"
        if cluster.names("admin") else None,
        f"  {curl} {cluster.service_url}/metrics | head",
        "",
        "Ctrl-C stops everything; the data stays for the next run (--fresh deletes it).",
    ]
    return "\n".join(line for line in lines if line is not None)


def _tls_flags(cluster: LocalCluster, ca: str, cert: str, key: str) -> str:
    """The CA (and, under mutual TLS, the certificate) options of a command, by its names."""
    tls = cluster.tls_files
    if tls is None:
        return ""
    mutual = f" {cert} {tls.cert_file} {key} {tls.key_file}" if cluster.mutual_tls else ""
    return f" {ca} {tls.ca_file}{mutual}"


def _lock_data_dir(data_dir: Path):
    """Hold ``<data>/magnetar-local.lock`` while running: two runs on one folder would
    fight over its PostgreSQL.  The lock dies with the process, however it dies."""
    data_dir.mkdir(parents=True, exist_ok=True)
    lock = open(data_dir / "magnetar-local.lock", "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "?"
        raise SystemExit(f"magnetar-local: another magnetar-local (pid {holder}) is running "
                         f"with {data_dir}; stop it first, or use another --data-dir") from None
    lock.seek(0)
    lock.truncate()
    lock.write(str(os.getpid()))
    lock.flush()
    return lock


def _raise_stop(signum, frame):
    raise Stop(signal.Signals(signum).name)


def _parse_env(pairs: list[str]) -> dict[str, str]:
    env = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.startswith("MAGNETAR_"):
            raise SystemExit(f"magnetar-local: --env wants MAGNETAR_NAME=value, got {pair!r}")
        env[key] = value
    return env


def _counts(args: argparse.Namespace) -> dict[str, int]:
    if args.coordinator_in_broker:
        return {"broker": args.brokers, "coordinator": 0}
    return {"broker": args.brokers, "coordinator": args.coordinators}


def watch(cluster: LocalCluster, poll_s: float = 0.5) -> None:
    """Until Stop: restart any service that dies, loudly, backing off if it keeps dying."""
    crashes: dict[str, int] = {}
    not_before: dict[str, float] = {}
    while True:
        now = time.monotonic()
        for name, svc in cluster.services.items():
            if svc.alive:
                if now - svc.started_at > STABLE_AFTER_S:
                    crashes.pop(name, None)
                continue
            if name not in not_before:
                code = svc.process.poll() if svc.process else None
                crashes[name] = crashes.get(name, 0) + 1
                delay = min(MAX_BACKOFF_S, 2.0 ** (crashes[name] - 1))
                not_before[name] = now + delay
                print(f"\n!!!! {name} DIED (exit code {code}); restarting it in {delay:.0f}s. "
                      f"Last lines of {svc.log_path}:\n{cluster.log_tail(name, 15)}\n",
                      file=sys.stderr, flush=True)
            if now >= not_before[name]:
                del not_before[name]
                try:
                    cluster.start(name)
                    print(f"!!!! {name} restarted on {svc.url} (pid {svc.process.pid})",
                          file=sys.stderr, flush=True)
                except ServiceFailed as exc:
                    print(f"!!!! restarting {name} failed: {exc}", file=sys.stderr, flush=True)
        time.sleep(poll_s)


def run(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir).resolve()
    lock = _lock_data_dir(data_dir)
    if args.fresh:
        for child in data_dir.iterdir():
            if child.name != Path(lock.name).name:
                shutil.rmtree(child) if child.is_dir() else child.unlink()
    counts = _counts(args)
    ports = {} if args.any_ports else fixed_ports(counts)
    busy = sorted(f"{name} ({port})" for name, port in ports.items() if port_in_use(port))
    if busy:
        print(f"magnetar-local: port(s) in use: {', '.join(busy)}. Is another Magnetar "
              f"running? Stop it, or pass --any-ports.", file=sys.stderr)
        return 1
    cluster = LocalCluster(data_dir, services=counts, ports=ports, durable=True,
                           env=_parse_env(args.env),
                           coordinator_in_broker=args.coordinator_in_broker,
                           tls=args.tls, mutual_tls=args.mutual_tls)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_stop)
    try:
        if not cluster.database_url:
            # We hold the folder, so a PostgreSQL still running on it is an orphan of a
            # killed run: stop it rather than fail.
            if pid := LocalPostgres(data_dir / "postgres").stop_stale():
                print(f"magnetar-local: stopped PostgreSQL pid {pid} left by an earlier run")
        where = redact(cluster.database_url) or f"a private PostgreSQL under {data_dir / 'postgres'}"
        print(f"Starting Magnetar on {where} ...", flush=True)
        cluster.start(timeout=args.timeout)
        print(banner(cluster), flush=True)
        watch(cluster)
    except (Stop, KeyboardInterrupt):
        pass
    except (PostgresNotFound, ServiceFailed, RuntimeError, OSError) as exc:
        print(f"magnetar-local: {redact_text(str(exc), cluster.database_url)}", file=sys.stderr)
        return 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C must not cut cleanup short
        print("\nStopping Magnetar ...", flush=True)
        cluster.close()
        print("Stopped.", flush=True)
        lock.close()
    return 0


def env(args: argparse.Namespace) -> int:
    counts = _counts(args)
    cluster = LocalCluster(args.data_dir, services=counts,
                           ports=fixed_ports(counts),
                           coordinator_in_broker=args.coordinator_in_broker,
                           tls=args.tls, mutual_tls=args.mutual_tls,
                           database_url=os.environ.get("MAGNETAR_DATABASE_URL")
                           or "postgresql://magnetar@127.0.0.1:<port>/magnetar")
    for name in cluster.services:
        print(f"# {name}")
        for key, value in cluster.env_for(name).items():
            print(f"{key}={value}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="magnetar-local", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (("run", "start PostgreSQL, migrations and every service"),
                            ("env", "print the MAGNETAR_* variables each service gets")):
        p = sub.add_parser(name, help=help_text)
        p.add_argument("--data-dir", default=".magnetar",
                       help="where data and logs live (default .magnetar)")
        p.add_argument("--brokers", type=int, default=KINDS["broker"].count)
        p.add_argument("--coordinators", type=int, default=KINDS["coordinator"].count)
        p.add_argument("--coordinator-in-broker", action="store_true",
                       help="no coordinator processes: each broker hosts one (small machines)")
        p.add_argument("--tls", action="store_true",
                       help="a local CA (in DATA_DIR/tls) and TLS on every hop: https://, "
                            "pulsar+ssl://, PostgreSQL with sslmode=verify-full")
        p.add_argument("--mutual-tls", action="store_true",
                       help="--tls, and every service requires a client certificate")
    run_parser = sub.choices["run"]
    run_parser.add_argument("--fresh", action="store_true",
                            help="delete the data folder's contents first")
    run_parser.add_argument("--any-ports", action="store_true",
                            help="free ports instead of 8080 (broker-0), 8081 (admin), ...")
    run_parser.add_argument("--env", action="append", default=[], metavar="MAGNETAR_X=value",
                            help="extra setting for every service (repeatable)")
    run_parser.add_argument("--timeout", type=float, default=60.0,
                            help="seconds each service may take to become ready")
    args = parser.parse_args(argv)
    return run(args) if args.command == "run" else env(args)


if __name__ == "__main__":
    sys.exit(main())
