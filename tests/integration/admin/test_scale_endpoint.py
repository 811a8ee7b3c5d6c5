"""POST /admin/v3/transactions/transactionCoordinator/replicas: Helm values are the one
source of truth for the coordinator count, so the endpoint changes nothing (a count it
set would be undone by the next `helm upgrade` or `helm rollback`) and answers 409 with
the `helm upgrade` that does it (docs/kubernetes.md, "Scaling coordinators")."""

from __future__ import annotations

from tests.integration.admin.conftest import Admin, start_admin

ENDPOINT = "/admin/v3/transactions/transactionCoordinator/replicas"


def test_the_answer_is_the_helm_upgrade_and_nothing_changes(database_url):
    server, settings = start_admin(database_url, kubernetes_namespace="ns",
                                   coordinator_statefulset="rel-magnetar-coordinator")
    try:
        admin = Admin(server, database_url, settings)
        before = admin.snapshot()
        for body in ({"replicas": 3}, 1):
            status, answer = admin.call("POST", ENDPOINT, body)
            assert status == 409 and answer["code"] == "NotAllowedError"
            replicas = body["replicas"] if isinstance(body, dict) else body
            assert (f"helm upgrade <release> <chart> -n ns --reuse-values --set "
                    f"coordinator.replicaCount={replicas}") in answer["reason"]
            assert "statefulset/rel-magnetar-coordinator" in answer["reason"]
        for bad in ({"replicas": 0}, "three", {"replicas": True}, 10**9, [3]):
            assert "number of coordinator replicas" in admin.refused("POST", ENDPOINT, bad)
        assert admin.snapshot() == before
    finally:
        server.stop()


def test_with_coordinators_in_brokers_the_answer_names_the_broker_count(database_url):
    server, settings = start_admin(database_url, kubernetes_namespace="ns",
                                   coordinators_in_brokers=True)
    try:
        admin = Admin(server, database_url, settings)
        status, answer = admin.call("POST", ENDPOINT, {"replicas": 2})
        assert status == 409 and "--set broker.replicaCount=2" in answer["reason"]
    finally:
        server.stop()
