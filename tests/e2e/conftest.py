"""Fixtures that start real service processes: a LocalCluster per test (its own fresh
database on the session's PostgreSQL), with timeouts short enough for crash tests.
On failure the tail of every service log is printed."""

from __future__ import annotations

import asyncio

import pytest

from magnetar_runtime.local.cluster import LocalCluster
from magnetar_storage.migrate import migrate

TEST_ENV = {
    "MAGNETAR_LEASE_TTL_MS": "2000",
    "MAGNETAR_HEARTBEAT_INTERVAL_MS": "300",
    "MAGNETAR_SESSION_TIMEOUT_MS": "2500",
    "MAGNETAR_KEEPALIVE_INTERVAL_MS": "500",
    "MAGNETAR_LOG_LEVEL": "INFO",
}


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


def _cluster(request, postgres, tmp_path, **kwargs) -> LocalCluster:
    url = postgres.create_database("e2e_" + str(abs(hash(request.node.nodeid)))[:12])
    asyncio.run(migrate(url))
    cluster = LocalCluster(tmp_path / "cluster", database_url=url, extra_env=TEST_ENV, **kwargs)
    try:
        cluster.start()
    except Exception:
        cluster.close()
        raise
    return cluster


@pytest.fixture
def cluster(request, postgres, tmp_path):
    c = _cluster(request, postgres, tmp_path, brokers=2, coordinators=1)
    yield c
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        for name in c.services:
            print(f"\n----- {name} log (tail) -----\n{c.log_tail(name, 60)}")
    c.close()


@pytest.fixture
def client(cluster):
    import magnetar

    c = magnetar.Client(",".join(cluster.broker_urls))
    yield c
    c.close()
