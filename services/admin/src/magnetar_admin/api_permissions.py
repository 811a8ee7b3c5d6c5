"""Permission routes on Pulsar's paths (docs/admin.md "Permissions", docs/security.md):
namespace grants, topic grants and subscription auth.  A superuser or the tenant's admin
may use them (api.tenant_admin_only); the rules they feed: magnetar_runtime.permissions."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response

from magnetar_admin import bodies
from magnetar_admin.deps import NO_CONTENT, Body, Service, body_doc, tenant_admin_only
from magnetar_runtime import permissions

NAMESPACE = "/admin/v2/namespaces/{tenant}/{namespace}"
TOPIC = "/admin/v2/persistent/{tenant}/{namespace}/{topic}"
ACTIONS_BODY = {"type": "array", "items": {"type": "string", "enum": list(permissions.ACTIONS)}}
ROLES_BODY = {"type": "array", "items": {"type": "string"}}


def permission_routes() -> APIRouter:
    r = APIRouter(tags=["permissions"], dependencies=[Depends(tenant_admin_only)])

    @r.get(NAMESPACE + "/permissions", summary="The namespace's grants: {role: [actions]}")
    async def namespace_permissions(tenant: str, namespace: str, service: Service) -> dict:
        return await service.store.namespace_grants(*bodies.namespace(tenant, namespace))

    @r.post(NAMESPACE + "/permissions/subscription/{subscription}", **NO_CONTENT,
            summary="Only these roles may consume through the subscription (body: [roles])",
            openapi_extra=body_doc(ROLES_BODY, example=["app"]))
    async def grant_subscription(tenant: str, namespace: str, subscription: str,
                                 service: Service, body: Body) -> Response:
        ns = bodies.namespace(tenant, namespace)
        sub, roles = bodies.subscription(subscription), permissions.validate_roles(body)
        await service.store.grant_subscription(*ns, sub, roles)
        return Response(status_code=204)

    @r.get(NAMESPACE + "/permissions/subscription",
           summary="The namespace's subscription auth: {subscription: [roles]}")
    async def subscription_permissions(tenant: str, namespace: str, service: Service) -> dict:
        return await service.store.subscription_grants(*bodies.namespace(tenant, namespace))

    @r.delete(NAMESPACE + "/permissions/{subscription}/{role}", **NO_CONTENT,
              summary="Take a role off a subscription's list (an empty list restricts nothing)")
    async def revoke_subscription(tenant: str, namespace: str, subscription: str, role: str,
                                  service: Service) -> Response:
        ns = bodies.namespace(tenant, namespace)
        await service.store.revoke_subscription_role(
            *ns, bodies.subscription(subscription), permissions.validate_role(role))
        return Response(status_code=204)

    @r.post(NAMESPACE + "/permissions/{role}", **NO_CONTENT,
            summary="Grant a role actions on every topic of the namespace (body: [\"produce\", \"consume\"])",
            openapi_extra=body_doc(ACTIONS_BODY, example=["produce", "consume"]))
    async def grant_namespace(tenant: str, namespace: str, role: str, service: Service,
                              body: Body) -> Response:
        ns = bodies.namespace(tenant, namespace)
        role, actions = permissions.validate_role(role), permissions.validate_actions(body)
        await service.store.grant_namespace(*ns, role, actions)
        return Response(status_code=204)

    @r.delete(NAMESPACE + "/permissions/{role}", **NO_CONTENT,
              summary="Revoke a role's grant on the namespace")
    async def revoke_namespace(tenant: str, namespace: str, role: str, service: Service) -> Response:
        ns = bodies.namespace(tenant, namespace)
        await service.store.revoke_namespace(*ns, permissions.validate_role(role))
        return Response(status_code=204)

    @r.get(TOPIC + "/permissions", summary="The topic's own grants: {role: [actions]}")
    async def topic_permissions(tenant: str, namespace: str, topic: str, service: Service) -> dict:
        return await service.store.topic_grants(bodies.topic(tenant, namespace, topic).base)

    @r.post(TOPIC + "/permissions/{role}", **NO_CONTENT,
            summary="Grant a role actions on one topic (a partitioned topic: all its partitions)",
            openapi_extra=body_doc(ACTIONS_BODY, example=["consume"]))
    async def grant_topic(tenant: str, namespace: str, topic: str, role: str, service: Service,
                          body: Body) -> Response:
        name = bodies.topic(tenant, namespace, topic).base
        role, actions = permissions.validate_role(role), permissions.validate_actions(body)
        await service.store.grant_topic(name, role, actions)
        return Response(status_code=204)

    @r.delete(TOPIC + "/permissions/{role}", **NO_CONTENT, summary="Revoke a role's grant on a topic")
    async def revoke_topic(tenant: str, namespace: str, topic: str, role: str,
                           service: Service) -> Response:
        name = bodies.topic(tenant, namespace, topic).base
        await service.store.revoke_topic(name, permissions.validate_role(role))
        return Response(status_code=204)

    return r
