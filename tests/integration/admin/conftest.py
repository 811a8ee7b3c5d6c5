"""The admin service for real: its app under uvicorn on a free loopback port (a thread of
the test process), on a fresh migrated PostgreSQL database per test (``database_url``
from tests/conftest.py).  Tests talk plain HTTP to it and look at the database directly.

``admin.call(method, path, body)`` -> (status, JSON or None); ``admin.sql(query, *args)``
-> rows as dicts; ``admin.snapshot()`` -> every row of every table, to prove a refused
request changed nothing.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import asyncpg
import pytest
import uvicorn

from magnetar_runtime.local.postgres import free_port

from magnetar_admin.app import build_app
from magnetar_admin.settings import AdminSettings

# Every table the admin service writes or deletes from (brokers' heartbeats move on their own).
SNAPSHOT = {t: f"SELECT * FROM {t}" for t in (
    "tenants", "namespaces", "partitioned_topics", "topics", "topic_owners", "entries",
    "producer_sequences", "subscriptions", "txn_entries", "txn_outcomes", "pending_acks")}
SNAPSHOT["brokers"] = "SELECT broker_id, url FROM brokers"

NO_BODY = object()


class ServerThread:
    """A uvicorn server running ``app`` on a thread; start() returns once it listens."""

    def __init__(self, app, port: int):
        config = uvicorn.Config(app, host="127.0.0.1", port=port, loop="asyncio", log_level="warning",
                                lifespan="on", timeout_graceful_shutdown=5)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name=f"uvicorn-{port}", daemon=True)
        self.url = f"http://127.0.0.1:{port}"

    def start(self, timeout: float = 30.0) -> "ServerThread":
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            assert self.thread.is_alive(), f"server {self.url} exited during startup"
            assert time.monotonic() < deadline, f"server {self.url} did not start in {timeout}s"
            time.sleep(0.01)
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


class FakeBroker:
    """A stand-in for a broker's internal JSON API (docs/protocol.md), registered in the
    ``brokers`` table with a heartbeat far in the future.  It answers topic-stats with
    ``stats[topic]`` (409 NotOwner if absent) and records every request; ``on_unload``
    runs when an unload arrives (e.g. to look at the database at that moment)."""

    def __init__(self, database_url: str, broker_id: str = "fake-broker"):
        import http.server

        self.broker_id = broker_id
        self.stats: dict[str, dict] = {}
        self.requests: list[tuple[str, str]] = []
        self.on_unload = None
        self.unload_observations: list = []
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _answer(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                topic = urllib.parse.parse_qs(url.query).get("topic", [""])[0]
                fake.requests.append(("GET", url.path + "?topic=" + topic))
                if url.path == "/internal/v1/topic-stats" and topic in fake.stats:
                    self._answer(200, fake.stats[topic])
                else:
                    self._answer(409, {"reason": f"{topic} is not served here", "code": "NotOwner"})

            def do_POST(self):
                url = urllib.parse.urlsplit(self.path)
                topic = urllib.parse.parse_qs(url.query).get("topic", [""])[0]
                fake.requests.append(("POST", url.path + "?topic=" + topic))
                if fake.on_unload is not None:
                    fake.unload_observations.append(fake.on_unload(topic))
                self._answer(200, {"unloaded": True})

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        run_sql(database_url, "INSERT INTO brokers (broker_id, url, heartbeat_at) "
                              "VALUES ($1, $2, now() + interval '1 hour')", broker_id, self.url)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake_broker(database_url):
    broker = FakeBroker(database_url)
    yield broker
    broker.close()


def own(database_url: str, topic: str, broker_id: str, epoch: int = 5) -> int:
    """Make ``broker_id`` the owner of ``topic`` at ``epoch``; returns the topic id."""
    rows = run_sql(database_url, "UPDATE topic_owners o SET broker_id = $2, epoch = $3 FROM topics t "
                                 "WHERE t.topic_id = o.topic_id AND t.topic = $1 RETURNING o.topic_id",
                   topic, broker_id, epoch)
    assert rows, f"{topic} has no lease row"
    return rows[0]["topic_id"]
