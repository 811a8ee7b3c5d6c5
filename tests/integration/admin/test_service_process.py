"""``magnetar-admin-service`` as its own process, configured by MAGNETAR_* variables
only; and the OpenAPI document."""

from __future__ import annotations

import os
import signal
import subprocess

from magnetar_runtime.local.cluster import command_path
from magnetar_runtime.local.postgres import free_port
from tests.integration.admin.conftest import http
from tests.waiting import wait_until


def _wait_ready(url: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    def ready() -> bool:
        assert proc.poll() is None, f"the service exited with {proc.returncode}"
        try:
            return http("GET", url + "/readyz", timeout=2)[0] == 200
        except OSError:
            return False

    wait_until(ready, timeout, "the service becoming ready")


def test_service_runs_from_environment_and_stops_on_sigterm(database_url, tmp_path):
    port = free_port()
    env = os.environ | {"MAGNETAR_DATABASE_URL": database_url, "MAGNETAR_PORT": str(port),
                        "MAGNETAR_LOG_FORMAT": "text"}
    log = open(tmp_path / "admin.log", "w")
    proc = subprocess.Popen([command_path("magnetar-admin-service")], env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url, proc)
        assert http("GET", url + "/healthz") == (200, {"status": "ok", "service": "admin"})
        assert http("PUT", url + "/admin/v2/tenants/from-process")[0] == 204
        assert http("GET", url + "/admin/v2/tenants") == (200, ["from-process", "public"])
        assert "magnetar_request_errors_total" in _text(url + "/metrics")
        proc.send_signal(signal.SIGTERM)
        # uvicorn shuts down gracefully, then re-raises the signal it caught
        assert proc.wait(timeout=20) in (0, -signal.SIGTERM)
        log.flush()
        assert "Application shutdown complete" in (tmp_path / "admin.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


def test_service_without_a_database_exits_instead_of_serving_errors(postgres, tmp_path):
    port = free_port()
    env = os.environ | {"MAGNETAR_DATABASE_URL": f"postgresql://nobody@127.0.0.1:{free_port()}/none",
                        "MAGNETAR_PORT": str(port)}
    proc = subprocess.run([command_path("magnetar-admin-service")], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode != 0
    assert "Connect" in proc.stdout + proc.stderr or "refused" in proc.stdout + proc.stderr


def _text(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(url, timeout=10) as resp:
        return resp.read().decode()


def test_openapi_documents_every_route_with_a_summary(admin):
    status, spec = http("GET", admin.url + "/openapi.json")
    assert status == 200
    ops = {(method.upper(), path): op for path, item in spec["paths"].items() for method, op in item.items()}
    for (method, path), op in ops.items():
        assert op.get("summary"), f"{method} {path} has no summary"
    topic = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
    for expected in [("GET", "/admin/v2/tenants"), ("PUT", "/admin/v2/tenants/{tenant}"),
                     ("DELETE", "/admin/v2/tenants/{tenant}"), ("GET", "/admin/v2/namespaces/{tenant}"),
                     ("PUT", "/admin/v2/namespaces/{tenant}/{namespace}"),
                     ("POST", "/admin/v2/namespaces/{tenant}/{namespace}/deduplication"),
                     ("GET", "/admin/v2/namespaces/{tenant}/{namespace}/topics"),
                     ("PUT", topic + "/partitions"), ("PUT", topic), ("DELETE", topic),
                     ("GET", "/admin/v2/persistent/{tenant}/{namespace}"),
                     ("GET", "/admin/v2/persistent/{tenant}/{namespace}/partitioned"),
                     ("GET", topic + "/stats"), ("GET", topic + "/internalStats"),
                     ("GET", topic + "/internal-stats"), ("GET", topic + "/partitioned-stats"),
                     ("GET", topic + "/subscriptions"), ("DELETE", topic + "/subscription/{subscription}"),
                     ("GET", "/admin/v2/brokers"), ("GET", "/admin/v2/brokers/ownership")]:
        assert expected in ops, expected
    body = ops[("PUT", topic + "/partitions")]["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"type": "integer", "minimum": 1}
