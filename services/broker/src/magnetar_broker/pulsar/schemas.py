"""GET_SCHEMA and GET_OR_CREATE_SCHEMA over Pulsar's protocol, on the broker's schema
registry (schemas.py).  A topic without a schema (or whose schema was deleted) is
answered TopicNotFound, Pulsar's answer, which a client reads as "no schema"; versions
travel as Pulsar's 8 bytes (a long, big-endian)."""

from __future__ import annotations

from magnetar_broker.pulsar.connection import Connection
from magnetar_broker.pulsar.errors import failure
from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol import schemainfo
from magnetar_protocol.errors import BadRequest
from magnetar_protocol.topics import TopicName

Type = pb.BaseCommand.Type


def schema_name(topic: str) -> str:
    """tenant/namespace/topic: how Pulsar names a topic's schema (its partitioned topic's)."""
    return TopicName.parse(topic).base.full.split("://", 1)[1]


class Schemas:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.registry = conn.service.schemas

    def handlers(self) -> dict:
        return {Type.GET_SCHEMA: self.get_schema, Type.GET_OR_CREATE_SCHEMA: self.get_or_create}

    async def get_schema(self, frame) -> None:
        cmd = frame.body
        try:
            version = schemainfo.parse_version(cmd.schema_version) if cmd.HasField("schema_version") else None
            if version is not None and version < 0:
                version = None   # the C++ client's "latest" when it sends one
            stored = await self.registry.get(cmd.topic, version)
        except Exception as exc:
            error, message = failure(exc)
            self.conn.send(pb.CommandGetSchemaResponse(request_id=cmd.request_id, error_code=error,
                                                       error_message=message))
            return
        assert stored.schema is not None   # a deletion is never answered
        self.conn.send(pb.CommandGetSchemaResponse(
            request_id=cmd.request_id, schema=schemainfo.to_pulsar(stored.schema, schema_name(cmd.topic)),
            schema_version=schemainfo.version_bytes(stored.version)))

    async def get_or_create(self, frame) -> None:
        cmd = frame.body
        try:
            schema = schemainfo.from_pulsar(cmd.schema)
            if schema is None:
                raise BadRequest("GET_OR_CREATE_SCHEMA needs a schema (None and AutoConsume are none)")
            version = await self.registry.create(cmd.topic, schema, admin=False)
        except Exception as exc:
            error, message = failure(exc)
            self.conn.send(pb.CommandGetOrCreateSchemaResponse(request_id=cmd.request_id, error_code=error,
                                                               error_message=message))
            return
        self.conn.send(pb.CommandGetOrCreateSchemaResponse(request_id=cmd.request_id,
                                                           schema_version=schemainfo.version_bytes(version)))
