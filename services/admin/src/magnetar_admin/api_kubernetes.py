"""POST /admin/v3/transactions/transactionCoordinator/replicas (Pulsar's path): the
coordinator count has one source of truth, the Helm value `coordinator.replicaCount`
(`broker.replicaCount` when the brokers host the coordinators), so this endpoint changes
nothing and answers 409 with the `helm upgrade` to run.  Patching the StatefulSet here, as
it once did, was undone by the next `helm upgrade` or `helm rollback`
(docs/kubernetes.md, "Scaling coordinators").  Scaling down is safe either way: a live
coordinator adopts the TCID of a removed one (docs/transactions.md)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, FastAPI

from magnetar_admin.deps import Body, Service, body_doc
from magnetar_protocol.errors import BadRequest, NotAllowedError


def helm_answer(settings, replicas: int) -> str:
    """Why nothing is scaled here, and the command that does it."""
    value, what = (("broker.replicaCount", "the brokers host the coordinators here "
                    "(broker.hostCoordinator), one each")
                   if settings.coordinators_in_brokers else
                   ("coordinator.replicaCount", f"the coordinators are statefulset/"
                    f"{settings.coordinator_statefulset} in namespace {settings.kubernetes_namespace}"))
    return (f"the coordinator count is the Helm value {value}, its one source of truth "
            f"({what}; a count set here would be undone by the next helm upgrade or "
            f"rollback): run `helm upgrade <release> <chart> -n {settings.kubernetes_namespace} "
            f"--reuse-values --set {value}={replicas}`. Scaling down is safe: live "
            "coordinators adopt the ids of removed ones")


def kubernetes_routes() -> APIRouter:
    router = APIRouter(prefix="/admin/v3/transactions", tags=["transactions"])

    @router.post("/transactionCoordinator/replicas",
                 summary="Scale the transaction coordinators: answers 409 with the helm "
                         "upgrade that does it (Helm values are the one source of truth)",
                 openapi_extra=body_doc({"oneOf": [{"type": "integer"}, {
                     "type": "object", "properties": {"replicas": {"type": "integer"}}}]},
                     example={"replicas": 3}))
    async def scale_coordinators(service: Service, body: Body) -> Any:
        value = body.get("replicas") if isinstance(body, dict) else body
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000:
            raise BadRequest("body: the number of coordinator replicas (1-10000), e.g. 3 or "
                             "{\"replicas\": 3}")
        raise NotAllowedError(helm_answer(service.settings, value))

    return router


def add_kubernetes_routes(app: FastAPI) -> None:
    app.include_router(kubernetes_routes())
