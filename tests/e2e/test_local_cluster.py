"""The local cluster itself: every process healthy, crash and restart, the environment
each service gets."""

from __future__ import annotations

import signal
import urllib.request

import pytest

pytestmark = pytest.mark.e2e


def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.status, resp.read().decode()


def test_every_service_is_healthy_ready_and_exports_metrics(cluster):
    assert set(cluster.services) == {"broker-0", "broker-1", "coordinator-0", "admin"}
    for name in cluster.services:
        assert _get(cluster.url(name) + "/healthz")[0] == 200
        assert _get(cluster.url(name) + "/readyz")[0] == 200
        status, body = _get(cluster.url(name) + "/metrics")
        assert status == 200 and "python_info" in body
    assert "pulsar_txn_active_count" in _get(cluster.url("coordinator-0") + "/metrics")[1]


def test_sigkilled_broker_restarts_with_the_same_identity(cluster):
    cluster.kill("broker-1", signal.SIGKILL)
    assert not cluster.services["broker-1"].alive
    cluster.start("broker-1")
    status, body = _get(cluster.url("broker-1") + "/internal/v1/owned-topics")
    assert status == 200 and '"brokerId":"broker-1"' in body.replace(" ", "")


def test_service_environment_names(cluster):
    common = {"MAGNETAR_DATABASE_URL", "MAGNETAR_HOST", "MAGNETAR_PORT", "MAGNETAR_ADVERTISED_URL",
              "MAGNETAR_LOG_FORMAT"}
    assert common | {"MAGNETAR_BROKER_ID"} <= set(cluster.env_for("broker-0"))
    assert cluster.env_for("coordinator-0")["MAGNETAR_COORDINATOR_ID"] == "0"
    assert "MAGNETAR_BROKER_ID" not in cluster.env_for("admin")
