"""``msg.value()``: a consumer's (or reader's) schema applied to its messages.  An Avro
schema reads each message with the definition of the schema version it was written with
(Pulsar's writer's schema); the consumer fetches each version's definition once, before
it queues the first message of that version, so ``value()`` never waits on the network
(pulsar-client asks for it inside ``value()``)."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable

from magnetar.schema import AvroSchema, BytesSchema, Schema
from magnetar_protocol import magnetar_pb2 as pb

log = logging.getLogger("magnetar.consumer")


class ValueReader:
    """One consumer's schema and the writers' schemas it learnt, by version."""

    __slots__ = ("schema", "writers", "wants_writers")

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        # version -> the parsed writer's definition, or None: read with the consumer's own
        # (the version is not Avro, or was deleted by force)
        self.writers: dict[int, object] = {}
        self.wants_writers = isinstance(schema, AvroSchema)

    def missing(self, messages: Iterable) -> set[int]:
        """The schema versions of ``messages`` (Message objects, or chunks of one: their
        Pulsar metadata's version) whose writer is unknown."""
        if not self.wants_writers:
            return set()
        writers = self.writers
        out = set()
        for m in messages:
            msg = getattr(m, "_msg", None)
            if msg is not None:
                if not msg.HasField("schema_version"):
                    continue
                version = msg.schema_version
            else:
                metadata = getattr(m, "metadata", None)
                if metadata is None or not metadata.HasField("schema_version") or len(metadata.schema_version) != 8:
                    continue
                version = int.from_bytes(metadata.schema_version, "big", signed=True)
            if version not in writers:
                out.add(version)
        return out

    def learn(self, version: int, found: pb.SchemaVersion | None) -> None:
        """What the registry answered for ``version`` (None: it has no such version)."""
        writer = None
        if found is not None and found.schema.type == "AVRO":
            try:
                writer = self.schema.parse_writer(json.loads(found.schema.data))   # type: ignore[attr-defined]
            except Exception as exc:   # read with our own then, as pulsar-client does
                log.warning("schema version %d is not a usable Avro schema (%s): read with the consumer's", version,
                            exc)
        self.writers[version] = writer

    def value(self, msg: pb.SingleMessage):
        schema = self.schema
        if self.wants_writers and msg.HasField("schema_version"):
            writer = self.writers.get(msg.schema_version)
            if writer is not None:
                return schema.decode_written(msg.payload, writer)   # type: ignore[attr-defined]
        return schema.decode(msg.payload)


def check_schema(schema) -> Schema | None:
    """A ``schema=`` option: a magnetar.schema schema (None for bytes), or TypeError."""
    if schema is None or type(schema) is BytesSchema:
        return None
    if not isinstance(schema, Schema):
        raise TypeError(f"schema must be a magnetar.schema schema (AvroSchema(MyRecord), JsonSchema, "
                        f"StringSchema, BytesSchema), not {type(schema).__name__}")
    return schema
