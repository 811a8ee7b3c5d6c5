"""What every admin route module shares: the service dependency, the JSON body reader,
the tenant-admin check and OpenAPI body docs.  Its own module so that api.py can import
the other route modules at the top (no cycle)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Path, Query, Request, Response

from magnetar_admin import bodies
from magnetar_admin.service import AdminService
from magnetar_protocol.errors import ServiceNotReady
from magnetar_protocol.validate import INT32_MAX, INT64_MAX

NO_CONTENT: dict[str, Any] = {"status_code": 204, "response_class": Response}  # route keywords


def get_service(request: Request) -> AdminService:
    service = getattr(request.app.state, "service", None)
    if service is None:
        raise ServiceNotReady("the admin service is starting; retry in a moment")
    return service


Service = Annotated[AdminService, Depends(get_service)]


async def tenant_admin_only(request: Request) -> None:
    """The routes of a tenant's namespaces, topics and permissions: a superuser or one of
    the tenant's ``adminRoles`` (Pulsar's validateTenantAdminAccess)."""
    await get_service(request).require_tenant_admin(request.path_params.get("tenant", ""))


async def json_body(request: Request) -> Any:
    """The request body as JSON (whatever its content type); bodies.MISSING if empty."""
    return bodies.parse_json(await request.body())


Body = Annotated[Any, Depends(json_body)]

# Integers in paths and queries, bounded as their columns are (a 400 from FastAPI's
# validation, and the bounds show in the OpenAPI document).
TxnMost = Annotated[int, Path(ge=0, le=INT32_MAX,
                              description="a transaction id's most significant bits: its coordinator id")]
TxnLeast = Annotated[int, Path(ge=0, le=INT64_MAX, description="a transaction id's least significant bits")]
CoordinatorIdQuery = Annotated[int | None, Query(ge=0, le=INT32_MAX)]
# now() minus this must stay a timestamp PostgreSQL can hold: at most 1,000 years.
MAX_AGE_MS = 1000 * 365 * 24 * 3600 * 1000
AgeMs = Annotated[int, Path(ge=0, le=MAX_AGE_MS, description="milliseconds")]


def body_doc(schema: dict, required: bool = True, example: Any = None) -> dict:
    """OpenAPI description of a body read by json_body (FastAPI cannot see it)."""
    content = {"schema": schema} | ({"example": example} if example is not None else {})
    return {"requestBody": {"required": required, "content": {"application/json": content}}}
