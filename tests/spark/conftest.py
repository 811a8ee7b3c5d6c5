"""Spark tests: one local SparkSession per test session (``local[2]``, two shuffle
partitions, no UI), with the ``magnetar`` data source registered, and the real local
Magnetar of the e2e tests: ``cluster``/``client`` (one whole cluster per test), or
``module_cluster``/``module_client`` (one per test module, for tests that only need
topics of their own: starting a cluster costs a few seconds)."""

from __future__ import annotations

import os
import re
import sys

import pytest

from magnetar_runtime.local.cluster import LocalCluster
from tests.e2e.conftest import (  # noqa: F401 - fixtures and hooks shared with tests/e2e
    TEST_ENV,
    _print_logs,
    client,
    cluster,
    cluster_factory,
    pytest_configure,
    pytest_runtest_makereport,
)


@pytest.fixture(scope="module")
def module_cluster(postgres, request, tmp_path_factory):
    """A started cluster shared by the tests of one module, on its own database."""
    db_name = "spark_" + re.sub(r"[^a-z0-9]+", "_", request.module.__name__.lower())[-50:]
    url = postgres.create_database(db_name)
    # No minimum age before trimming: a streaming test watches its checkpoint's entries
    # trimmed seconds after they were written (retention 0 on its topic).
    env = TEST_ENV | {"MAGNETAR_TRIM_MIN_AGE_S": "0"}
    shared = LocalCluster(tmp_path_factory.mktemp("cluster"), database_url=url, env=env)
    failed_before = request.session.testsfailed
    shared.start()
    yield shared
    shared.close()
    if request.session.testsfailed > failed_before:
        _print_logs(shared)
    postgres.drop_database(db_name)


@pytest.fixture(scope="module")
def module_client(module_cluster):
    import magnetar

    c = magnetar.Client(",".join(module_cluster.broker_urls))
    yield c
    c.close()


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    # Spark's Python workers must run this interpreter (the venv with magnetar in it).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import magnetar.spark

    session = (SparkSession.builder.master("local[2]").appName("magnetar-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.streaming.stopTimeout", "60s")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    magnetar.spark.register(session)
    yield session
    session.stop()
