"""Schema routes on Pulsar's admin v2 paths (docs/admin.md, "Schemas"): a topic's schema
(latest, one version, every version), upload, delete, the compatibility test and the
version of a schema, and the namespace's schema policies (schemaCompatibilityStrategy,
isAllowAutoUpdateSchema, schemaValidationEnforced).  The registry is the brokers' (they
write it): these routes check the caller (a tenant admin) and call a broker's
/v1/schemas/*; the policies are namespace rows, written here."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Response

from magnetar_admin import bodies
from magnetar_admin.deps import NO_CONTENT, Body, Service, body_doc, tenant_admin_only
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol import schemainfo
from magnetar_protocol.errors import BadRequest, TopicNotFound
from magnetar_protocol.schemacompat import STRATEGIES, UNDEFINED
from magnetar_protocol.validate import INT64_MAX

NS = "/admin/v2/namespaces/{tenant}/{namespace}"
SCHEMA = "/admin/v2/schemas/{tenant}/{namespace}/{topic}"
PAYLOAD_DOC = body_doc({"type": "object", "properties": {
    "type": {"type": "string", "enum": list(schemainfo.TYPES)},
    "schema": {"type": "string", "description": "the definition (an Avro schema's JSON text for AVRO and JSON)"},
    "properties": {"type": "object", "additionalProperties": {"type": "string"}}}},
    example={"type": "AVRO", "schema": '{"type": "record", "name": "User", "fields": '
                                       '[{"name": "name", "type": "string"}]}', "properties": {}})
Version = Annotated[int, Path(ge=0, le=INT64_MAX, description="a schema version")]


def version_json(entry: pb.SchemaVersion) -> dict:
    schema = schemainfo.Schema(entry.schema.type, entry.schema.data, dict(entry.schema.properties))
    return schemainfo.as_json(entry.version, schema, entry.timestamp)


def schema_routes() -> APIRouter:
    r = APIRouter(tags=["schemas"], dependencies=[Depends(tenant_admin_only)])

    def topic_of(tenant: str, namespace: str, topic: str) -> str:
        return bodies.topic(tenant, namespace, topic).full

    @r.get(SCHEMA + "/schema", summary="The topic's latest schema (404: none, or deleted)")
    async def get_schema(tenant: str, namespace: str, topic: str, service: Service) -> dict:
        reply = await service.schema_call("/v1/schemas/get", pb.GetSchemaRequest(
            topic=topic_of(tenant, namespace, topic)), pb.GetSchemaResponse)
        return version_json(reply.schema)

    @r.get(SCHEMA + "/schema/{version}", summary="One version of the topic's schema")
    async def get_version(tenant: str, namespace: str, topic: str, version: Version, service: Service) -> dict:
        reply = await service.schema_call("/v1/schemas/get", pb.GetSchemaRequest(
            topic=topic_of(tenant, namespace, topic), version=version), pb.GetSchemaResponse)
        return version_json(reply.schema)

    @r.get(SCHEMA + "/schemas", summary="Every version of the topic's schema since its last deletion")
    async def all_versions(tenant: str, namespace: str, topic: str, service: Service) -> dict:
        reply = await service.schema_call("/v1/schemas/list", pb.ListSchemasRequest(
            topic=topic_of(tenant, namespace, topic)), pb.ListSchemasResponse)
        return {"getSchemaResponses": [version_json(v) for v in reply.versions]}

    @r.post(SCHEMA + "/schema", openapi_extra=PAYLOAD_DOC,
            summary="Upload a schema: its version (an identical one's, else a new one if the strategy "
                    "accepts it; 409 IncompatibleSchema otherwise)")
    async def upload(tenant: str, namespace: str, topic: str, body: Body, service: Service) -> dict:
        schema = schemainfo.from_payload(None if body is bodies.MISSING else body)
        reply = await service.schema_call("/v1/schemas/create", pb.CreateSchemaRequest(
            topic=topic_of(tenant, namespace, topic), schema=schema.to_proto(), admin=True),
            pb.CreateSchemaResponse)
        return {"version": reply.version}

    @r.delete(SCHEMA + "/schema",
              summary="Delete the topic's schema: a deletion version, history kept (force=true: every "
                      "version removed, and versions start again at 0)")
    async def delete(tenant: str, namespace: str, topic: str, service: Service, force: bool = False) -> dict:
        reply = await service.schema_call("/v1/schemas/delete", pb.DeleteSchemaRequest(
            topic=topic_of(tenant, namespace, topic), force=force), pb.DeleteSchemaResponse)
        return {"version": reply.version}

    @r.post(SCHEMA + "/compatibility", openapi_extra=PAYLOAD_DOC,
            summary="Would this schema be accepted (Pulsar's IsCompatibilityResponse, with the reason)")
    async def compatibility(tenant: str, namespace: str, topic: str, body: Body, service: Service) -> dict:
        schema = schemainfo.from_payload(None if body is bodies.MISSING else body)
        reply = await service.schema_call("/v1/schemas/check", pb.CheckSchemaRequest(
            topic=topic_of(tenant, namespace, topic), schema=schema.to_proto()), pb.CheckSchemaResponse)
        return {"isCompatibility": reply.compatible, "schemaCompatibilityStrategy": reply.strategy,
                "reason": reply.reason or None}

    @r.post(SCHEMA + "/version", openapi_extra=PAYLOAD_DOC,
            summary="The version of a schema identical to this one (404: none)")
    async def version_of(tenant: str, namespace: str, topic: str, body: Body, service: Service) -> dict:
        schema = schemainfo.from_payload(None if body is bodies.MISSING else body)
        name = topic_of(tenant, namespace, topic)
        reply = await service.schema_call("/v1/schemas/check", pb.CheckSchemaRequest(
            topic=name, schema=schema.to_proto()), pb.CheckSchemaResponse)
        if not reply.HasField("version"):
            raise TopicNotFound(f"{name} has no schema identical to this one")
        return {"version": reply.version}

    # ---------------------------------------------------------------- namespace policies

    async def policies(service, tenant: str, namespace: str) -> tuple:
        return await service.store.schema_policies(*bodies.namespace(tenant, namespace))

    async def set_policy(service, tenant: str, namespace: str, query: str, value) -> Response:
        await service.store.set_schema_policy(*bodies.namespace(tenant, namespace), query, value)
        return Response(status_code=204)

    @r.get(NS + "/schemaCompatibilityStrategy", tags=["namespaces"],
           summary="The namespace's schema compatibility strategy (UNDEFINED: the broker's default)")
    async def get_strategy(tenant: str, namespace: str, service: Service) -> str:
        return (await policies(service, tenant, namespace))[0] or UNDEFINED

    @r.put(NS + "/schemaCompatibilityStrategy", tags=["namespaces"], **NO_CONTENT,
           openapi_extra=body_doc({"type": "string", "enum": [*STRATEGIES, UNDEFINED]}, example="BACKWARD"),
           summary="Set the strategy (body: its name as a JSON string; UNDEFINED: back to the broker's default)")
    async def set_strategy(tenant: str, namespace: str, body: Body, service: Service) -> Response:
        if not isinstance(body, str) or body.upper() not in (*STRATEGIES, UNDEFINED):
            raise BadRequest(f"the body must be one of {', '.join((*STRATEGIES, UNDEFINED))} as a JSON string")
        strategy = body.upper()
        return await set_policy(service, tenant, namespace, "set_schema_compatibility_strategy",
                                None if strategy == UNDEFINED else strategy)

    @r.delete(NS + "/schemaCompatibilityStrategy", tags=["namespaces"], **NO_CONTENT,
              summary="Remove the namespace's strategy (back to the broker's default)")
    async def remove_strategy(tenant: str, namespace: str, service: Service) -> Response:
        return await set_policy(service, tenant, namespace, "set_schema_compatibility_strategy", None)

    for path, query, index, what in (
            ("isAllowAutoUpdateSchema", "set_allow_auto_update_schema", 1,
             "whether producers (and idle topics' consumers) may register new schema versions"),
            ("schemaValidationEnforced", "set_schema_validation_enforced", 2,
             "whether producers without a schema are refused on topics with one, and payloads are checked")):
        _boolean_policy(r, path, query, index, what, policies, set_policy)
    return r


def _boolean_policy(r: APIRouter, path: str, query: str, index: int, what: str, policies, set_policy) -> None:
    @r.get(NS + "/" + path, tags=["namespaces"], summary=f"{what[0].upper()}{what[1:]} (null: the broker's default)")
    async def get_policy(tenant: str, namespace: str, service: Service) -> bool | None:
        return (await policies(service, tenant, namespace))[index]

    @r.post(NS + "/" + path, tags=["namespaces"], **NO_CONTENT,
            openapi_extra=body_doc({"type": "boolean"}, example=True), summary=f"Set {what} (body: true or false)")
    async def set_bool(tenant: str, namespace: str, body: Body, service: Service) -> Response:
        return await set_policy(service, tenant, namespace, query, bodies.boolean(body, path))

    @r.delete(NS + "/" + path, tags=["namespaces"], **NO_CONTENT, summary=f"Remove {path} (the broker's default)")
    async def remove_policy(tenant: str, namespace: str, service: Service) -> Response:
        return await set_policy(service, tenant, namespace, query, None)
