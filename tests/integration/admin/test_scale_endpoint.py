"""POST /admin/v3/transactions/transactionCoordinator/replicas.

Tested at the HTTP boundary of the `kubernetes` client: there is no cluster here, so a
small HTTP server plays the Kubernetes API server's StatefulSet scale subresource (GET
and PATCH of /apis/apps/v1/namespaces/{ns}/statefulsets/{name}/scale) and records what
the real client sent.  The admin service and the client code are the real ones."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.integration.admin.conftest import Admin, start_admin

PATH = "/apis/apps/v1/namespaces/ns/statefulsets/rel-magnetar-coordinator/scale"
ENDPOINT = "/admin/v3/transactions/transactionCoordinator/replicas"


class FakeApiServer:
    def __init__(self, replicas: int):
        self.replicas = replicas
        self.patches: list[tuple[str, dict]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _scale(self, status: int = 200):
                body = json.dumps({"apiVersion": "autoscaling/v1", "kind": "Scale",
                                   "metadata": {"name": "rel-magnetar-coordinator", "namespace": "ns"},
                                   "spec": {"replicas": outer.replicas},
                                   "status": {"replicas": outer.replicas}}).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path != PATH:
                    self.send_error(404)
                    return
                self._scale()

            def do_PATCH(self):
                if self.path != PATH:
                    self.send_error(404)
                    return
                patch = json.loads(self.rfile.read(int(self.headers["content-length"])))
                outer.patches.append((self.headers["content-type"], patch))
                outer.replicas = patch["spec"]["replicas"]
                self._scale()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


@pytest.fixture
def k8s():
    server = FakeApiServer(replicas=1)
    yield server
    server.close()


@pytest.fixture
def scaler(database_url, k8s):
    server, settings = start_admin(database_url, kubernetes_api_url=k8s.url,
                                   kubernetes_namespace="ns",
                                   coordinator_statefulset="rel-magnetar-coordinator")
    yield Admin(server, database_url, settings)
    server.stop()


def test_scales_the_coordinator_statefulset_up_only(scaler, k8s):
    answer = scaler.ok("POST", ENDPOINT, {"replicas": 3})
    assert answer == {"statefulSet": "rel-magnetar-coordinator", "namespace": "ns",
                      "previous": 1, "replicas": 3}
    [(content_type, patch)] = k8s.patches
    assert patch == {"spec": {"replicas": 3}} and "patch" in content_type
    assert scaler.ok("POST", ENDPOINT, 3)["previous"] == 3  # a bare number; same count: no patch
    assert len(k8s.patches) == 1
    reason = scaler.refused("POST", ENDPOINT, {"replicas": 2})
    assert "only scale up" in reason and k8s.replicas == 3
    for bad in ({"replicas": 0}, "three", {"replicas": True}):
        assert "number of coordinator replicas" in scaler.refused("POST", ENDPOINT, bad)


def test_outside_kubernetes_the_answer_says_what_to_do_instead(admin):
    status, answer = admin.call("POST", ENDPOINT, {"replicas": 2})
    assert status == 503 and "kubectl scale statefulset" in answer["reason"]


def test_with_coordinators_in_brokers_the_answer_says_to_scale_the_brokers(database_url, k8s):
    server, settings = start_admin(database_url, kubernetes_api_url=k8s.url,
                                   kubernetes_namespace="ns", coordinators_in_brokers=True)
    try:
        admin = Admin(server, database_url, settings)
        status, answer = admin.call("POST", ENDPOINT, {"replicas": 2})
        assert status == 409 and "statefulset/<release>-magnetar-broker" in answer["reason"]
        assert k8s.patches == []
    finally:
        server.stop()
