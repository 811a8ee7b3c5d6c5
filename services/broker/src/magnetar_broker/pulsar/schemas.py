"""GET_SCHEMA over Pulsar's protocol.  Magnetar keeps no schema registry yet, so every
topic has none: answered as Pulsar answers a topic without a schema (TopicNotFound in
GET_SCHEMA_RESPONSE), which a client reads as "no schema" at once instead of waiting out
its operation timeout (the wheel's Avro ``msg.value()`` asks for the writer's schema)."""

from __future__ import annotations

from magnetar_broker.pulsar.connection import Connection
from magnetar_protocol import pulsar_api_pb2 as pb

Type = pb.BaseCommand.Type


class Schemas:
    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def handlers(self) -> dict:
        return {Type.GET_SCHEMA: self.get_schema}

    async def get_schema(self, frame) -> None:
        cmd = frame.body
        self.conn.send(pb.CommandGetSchemaResponse(
            request_id=cmd.request_id, error_code=pb.TopicNotFound,
            error_message=f"{cmd.topic} has no schema (Magnetar keeps no schema registry yet)"))
