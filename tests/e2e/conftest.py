"""Fixtures for tests that need real processes: a whole Magnetar per test.

``cluster`` is a started :class:`LocalCluster` (two brokers, a coordinator, the admin
service; each its own process) on the session's PostgreSQL server (``postgres`` in
tests/conftest.py) with a fresh, migrated database of its own, so no test sees another's
topics or a broker another test killed.  Timeouts are short (``TEST_ENV``) so failover
happens within a few seconds.  Teardown stops every process; when the test failed it
prints the tail of each service's log (pytest shows it under "Captured stdout teardown").

Per-test options go in a marker, e.g.::

    @pytest.mark.cluster(brokers=3, service_env={"broker-2": {"MAGNETAR_FAILPOINTS": "x"}})

``cluster_factory(**options)`` starts more clusters in one test; ``client`` is a
``magnetar.Client`` connected to ``cluster``'s brokers.
"""

from __future__ import annotations

import itertools
import re

import pytest

from magnetar_runtime.local.cluster import LocalCluster

# Short enough that takeovers and session expiry happen within a test's patience; the
# heartbeat stays at a quarter of the lease so a busy 2-core machine does not lose one.
TEST_ENV = {
    "MAGNETAR_HEARTBEAT_INTERVAL_MS": "500",
    "MAGNETAR_LEASE_TTL_MS": "2000",
    "MAGNETAR_SESSION_TIMEOUT_MS": "3000",
    "MAGNETAR_KEEPALIVE_INTERVAL_MS": "1000",
    "MAGNETAR_DB_POOL_SIZE": "5",
}

LOG_TAIL_LINES = 60

_cluster_numbers = itertools.count()


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "cluster(**options): LocalCluster options for the `cluster` fixture")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    # Keep each phase's report on the test item so fixture teardown knows the outcome.
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


def _failed(node) -> bool:
    return any(getattr(getattr(node, f"report_{phase}", None), "failed", False)
               for phase in ("setup", "call"))


def _print_logs(cluster: LocalCluster) -> None:
    for name, svc in cluster.services.items():
        print(f"\n---- last {LOG_TAIL_LINES} lines of {name} ({svc.log_path}) ----")
        print(cluster.log_tail(name, LOG_TAIL_LINES))
    if cluster.postgres is not None:
        print(f"\n---- PostgreSQL log: {cluster.postgres.data_dir / 'postgres.log'}")


@pytest.fixture
def cluster_factory(postgres, migrated_template, request, tmp_path_factory):
    """``make(**LocalCluster options)`` -> a started cluster with its own database."""
    made: list[tuple[LocalCluster, str]] = []

    def make(**options) -> LocalCluster:
        test = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())
        db_name = f"e2e_{next(_cluster_numbers)}_{test}"[:63]
        url = postgres.create_database(db_name, template=migrated_template)
        options["env"] = TEST_ENV | dict(options.get("env") or {})
        cluster = LocalCluster(tmp_path_factory.mktemp("cluster"), database_url=url, **options)
        made.append((cluster, db_name))
        cluster.start()  # migrating finds nothing left to apply: the copy has it all
        return cluster

    yield make
    failed = _failed(request.node)
    for cluster, db_name in made:
        cluster.close()
        if failed:
            _print_logs(cluster)
        postgres.drop_database(db_name)


@pytest.fixture
def cluster(cluster_factory, request) -> LocalCluster:
    marker = request.node.get_closest_marker("cluster")
    return cluster_factory(**(marker.kwargs if marker else {}))


@pytest.fixture
def client(cluster):
    """A ``magnetar.Client`` that knows every broker of ``cluster``."""
    import magnetar  # the client library; imported here so other e2e tests need not have it

    c = magnetar.Client(",".join(cluster.broker_urls))
    yield c
    c.close()
