"""The admin service for real: its app under uvicorn on a free loopback port (a thread of
the test process), on a fresh migrated PostgreSQL database per test (``database_url``
from tests/conftest.py).  Tests talk plain HTTP to it and look at the database directly.

``admin.call(method, path, body)`` -> (status, JSON or None); ``admin.sql(query, *args)``
-> rows as dicts; ``admin.snapshot()`` -> every row of every table, to prove a refused
request changed nothing.

Live stats, fencing and ownership need brokers: ``live`` is a real Magnetar (broker and
coordinator processes) shared by a test module, ``live_admin`` the admin service on its
database.  No stand-in brokers: what a broker answers is what the real one answers.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from typing import Any

import asyncpg
import pytest
import uvicorn

from magnetar_admin.app import build_app
from magnetar_admin.settings import AdminSettings
from magnetar_runtime.local.cluster import LocalCluster
from magnetar_runtime.local.postgres import free_port
from tests.waiting import wait_until

# Every table the admin service writes or deletes from (brokers' heartbeats move on their own).
SNAPSHOT = {t: f"SELECT * FROM {t}" for t in (
    "tenants", "namespaces", "partitioned_topics", "topics", "topic_owners", "entries",
    "producer_sequences", "subscriptions", "txn_entries", "txn_outcomes", "pending_acks",
    "namespace_permissions", "topic_permissions", "subscription_permissions", "storage_policies", "schemas")}
SNAPSHOT["brokers"] = "SELECT broker_id, url FROM brokers"

NO_BODY = object()


class ServerThread:
    """A uvicorn server running ``app`` on a thread; start() returns once it listens."""

    def __init__(self, app, port: int, **uvicorn_options):
        config = uvicorn.Config(app, host="127.0.0.1", port=port, loop="asyncio", log_level="warning",
                                lifespan="on", timeout_graceful_shutdown=5, **uvicorn_options)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name=f"uvicorn-{port}", daemon=True)
        scheme = "https" if uvicorn_options.get("ssl_certfile") else "http"
        self.url = f"{scheme}://127.0.0.1:{port}"

    def start(self, timeout: float = 30.0) -> "ServerThread":
        self.thread.start()
        def started() -> bool:
            assert self.thread.is_alive(), f"server {self.url} exited during startup"
            return self.server.started

        wait_until(started, timeout, f"server {self.url} starting", interval=0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(15)
        assert not self.thread.is_alive(), f"server {self.url} did not stop"


def http(method: str, url: str, body: Any = NO_BODY, raw: bytes | None = None,
         headers: dict | None = None, timeout: float = 30.0) -> tuple[int, Any]:
    data = raw if raw is not None else (None if body is NO_BODY else json.dumps(body).encode())
    hdrs = {"content-type": "application/json"} if body is not NO_BODY else {}
    req = urllib.request.Request(url, data=data, method=method, headers=hdrs | (headers or {}))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, payload = resp.status, resp.read()
    except urllib.error.HTTPError as err:
        status, payload = err.code, err.read()
    return status, (json.loads(payload) if payload else None)


def run_sql(database_url: str, query: str, *args) -> list[dict]:
    async def go():
        conn = await asyncpg.connect(database_url)
        try:
            return [dict(r) for r in await conn.fetch(query, *args)]
        finally:
            await conn.close()
    return asyncio.run(go())


def snapshot(database_url: str) -> dict[str, list]:
    """Every row of every table the admin service writes (and the log it deletes)."""
    async def go():
        conn = await asyncpg.connect(database_url)
        try:
            return {t: sorted(repr(tuple(r.values())) for r in await conn.fetch(query))
                    for t, query in SNAPSHOT.items()}
        finally:
            await conn.close()
    return asyncio.run(go())


class Admin:
    def __init__(self, server: ServerThread, database_url: str, settings: AdminSettings):
        self.server = server
        self.url = server.url
        self.database_url = database_url
        self.settings = settings

    def call(self, method: str, path: str, body: Any = NO_BODY, **kw) -> tuple[int, Any]:
        return http(method, self.url + path, body, **kw)

    def ok(self, method: str, path: str, body: Any = NO_BODY, **kw) -> Any:
        status, answer = self.call(method, path, body, **kw)
        assert status in (200, 204), f"{method} {path} -> {status} {answer}"
        return answer

    def sql(self, query: str, *args) -> list[dict]:
        return run_sql(self.database_url, query, *args)

    def snapshot(self) -> dict[str, list]:
        return snapshot(self.database_url)

    def refused(self, method: str, path: str, body: Any = NO_BODY, status: int = 400,
                code: str | None = None, **kw) -> str:
        """Assert the request is refused with ``status`` (and ``code``) and that the
        database is exactly as before; return the reason."""
        before = self.snapshot()
        got, answer = self.call(method, path, body, **kw)
        assert got == status, f"{method} {path}: expected {status}, got {got} {answer}"
        assert isinstance(answer, dict) and answer.get("reason"), answer
        if code is not None:
            assert answer["code"] == code, answer
        assert self.snapshot() == before, f"{method} {path} was refused but changed the database"
        return answer["reason"]


def start_admin(database_url: str, **settings) -> tuple[ServerThread, AdminSettings]:
    s = AdminSettings(database_url=database_url, port=free_port(), **settings)
    return ServerThread(build_app(s), s.port).start(), s


@pytest.fixture
def admin(database_url):
    server, settings = start_admin(database_url, lease_ttl_ms=2000, broker_request_timeout_ms=3000)
    yield Admin(server, database_url, settings)
    server.stop()


@pytest.fixture(scope="module")
def live(postgres, tmp_path_factory, request):
    """One real Magnetar (broker, coordinator and, if asked, admin processes) per test
    module, on a database of its own: starting one costs seconds, so the tests of a
    module share it and keep apart by topic names.  A module sets ``LIVE_CLUSTER``
    (LocalCluster options, e.g. ``{"brokers": 2, "admin": True}``) to change it.  When a
    test of the module failed, teardown prints each service's log tail."""
    from tests.e2e.conftest import TEST_ENV, _print_logs

    options = dict(getattr(request.module, "LIVE_CLUSTER", {}))
    options["env"] = TEST_ENV | dict(options.get("env") or {})
    db_name = ("live_" + request.module.__name__.rsplit(".", 1)[-1])[:63]
    url = postgres.create_database(db_name)
    cluster = LocalCluster(tmp_path_factory.mktemp("live"), database_url=url, **options)
    cluster.start()
    failures = request.session.testsfailed
    yield cluster
    cluster.close()
    if request.session.testsfailed > failures:
        _print_logs(cluster)
    postgres.drop_database(db_name)


@pytest.fixture
def live_admin(live):
    """The admin service (in this process, so each test picks its settings) on the live
    cluster's database: it sees the real brokers' heartbeats and asks them for stats."""
    server, settings = start_admin(live.database_url, lease_ttl_ms=2000, broker_request_timeout_ms=1000)
    yield Admin(server, live.database_url, settings)
    server.stop()


def until(condition, what: str, timeout: float = 20.0):
    """tests.waiting.wait_until with this package's argument order and default."""
    return wait_until(condition, timeout, what)


def own(database_url: str, topic: str, broker_id: str, epoch: int = 5) -> int:
    """Make ``broker_id`` the owner of ``topic`` at ``epoch``; returns the topic id."""
    rows = run_sql(database_url, "UPDATE topic_owners o SET broker_id = $2, epoch = $3 FROM topics t "
                                 "WHERE t.topic_id = o.topic_id AND t.topic = $1 RETURNING o.topic_id",
                   topic, broker_id, epoch)
    assert rows, f"{topic} has no lease row"
    return rows[0]["topic_id"]


@pytest.fixture
def cli(admin, capsys):
    """``magnetar-admin`` in process against the module's ``admin``: (exit code, stdout,
    stderr) of ``cli(*args)``."""
    from magnetar.admin_cli import run

    def call(*args: str) -> tuple[int, str, str]:
        code = run(["--admin-url", admin.url, *args])
        out = capsys.readouterr()
        return code, out.out, out.err
    return call
