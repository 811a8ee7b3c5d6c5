"""Helpers of the Spark tests that share one cluster per module (test_magnetar_batch.py,
test_magnetar_streaming.py): their `cluster`/`client` fixtures and the data source
options that point at that cluster."""

from __future__ import annotations

import pytest


def module_cluster_fixtures():
    """`cluster` and `client` fixtures that hand every test of the calling module the
    module's one cluster (``module_cluster``/``module_client`` in conftest.py).  Use as
    ``cluster, client = module_cluster_fixtures()`` at module level: each test then uses
    topics, keys and subscriptions of its own."""

    @pytest.fixture(name="cluster")
    def shared_cluster(module_cluster):
        return module_cluster

    @pytest.fixture(name="client")
    def shared_client(module_client):
        return module_client

    return shared_cluster, shared_client


def options(cluster) -> dict:
    """The data source options that reach ``cluster``."""
    return {"service.url": ",".join(cluster.broker_urls), "admin.url": cluster.admin_url}
