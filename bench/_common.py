"""Shared pieces of the benchmarks: a durable PostgreSQL (fsync on, as in production),
the COPY ceiling, and figure printing.  Benchmarks print figures; they never assert."""

from __future__ import annotations

import json
import os
import shutil
import struct
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import asyncpg

from magnetar_runtime.local.postgres import LocalPostgres


@contextmanager
def durable_postgres(**settings: str):
    """MAGNETAR_DATABASE_URL if set, else a private fsync-on server for this run
    (``settings``: more server settings, e.g. to load pg_stat_statements)."""
    if url := os.environ.get("MAGNETAR_DATABASE_URL"):
        yield url
        return
    folder = Path(tempfile.mkdtemp(prefix="magnetar-bench-pg-"))
    pg = LocalPostgres(folder, durable=True, settings=settings).start()
    try:
        yield pg.url
    finally:
        pg.stop()
        shutil.rmtree(folder, ignore_errors=True)


async def copy_ceiling(url: str, messages: int, size: int, rows_per_txn: int = 1000) -> dict:
    """Write `messages` rows of `size` bytes with bare COPY, one connection,
    `rows_per_txn` rows per transaction: the most PostgreSQL does for this shape."""
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("DROP TABLE IF EXISTS bench_ceiling")
        await conn.execute(
            "CREATE TABLE bench_ceiling (topic_id bigint, entry_id bigint, payload bytea, "
            "PRIMARY KEY (topic_id, entry_id))")
        await conn.execute("ALTER TABLE bench_ceiling ALTER COLUMN payload SET STORAGE EXTERNAL")
        payload = os.urandom(size)
        started = time.perf_counter()
        for start in range(0, messages, rows_per_txn):
            rows = [(1, i, payload) for i in range(start, min(start + rows_per_txn, messages))]
            async with conn.transaction():
                await conn.copy_records_to_table(
                    "bench_ceiling", records=rows, columns=["topic_id", "entry_id", "payload"])
        elapsed = time.perf_counter() - started
        await conn.execute("DROP TABLE bench_ceiling")
    finally:
        await conn.close()
    return {"messages": messages, "seconds": round(elapsed, 3),
            "msgs_per_s": round(messages / elapsed), "mb_per_s": round(messages * size / elapsed / 1e6, 1)}


def _cpu(proc, with_reaped_children: bool = False) -> float:
    """User + system CPU seconds of ``proc`` (and of the children it has reaped)."""
    import psutil

    try:
        times = proc.cpu_times()
    except psutil.Error:
        return 0.0  # gone since it was listed
    used = times.user + times.system
    return used + (times.children_user + times.children_system if with_reaped_children else 0.0)


def cpu_seconds(sessions: dict[str, int], postmaster: int | None) -> dict[str, float]:
    """CPU seconds used so far by each named process session (a service started with its
    own session: every process of it), by PostgreSQL (the postmaster, its live children,
    and the children it reaped) and by this process (the benchmark client)."""
    import psutil

    procs = list(psutil.process_iter(["ppid"]))

    def session_of(proc) -> int | None:
        try:
            return os.getsid(proc.pid)
        except OSError:
            return None

    sids = {proc.pid: session_of(proc) for proc in procs}
    used = {name: sum(_cpu(proc) for proc in procs if sids[proc.pid] == session)
            for name, session in sessions.items()}
    if postmaster:
        used["postgresql"] = _cpu(psutil.Process(postmaster), with_reaped_children=True) + sum(
            _cpu(proc) for proc in procs if proc.info["ppid"] == postmaster)
    used["bench client"] = _cpu(psutil.Process())
    return used


async def postmaster_pid(url: str) -> int | None:
    """The pid of the PostgreSQL server behind ``url`` when it runs on this machine (the
    parent of our backend), else None."""
    import psutil

    conn = await asyncpg.connect(url)
    try:
        backend = await conn.fetchval("SELECT pg_backend_pid()")
        # Read while connected: the backend exits with the connection.
        return psutil.Process(backend).ppid()
    except psutil.Error:
        return None  # a server elsewhere: its CPU is not ours to read
    finally:
        await conn.close()


def report(title: str, figures: dict) -> None:
    print(f"\n== {title}")
    for key, value in figures.items():
        print(f"  {key:<28} {value}")
    if out := os.environ.get("MAGNETAR_BENCH_JSON"):
        with open(out, "a") as f:
            f.write(json.dumps({"bench": title, **figures}) + "\n")


def percentile(values: list[float], pct: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * pct / 100))]


@contextmanager
def bench_cluster(database_url: str, brokers: int = 1, coordinators: int = 0, admin: bool = False,
                  coordinator_in_broker: bool = False, env: dict | None = None, tls: bool = False):
    """Services as real processes on the given (fsync-on) database, fresh schema (the
    admin service only when asked: the Spark source reads partition ends from it;
    ``coordinator_in_broker``: the brokers host the coordinators; ``tls``: every port
    over TLS with a local CA, cluster.tls_files)."""
    from magnetar_runtime.local.cluster import LocalCluster

    async def reset():
        conn = await asyncpg.connect(database_url)
        try:
            await conn.execute("DROP SCHEMA public CASCADE; CREATE SCHEMA public; "
                               "DROP SCHEMA IF EXISTS magnetar_app CASCADE")  # migration 0014's
        finally:
            await conn.close()

    import asyncio

    asyncio.run(reset())
    folder = Path(tempfile.mkdtemp(prefix="magnetar-bench-"))
    cluster = LocalCluster(folder, brokers=brokers, coordinators=coordinators, admin=admin,
                           database_url=database_url, env={"MAGNETAR_LOG_LEVEL": "WARNING"} | (env or {}),
                           coordinator_in_broker=coordinator_in_broker, tls=tls)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.close()
        shutil.rmtree(folder, ignore_errors=True)


class RssSampler:
    """Peak resident memory of a process, sampled every 100 ms in a thread."""

    def __init__(self, pid: int):
        import threading

        import psutil

        self.proc = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self.peak = max(self.peak, self.proc.memory_info().rss)
            except Exception:
                return

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def paced(total: int, rate: float):
    """Yield 0..total-1, each at its due time for `rate` per second.  Sleeps rather than
    spins: a spinning thread starves the client's event-loop thread of the GIL."""
    started = time.perf_counter()
    for i in range(total):
        due = started + i / rate
        while time.perf_counter() < due:
            time.sleep(0.0002)
        yield i


def send_full_speed(producer, messages: int, size: int, ok, sample_every: int = 100,
                    timeout_s: float = 120, progress_every: int = 0, payload: bytes | None = None) -> dict:
    """``send_async`` ``messages`` payloads of ``size`` bytes (or ``payload``, then
    ``size`` is its length) as fast as ``producer`` takes them (a Magnetar or a
    pulsar-client producer: same call), then wait for every receipt.  Every
    ``sample_every``-th message is timed from the call to its receipt.  ``ok`` is the
    client's success result; any other result ends the bench."""
    import itertools
    import threading

    if payload is None:
        payload = b"x" * size
    size = len(payload)
    latencies: list[float] = []
    done = threading.Event()
    settled = itertools.count(1)
    failures: list = []

    def on_sent(result, _msg_id):
        if result != ok:
            failures.append(result)
        if next(settled) == messages:
            done.set()

    def on_sampled(result, msg_id, t):
        latencies.append(time.perf_counter() - t)
        on_sent(result, msg_id)

    started = time.perf_counter()
    for i in range(messages):
        if i % sample_every == 0:
            t = time.perf_counter()
            producer.send_async(payload, lambda r, m, t=t: on_sampled(r, m, t))
        else:
            producer.send_async(payload, on_sent)
        if progress_every and i % progress_every == 0 and i:
            print(f"  ... {i:,} queued ({i / (time.perf_counter() - started):,.0f} msgs/s)", flush=True)
    producer.flush()
    if not done.wait(timeout_s):
        raise SystemExit(f"only {next(settled) - 1} of {messages} sends settled within {timeout_s} s")
    elapsed = time.perf_counter() - started
    if failures:
        raise SystemExit(f"{len(failures)} sends failed, e.g. {failures[0]}")
    return {"messages": messages, "seconds": round(elapsed, 3), "msgs_per_s": round(messages / elapsed),
            "mb_per_s": round(messages * size / elapsed / 1e6, 1),
            "p50_publish_ms": round(percentile(latencies, 50) * 1000, 2),
            "p99_publish_ms": round(percentile(latencies, 99) * 1000, 2)}


def send_paced(producer, total: int, rate: float, payload: bytes, sample_every: int = 1,
               on_result=None, stop=None) -> list[float]:
    """Offered load: ``send_async`` paced at ``rate`` per second (see ``paced``); the
    publish latencies (call to receipt) of every ``sample_every``-th message.
    ``on_result(result)`` sees every receipt; ``stop`` (an Event) ends the loop early."""
    latencies: list[float] = []

    def sent(result, _mid, t=None):
        if t is not None:
            latencies.append(time.perf_counter() - t)
        if on_result is not None:
            on_result(result)

    for i in paced(total, rate):
        if stop is not None and stop.is_set():
            break
        if i % sample_every == 0:
            t = time.perf_counter()
            producer.send_async(payload, lambda r, m, t=t: sent(r, m, t))
        else:
            producer.send_async(payload, sent)
    producer.flush()
    return latencies


def end_to_end_latencies(consumer, producer, total: int, rate: float, size: int,
                         timeout_ms: int = 60_000) -> list[float]:
    """Send ``total`` messages of ``size`` bytes at ``rate`` (each stamped with its send
    time) while a thread receives and acknowledges them: each one's send-to-receive
    latency, s."""
    latencies: list[float] = []

    def receive_all() -> None:
        for _ in range(total):
            msg = consumer.receive(timeout_millis=timeout_ms)
            latencies.append(time.perf_counter() - struct.unpack("d", msg.data()[:8])[0])
            consumer.acknowledge(msg)

    receiver = threading.Thread(target=receive_all)
    receiver.start()
    filler = b"z" * max(size - 8, 0)
    for _ in paced(total, rate):
        producer.send_async(struct.pack("d", time.perf_counter()) + filler, lambda r, m: None)
    producer.flush()
    receiver.join()
    return latencies
