"""Fixtures for tests that need real processes: a whole Magnetar per test.

``cluster`` is a started :class:`LocalCluster` (two brokers, a coordinator, the admin
service; each its own process) on the session's PostgreSQL server (``postgres`` in
tests/conftest.py) with a fresh, migrated database of its own, so no test sees another's
topics or a broker another test killed.  Timeouts are short (``TEST_ENV``) so failover
happens within a few seconds.  Teardown stops every process; when the test failed it
prints the tail of each service's log (pytest shows it under "Captured stdout teardown").

Per-test options go in a marker, e.g.::

    @pytest.mark.cluster(brokers=3, service_env={"broker-2": {"MAGNETAR_FAILPOINTS": "x"}})

A module whose tests leave the cluster as they found it (no process killed, stopped or
restarted, no namespace policy or other cluster-wide setting changed, each test on topics
of its own) shares one cluster between them: ``pytestmark = pytest.mark.shared_cluster``
(with the module's ``cluster`` marker, if any, for its options).  Starting a cluster costs
a few seconds; a test that needs its own (it kills a broker, say) keeps one with a
``cluster`` marker of its own, even an empty ``@pytest.mark.cluster()``.

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
    # Keep acknowledged data (infinite retention): tests written before trimming read
    # topics without a subscription long after producing (readers, Spark offsets).  The
    # storage-lifecycle tests set the Pulsar default (0) themselves.
    "MAGNETAR_DEFAULT_RETENTION_TIME_MINUTES": "-1",
    "MAGNETAR_DEFAULT_RETENTION_SIZE_MB": "-1",
    "MAGNETAR_LIFECYCLE_INTERVAL_MS": "500",  # a policy a test sets applies within a second
}

LOG_TAIL_LINES = 60

_cluster_numbers = itertools.count()


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "cluster(**options): LocalCluster options for the `cluster` fixture")
    config.addinivalue_line(
        "markers", "shared_cluster: the module's tests share one cluster (tests/e2e/conftest.py)")


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


class _Clusters:
    """Clusters started for one test or one module, each on its own database copy."""

    def __init__(self, postgres, migrated_template, tmp_path_factory, label: str):
        self.postgres, self.template, self.tmp = postgres, migrated_template, tmp_path_factory
        self.label = re.sub(r"[^a-z0-9]+", "_", label.lower())
        self.made: list[tuple[LocalCluster, str]] = []

    def make(self, **options) -> LocalCluster:
        db_name = f"e2e_{next(_cluster_numbers)}_{self.label}"[:63]
        url = self.postgres.create_database(db_name, template=self.template)
        options["env"] = TEST_ENV | dict(options.get("env") or {})
        cluster = LocalCluster(self.tmp.mktemp("cluster"), database_url=url, **options)
        self.made.append((cluster, db_name))
        cluster.start()  # migrating finds nothing left to apply: the copy has it all
        return cluster

    def close(self, failed: bool) -> None:
        for cluster, db_name in self.made:
            cluster.close()
            if failed:
                _print_logs(cluster)
            self.postgres.drop_database(db_name)


@pytest.fixture
def cluster_factory(postgres, migrated_template, request, tmp_path_factory):
    """``make(**LocalCluster options)`` -> a started cluster with its own database."""
    clusters = _Clusters(postgres, migrated_template, tmp_path_factory, request.node.name)
    yield clusters.make
    clusters.close(_failed(request.node))


@pytest.fixture(scope="module")
def module_cluster_factory(postgres, migrated_template, request, tmp_path_factory):
    """``cluster_factory`` for clusters a module's tests share (a module-scoped fixture of
    the module's own); their logs are printed when any of its tests failed."""
    clusters = _Clusters(postgres, migrated_template, tmp_path_factory, request.module.__name__)
    yield clusters.make
    clusters.close(any(_failed(item) for item in request.session.items
                       if item.module is request.module))


@pytest.fixture(scope="module")
def module_cluster(module_cluster_factory, request):
    """The cluster the tests of a ``shared_cluster`` module share (the module's ``cluster``
    marker gives its options)."""
    marker = request.node.get_closest_marker("cluster")
    return module_cluster_factory(**(marker.kwargs if marker else {}))


@pytest.fixture
def cluster(cluster_factory, request) -> LocalCluster:
    own = any(m.name == "cluster" for m in request.node.own_markers)  # on the test itself
    if not own and request.node.get_closest_marker("shared_cluster"):
        cluster = request.getfixturevalue("module_cluster")
        # Failed fast (a process died in an earlier test): say so instead of a timeout.
        dead = [name for name, svc in cluster.services.items() if not svc.alive]
        assert not dead, f"the module's shared cluster lost {dead} in an earlier test"
        return cluster
    marker = request.node.get_closest_marker("cluster")
    return cluster_factory(**(marker.kwargs if marker else {}))


@pytest.fixture
def client(cluster):
    """A ``magnetar.Client`` that knows every broker of ``cluster``."""
    import magnetar  # the client library; imported here so other e2e tests need not have it

    c = magnetar.Client(",".join(cluster.broker_urls))
    yield c
    c.close()


@pytest.fixture
def wheel(cluster):
    """A ``pulsar.Client`` (the real wheel) on ``cluster``'s Pulsar listener."""
    from tests.e2e.helpers import wheel_client

    c = wheel_client(cluster.pulsar_service_url)
    yield c
    c.close()
