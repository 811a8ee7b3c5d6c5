"""What a schema is on every wire Magnetar speaks (Pulsar's SchemaInfo): the type names,
Pulsar's wire enum, schema versions as Pulsar's 8 bytes, the hash that tells identical
schemas apart, KEY_VALUE's two-part encoding, and the admin API's JSON bodies (Pulsar's
PostSchemaPayload and GetSchemaResponse).  Pure: no I/O.

A schema is a type name and its definition (``data``): the Avro schema's JSON text for
AVRO and JSON (Pulsar describes JSON schemas in Avro), a JSON document for
PROTOBUF_NATIVE (Pulsar's ProtobufNativeSchemaData), ``[key length][key][value
length][value]`` for KEY_VALUE with its parts' types in the properties, and nothing for
STRING and the primitives.  BYTES is no schema at all: Pulsar's clients send none for
it, and a topic written without one has none.
"""

from __future__ import annotations

import base64
import hashlib
import json
import struct
from dataclasses import dataclass, field

from magnetar_protocol import magnetar_pb2 as mpb
from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol.errors import BadRequest
from magnetar_protocol.schemacompat import SchemaData

# Pulsar's SchemaType names, by their number in pulsar_api.proto's Schema.Type (None = 0
# and AutoConsume = 21 are not types a topic can have).
WIRE_TYPES: dict[int, str] = {
    pb.Schema.String: "STRING", pb.Schema.Json: "JSON", pb.Schema.Protobuf: "PROTOBUF",
    pb.Schema.Avro: "AVRO", pb.Schema.Bool: "BOOLEAN", pb.Schema.Int8: "INT8",
    pb.Schema.Int16: "INT16", pb.Schema.Int32: "INT32", pb.Schema.Int64: "INT64",
    pb.Schema.Float: "FLOAT", pb.Schema.Double: "DOUBLE", pb.Schema.Date: "DATE",
    pb.Schema.Time: "TIME", pb.Schema.Timestamp: "TIMESTAMP", pb.Schema.KeyValue: "KEY_VALUE",
    pb.Schema.Instant: "INSTANT", pb.Schema.LocalDate: "LOCAL_DATE",
    pb.Schema.LocalTime: "LOCAL_TIME", pb.Schema.LocalDateTime: "LOCAL_DATE_TIME",
    pb.Schema.ProtobufNative: "PROTOBUF_NATIVE",
}
TYPE_NUMBERS = {name: number for number, name in WIRE_TYPES.items()}
TYPES = tuple(WIRE_TYPES.values())
# Types whose definition is empty: the value's encoding is the type itself.
PRIMITIVES = ("STRING", "BOOLEAN", "INT8", "INT16", "INT32", "INT64", "FLOAT", "DOUBLE", "DATE",
              "TIME", "TIMESTAMP", "INSTANT", "LOCAL_DATE", "LOCAL_TIME", "LOCAL_DATE_TIME")
NO_SCHEMA = ("BYTES", "NONE", "AUTO_CONSUME")   # what a client sends (or means) for "no schema"
_LEN = struct.Struct(">i")
MAX_DEFINITION = 1024 * 1024   # a schema's definition; Pulsar's own limit is the message size


@dataclass(frozen=True, slots=True)
class Schema:
    """A schema as the registry keeps it."""
    type: str
    data: bytes = b""
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def hash(self) -> bytes:
        """Identical schemas have the same hash (type and definition; properties are not
        part of it, as in Pulsar's SchemaHash), so registering one again finds its version."""
        return hashlib.sha256(self.type.encode() + b"\0" + self.data).digest()

    def comparable(self) -> SchemaData:
        """What the compatibility rules compare (schemacompat)."""
        if self.type == "KEY_VALUE":
            key, value = key_value_parts(self)
            return SchemaData(self.type, self.data.hex(), (key.comparable(), value.comparable()))
        return SchemaData(self.type, self.data.decode("utf-8", "replace"))

    def to_proto(self) -> mpb.Schema:
        return mpb.Schema(type=self.type, data=self.data, properties=self.properties)


def check(schema: Schema) -> Schema:
    """The schema (a primitive's without its definition), or BadRequest saying what is
    wrong with it."""
    if schema.type not in TYPES:
        raise BadRequest(f"unknown schema type {schema.type!r}; one of {', '.join(TYPES)} (BYTES is no schema)")
    if schema.type in PRIMITIVES and schema.data:
        # A primitive has no definition: pulsar-client's Python layer sends "null" where
        # Java's sends nothing; both are one schema, not two versions.
        return Schema(schema.type, b"", schema.properties)
    if len(schema.data) > MAX_DEFINITION:
        raise BadRequest(f"the schema definition is {len(schema.data)} bytes; at most {MAX_DEFINITION}")
    if schema.type in ("AVRO", "JSON", "PROTOBUF", "PROTOBUF_NATIVE"):
        try:
            json.loads(schema.data)
        except ValueError as exc:
            raise BadRequest(f"a {schema.type} schema's definition must be JSON: {exc}") from None
    if schema.type == "KEY_VALUE":
        key_value_parts(schema)
    return schema


def from_proto(message: mpb.Schema) -> Schema | None:
    """A Magnetar request's schema; None for none (unset, or BYTES)."""
    if not message.type or message.type in NO_SCHEMA:
        return None
    return check(Schema(message.type, message.data, dict(message.properties)))


def from_pulsar(message: pb.Schema) -> Schema | None:
    """A Pulsar command's schema; None for none (the None and AutoConsume types)."""
    name = WIRE_TYPES.get(message.type)
    if name is None:
        return None
    return check(Schema(name, message.schema_data, {kv.key: kv.value for kv in message.properties}))


def to_pulsar(schema: Schema, name: str) -> pb.Schema:
    """Pulsar's Schema of ``schema``; ``name`` is the topic's (tenant/namespace/topic, as
    Pulsar names a topic's schema)."""
    return pb.Schema(name=name, type=TYPE_NUMBERS[schema.type], schema_data=schema.data,
                     properties=[pb.KeyValue(key=k, value=v) for k, v in sorted(schema.properties.items())])


# ---------------------------------------------------------------- versions

def version_bytes(version: int) -> bytes:
    """A schema version as Pulsar sends it (a long, 8 bytes big-endian)."""
    return version.to_bytes(8, "big", signed=True)


def parse_version(data: bytes) -> int:
    """A version Pulsar's way; BadRequest for anything that is not 8 bytes."""
    if len(data) != 8:
        raise BadRequest(f"a schema version is 8 bytes, not {len(data)}")
    return int.from_bytes(data, "big", signed=True)


# ---------------------------------------------------------------- KEY_VALUE

def key_value_parts(schema: Schema) -> tuple[Schema, Schema]:
    """The key's and the value's schemas of a KEY_VALUE schema (types from the properties
    ``key.schema.type`` and ``value.schema.type``, BYTES when absent)."""
    data = schema.data
    parts = []
    offset = 0
    for which in ("key", "value"):
        if offset + 4 > len(data):
            raise BadRequest(f"KEY_VALUE schema: the {which} schema's length is missing")
        (size,) = _LEN.unpack_from(data, offset)
        offset += 4
        size = max(size, 0)   # -1: an empty (primitive) part
        if offset + size > len(data):
            raise BadRequest(f"KEY_VALUE schema: the {which} schema overruns the data")
        parts.append(Schema(schema.properties.get(f"{which}.schema.type", "BYTES"), data[offset:offset + size]))
        offset += size
    if offset != len(data):
        raise BadRequest(f"KEY_VALUE schema: {len(data) - offset} bytes after the value schema")
    return parts[0], parts[1]


def key_value_data(key: bytes, value: bytes) -> bytes:
    return _LEN.pack(len(key)) + key + _LEN.pack(len(value)) + value


# ---------------------------------------------------------------- the admin API's JSON

def definition_text(schema: Schema) -> str:
    """The ``data`` field of Pulsar's GetSchemaResponse: the definition as text, a
    KEY_VALUE one as ``{"key": ..., "value": ...}`` (a part's JSON, "" for a primitive)."""
    if schema.type == "KEY_VALUE":
        key, value = key_value_parts(schema)
        return json.dumps({"key": _part_json(key), "value": _part_json(value)})
    try:
        return schema.data.decode()
    except UnicodeDecodeError:
        return base64.b64encode(schema.data).decode()


def _part_json(part: Schema) -> object:
    if not part.data or part.type in PRIMITIVES or part.type in NO_SCHEMA:
        return ""
    try:
        return json.loads(part.data)
    except ValueError:
        return part.data.decode("utf-8", "replace")


def from_payload(body: object) -> Schema:
    """Pulsar's PostSchemaPayload ``{"type", "schema", "properties"}`` (the admin's upload,
    compatibility test and version lookup), or BadRequest."""
    if not isinstance(body, dict):
        raise BadRequest('the body must be {"type": "AVRO", "schema": "<definition>", "properties": {}}')
    unknown = set(body) - {"type", "schema", "properties"}
    if unknown:
        raise BadRequest(f"unknown field(s) {sorted(unknown)}; a schema is type, schema, properties")
    kind, text, properties = body.get("type"), body.get("schema", ""), body.get("properties") or {}
    if not isinstance(kind, str):
        raise BadRequest("type is required: AVRO, JSON, STRING, ...")
    kind = kind.upper()
    if kind in NO_SCHEMA:
        raise BadRequest(f"{kind} is no schema: a topic written without one has none")
    if not isinstance(text, str):
        raise BadRequest("schema must be the definition as a string")
    if not isinstance(properties, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in properties.items()):
        raise BadRequest("properties must be an object of strings")
    if kind == "KEY_VALUE":
        data = _key_value_from_text(text, properties)
    else:
        data = text.encode()
    return check(Schema(kind, data, dict(properties)))


def _key_value_from_text(text: str, properties: dict[str, str]) -> bytes:
    try:
        parts = json.loads(text)
    except ValueError as exc:
        raise BadRequest(f'a KEY_VALUE schema is {{"key": ..., "value": ...}}: {exc}') from None
    if not isinstance(parts, dict) or set(parts) != {"key", "value"}:
        raise BadRequest('a KEY_VALUE schema is {"key": <schema or "">, "value": <schema or "">}')
    encoded = [b"" if parts[w] in ("", None) else
               (parts[w] if isinstance(parts[w], str) else json.dumps(parts[w])).encode()
               for w in ("key", "value")]
    for which, data in zip(("key", "value"), encoded):
        properties.setdefault(f"{which}.schema.type", "AVRO" if data else "BYTES")
    return key_value_data(*encoded)


def as_json(version: int, schema: Schema, timestamp: int) -> dict:
    """Pulsar's GetSchemaResponse."""
    return {"version": version, "type": schema.type, "timestamp": timestamp,
            "data": definition_text(schema), "properties": dict(schema.properties)}
