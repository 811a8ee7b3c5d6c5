"""Spark tests: one local SparkSession per test session (``local[2]``, two shuffle
partitions, no UI), with the ``magnetar`` data source registered, and the real local
Magnetar of the e2e tests (``cluster``, ``client``: one whole cluster per test)."""

from __future__ import annotations

import os
import sys

import pytest

from tests.e2e.conftest import (  # noqa: F401 - fixtures and hooks shared with tests/e2e
    client,
    cluster,
    cluster_factory,
    pytest_configure,
    pytest_runtest_makereport,
)


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
