"""POST /admin/v3/transactions/transactionCoordinator/replicas: scale the coordinator
StatefulSet up (Pulsar's scale-up-only rule: a coordinator id, once used, owns keys and
transactions).  It patches the StatefulSet's scale subresource with the official
`kubernetes` client, in-cluster (the pod's service account; the chart's Role allows get
and patch on that one StatefulSet's scale and nothing else)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, FastAPI

from magnetar_protocol.errors import BadRequest, NotAllowedError, ServiceNotReady, UnknownError

from magnetar_admin.api import Body, Service, body_doc


def _apps_api(settings):
    """An AppsV1Api: in-cluster config, or MAGNETAR_KUBERNETES_API_URL (tests, or a
    kubectl proxy) when set."""
    import kubernetes  # noqa: PLC0415 (only this endpoint needs it)

    if settings.kubernetes_api_url:
        config = kubernetes.client.Configuration(host=settings.kubernetes_api_url)
    else:
        try:
            kubernetes.config.load_incluster_config()
        except kubernetes.config.ConfigException as exc:
            raise ServiceNotReady(
                f"not running in Kubernetes ({exc}); scale the coordinators with "
                "`kubectl scale statefulset/<release>-magnetar-coordinator --replicas=N`") from None
        config = kubernetes.client.Configuration.get_default_copy()
    return kubernetes.client.AppsV1Api(kubernetes.client.ApiClient(config))


def _scale(settings, replicas: int) -> dict:
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    api = _apps_api(settings)
    name, namespace = settings.coordinator_statefulset, settings.kubernetes_namespace
    try:
        current = api.read_namespaced_stateful_set_scale(name, namespace).spec.replicas
        if replicas < current:
            raise BadRequest(f"coordinators only scale up (Pulsar's rule: a coordinator id owns "
                             f"its transactions and keys): {current} now, {replicas} asked")
        if replicas > current:
            api.patch_namespaced_stateful_set_scale(name, namespace, {"spec": {"replicas": replicas}})
        return {"statefulSet": name, "namespace": namespace, "previous": current, "replicas": replicas}
    except ApiException as exc:
        raise UnknownError(f"Kubernetes API refused {exc.status} {exc.reason} for "
                           f"statefulsets/{name}/scale in {namespace}: {exc.body}") from None
    finally:
        api.api_client.close()


def kubernetes_routes() -> APIRouter:
    router = APIRouter(prefix="/admin/v3/transactions", tags=["transactions"])

    @router.post("/transactionCoordinator/replicas",
                 summary="Scale the transaction coordinators up (StatefulSet replicas)",
                 openapi_extra=body_doc({"oneOf": [{"type": "integer"}, {
                     "type": "object", "properties": {"replicas": {"type": "integer"}}}]},
                     example={"replicas": 3}))
    async def scale_coordinators(service: Service, body: Body) -> Any:
        value = body.get("replicas") if isinstance(body, dict) else body
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BadRequest("body: the number of coordinator replicas, e.g. 3 or {\"replicas\": 3}")
        if service.settings.coordinators_in_brokers:
            raise NotAllowedError(
                "the brokers host the coordinators here (broker.hostCoordinator), one each: "
                "scale the broker StatefulSet instead (`kubectl scale "
                "statefulset/<release>-magnetar-broker --replicas=N`), up only")
        result = await asyncio.to_thread(_scale, service.settings, value)
        return result

    return router


def add_kubernetes_routes(app: FastAPI) -> None:
    app.include_router(kubernetes_routes())
