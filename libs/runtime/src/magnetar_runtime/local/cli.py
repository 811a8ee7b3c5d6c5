"""``magnetar-local``: run a whole Magnetar on this machine (like ``pulsar standalone``).

    magnetar-local run [--data-dir .magnetar] [--brokers 2] [--coordinators 1] [--fresh]

Data stays under the data folder across restarts; Ctrl-C stops everything cleanly.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import time
from pathlib import Path

from magnetar_runtime.local.cluster import LocalCluster, ServiceFailed
from magnetar_runtime.local.postgres import PostgresNotFound

DEFAULT_PORTS = {"broker-0": 8080, "admin": 8081, "broker-1": 8082, "coordinator-0": 8090,
                 "coordinator-1": 8091}


def _banner(cluster: LocalCluster) -> str:
    lines = ["", "Magnetar is running.", ""]
    lines.append(f"  service URL (clients)   {cluster.broker_urls[0]}")
    for name, svc in cluster.services.items():
        lines.append(f"  {name:<22}  {svc.url}")
    lines.append(f"  PostgreSQL              {cluster.database_url}")
    lines.append(f"  logs                    {cluster.data_dir / 'logs'}")
    lines += [
        "",
        "Try:",
        f"  python examples/produce_consume.py {cluster.broker_urls[0]}",
        f"  magnetar-admin --admin-url {cluster.admin_url} topics list public/default",
        "",
        "Ctrl-C stops everything; data is kept for the next run.",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir)
    if args.fresh and data_dir.exists():
        shutil.rmtree(data_dir)
    ports = {} if args.any_ports else DEFAULT_PORTS
    cluster = LocalCluster(data_dir, brokers=args.brokers, coordinators=args.coordinators,
                           ports={k: v for k, v in ports.items()}, durable=True)
    stopping = False

    def stop(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        print(f"Starting Magnetar under {data_dir.resolve()} ...", flush=True)
        cluster.start()
        print(_banner(cluster), flush=True)
        while not stopping:
            for name, svc in cluster.services.items():
                if not stopping and not svc.alive:
                    print(f"!! {name} exited with code {svc.process.returncode}; restarting it "
                          f"(log: {svc.log_path})", flush=True)
                    try:
                        cluster.start_service(name)
                    except ServiceFailed as exc:
                        print(f"!! {exc}", flush=True)
            time.sleep(0.5)
    except (PostgresNotFound, ServiceFailed) as exc:
        print(f"magnetar-local: {exc}", file=sys.stderr)
        return 1
    finally:
        print("\nStopping Magnetar ...", flush=True)
        cluster.close()
        print("Stopped.", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="magnetar-local", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="start PostgreSQL, migrations and every service")
    p.add_argument("--data-dir", default=".magnetar", help="where data and logs live (default .magnetar)")
    p.add_argument("--brokers", type=int, default=2)
    p.add_argument("--coordinators", type=int, default=1)
    p.add_argument("--fresh", action="store_true", help="delete the data folder first")
    p.add_argument("--any-ports", action="store_true", help="free ports instead of 8080/8081/...")
    args = parser.parse_args(argv)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
