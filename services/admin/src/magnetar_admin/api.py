"""Admin REST routes (JSON) on Pulsar's paths: tenants, namespaces, brokers here, topics
in api_topics.py.  Names are checked with magnetar_protocol.topics (400 when invalid)."""

from __future__ import annotations

from fastapi import APIRouter, Depends, FastAPI, Response

from magnetar_admin import bodies
from magnetar_admin.api_lookup import lookup_routes
from magnetar_admin.api_permissions import permission_routes
from magnetar_admin.api_policies import policy_routes
from magnetar_admin.api_schemas import schema_routes
from magnetar_admin.api_topics import topic_routes
from magnetar_admin.deps import NO_CONTENT, Body, Service, body_doc, tenant_admin_only
from magnetar_protocol.errors import BadRequest

TENANT_INFO = {"type": "object", "properties": {
    "adminRoles": {"type": "array", "items": {"type": "string"}},
    "allowedClusters": {"type": "array", "items": {"type": "string"}}}}


def tenant_routes(settings_cluster: str) -> APIRouter:
    r = APIRouter(prefix="/admin/v2", tags=["tenants"])

    @r.get("/tenants", summary="List tenants")
    async def list_tenants(service: Service) -> list[str]:
        return await service.store.tenants()

    @r.get("/tenants/{tenant}", summary="A tenant's configuration (TenantInfo)")
    async def get_tenant(tenant: str, service: Service) -> dict:
        roles = await service.store.tenant_roles(bodies.tenant(tenant))
        return {"adminRoles": roles, "allowedClusters": [settings_cluster]}

    @r.put("/tenants/{tenant}", summary="Create a tenant (409 if it exists)", **NO_CONTENT,
           openapi_extra=body_doc(TENANT_INFO, required=False,
                                  example={"adminRoles": ["ops"], "allowedClusters": [settings_cluster]}))
    async def create_tenant(tenant: str, service: Service, body: Body) -> Response:
        roles = bodies.tenant_info(body, settings_cluster)
        await service.store.create_tenant(bodies.tenant(tenant), roles)
        return Response(status_code=204)

    @r.post("/tenants/{tenant}", summary="Update a tenant's configuration", **NO_CONTENT,
            openapi_extra=body_doc(TENANT_INFO))
    async def update_tenant(tenant: str, service: Service, body: Body) -> Response:
        if body is bodies.MISSING:
            raise BadRequest('the body must be a TenantInfo object: {"adminRoles": [...]}')
        roles = bodies.tenant_info(body, settings_cluster)
        await service.store.update_tenant(bodies.tenant(tenant), roles)
        return Response(status_code=204)

    @r.delete("/tenants/{tenant}", summary="Delete a tenant (409 while it has namespaces)", **NO_CONTENT)
    async def delete_tenant(tenant: str, service: Service) -> Response:
        await service.store.delete_tenant(bodies.tenant(tenant))
        return Response(status_code=204)

    @r.get("/clusters", summary="List clusters (a Magnetar deployment is one cluster)", tags=["clusters"])
    async def clusters() -> list[str]:
        return [settings_cluster]

    return r


def namespace_routes() -> APIRouter:
    r = APIRouter(prefix="/admin/v2/namespaces", tags=["namespaces"],
                  dependencies=[Depends(tenant_admin_only)])

    @r.get("/{tenant}", summary="List a tenant's namespaces (as tenant/namespace)")
    async def list_namespaces(tenant: str, service: Service) -> list[str]:
        return await service.store.namespaces(bodies.tenant(tenant))

    @r.put("/{tenant}/{namespace}", summary="Create a namespace (409 if it exists)", **NO_CONTENT)
    async def create_namespace(tenant: str, namespace: str, service: Service) -> Response:
        await service.store.create_namespace(*bodies.namespace(tenant, namespace))
        return Response(status_code=204)

    @r.delete("/{tenant}/{namespace}", **NO_CONTENT,
              summary="Delete a namespace (409 while it has topics, unless force=true deletes them)")
    async def delete_namespace(tenant: str, namespace: str, service: Service, force: bool = False) -> Response:
        await service.delete_namespace(*bodies.namespace(tenant, namespace), force)
        return Response(status_code=204)

    @r.get("/{tenant}/{namespace}/topics", summary="List a namespace's topics (partitions included)")
    async def namespace_topics(tenant: str, namespace: str, service: Service) -> list[str]:
        return await service.store.topics(*bodies.namespace(tenant, namespace))

    @r.get("/{tenant}/{namespace}/deduplication",
           summary="The namespace's deduplication policy: true, false or null (the broker default)")
    async def get_deduplication(tenant: str, namespace: str, service: Service) -> bool | None:
        return await service.store.deduplication(*bodies.namespace(tenant, namespace))

    @r.post("/{tenant}/{namespace}/deduplication", **NO_CONTENT,
            summary="Turn deduplication on or off for the namespace (body: true or false)",
            openapi_extra=body_doc({"type": "boolean"}, example=True))
    async def set_deduplication(tenant: str, namespace: str, service: Service, body: Body) -> Response:
        enabled = bodies.boolean(body, "deduplication")
        await service.store.set_deduplication(*bodies.namespace(tenant, namespace), enabled)
        return Response(status_code=204)

    @r.delete("/{tenant}/{namespace}/deduplication", **NO_CONTENT,
              summary="Remove the namespace's deduplication policy (back to the broker default)")
    async def remove_deduplication(tenant: str, namespace: str, service: Service) -> Response:
        await service.store.set_deduplication(*bodies.namespace(tenant, namespace), None)
        return Response(status_code=204)

    return r


def broker_routes() -> APIRouter:
    r = APIRouter(prefix="/admin/v2/brokers", tags=["brokers"])

    @r.get("", summary="URLs of the live brokers (heartbeat within the lease TTL)")
    async def brokers(service: Service) -> list[str]:
        return [b["url"] for b in await service.store.brokers()]

    @r.get("/ownership", summary="Which broker holds the lease of each owned topic or partition")
    async def ownership(service: Service) -> list[dict]:
        return await service.ownership()

    return r


def add_routes(app: FastAPI, cluster: str) -> None:
    # Permissions first: their paths are more specific than the topic routes'.
    for router in (permission_routes(), policy_routes(), schema_routes(), tenant_routes(cluster), namespace_routes(),
                   topic_routes(), broker_routes(), lookup_routes()):
        app.include_router(router)
