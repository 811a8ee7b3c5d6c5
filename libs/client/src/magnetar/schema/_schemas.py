"""The schemas a producer writes with and a consumer or reader reads with (``schema=``),
with ``pulsar.schema``'s names: BytesSchema (no schema: the default), StringSchema,
JsonSchema and AvroSchema of a Record class (or, for Avro, of a definition and dicts).

A schema turns a value into a payload (``encode``) and back (``decode``), and tells the
broker what it is (``schema_info``: the type and the definition's text, the same text
pulsar-client sends for the same class, so both clients share the topic's versions).
An Avro consumer reads each message with the schema version it was written with (its
writer's schema, fetched once per version by the consumer: docs/client.md, "Schemas")
resolved to its own, as Avro's schema resolution says.
"""

from __future__ import annotations

import enum
import io
import json
from typing import Any

import fastavro

from magnetar.schema._definition import Record
from magnetar_protocol import magnetar_pb2 as pb


class SchemaInfo:
    """What a schema registers (pulsar-client's SchemaInfo): its type name (AVRO, JSON,
    STRING, BYTES), its name and its definition's text."""

    __slots__ = ("_type", "_name", "_schema", "_properties")

    def __init__(self, schema_type: str, name: str, schema: str, properties: dict[str, str] | None = None):
        self._type = schema_type
        self._name = name
        self._schema = schema
        self._properties = dict(properties or {})

    def schema_type(self) -> str:
        return self._type

    def name(self) -> str:
        return self._name

    def schema(self) -> str:
        return self._schema

    def properties(self) -> dict[str, str]:
        return dict(self._properties)

    def __repr__(self) -> str:
        return f"SchemaInfo({self._type}, {self._schema!r})"


class Schema:
    """A schema: ``encode(value) -> bytes``, ``decode(bytes) -> value``."""

    def __init__(self, record_cls, schema_type: str, definition, name: str) -> None:
        self._record_cls = record_cls
        # The definition's text as pulsar-client writes it (json.dumps, indent 1): the
        # registry finds an identical schema by its bytes.
        text = "" if definition is None else json.dumps(definition, indent=True)
        self._schema_info = SchemaInfo(schema_type, name, text)

    def encode(self, obj) -> bytes:
        raise NotImplementedError

    def decode(self, data: bytes):
        raise NotImplementedError

    def decode_message(self, msg) -> Any:
        """A received message's value (``msg.value()`` calls it)."""
        return self.decode(msg.data())

    def schema_info(self) -> SchemaInfo:
        return self._schema_info

    def _wire(self) -> pb.Schema | None:
        """The schema in a create/subscribe request; None for none (bytes)."""
        info = self._schema_info
        return pb.Schema(type=info.schema_type(), data=info.schema().encode(), properties=info.properties())

    def _check_type(self, obj) -> None:
        if not isinstance(obj, self._record_cls):
            raise TypeError(f"{type(self).__name__} sends {_name(self._record_cls)}, "
                            f"not {type(obj).__name__}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({_name(self._record_cls)})"


def _name(cls) -> str:
    return getattr(cls, "__name__", str(cls))


class BytesSchema(Schema):
    """Payloads as they are (no schema: a topic written without one has none)."""

    def __init__(self) -> None:
        super().__init__(bytes, "BYTES", None, "BYTES")

    def encode(self, obj) -> bytes:
        if isinstance(obj, (bytearray, memoryview)):
            return bytes(obj)
        self._check_type(obj)
        return obj

    def decode(self, data: bytes) -> bytes:
        return data

    def _wire(self) -> None:
        return None


class StringSchema(Schema):
    """str values as UTF-8."""

    def __init__(self) -> None:
        super().__init__(str, "STRING", None, "STRING")

    def encode(self, obj) -> bytes:
        self._check_type(obj)
        return obj.encode("utf-8")

    def decode(self, data: bytes) -> str:
        return data.decode("utf-8")


def _check_record_class(record_cls) -> None:
    if not (isinstance(record_cls, type) and issubclass(record_cls, Record)):
        raise TypeError(f"a schema of a record takes a magnetar.schema.Record subclass, not {record_cls!r}")


def _json_value(value):
    """What json.dumps does not know: enums by value and bytes as text, as
    pulsar-client's JsonSchema writes them."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, Record):
        return {name: getattr(value, name) for name in value._fields}
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


class JsonSchema(Schema):
    """Records as JSON documents, described by the record's Avro schema (as Pulsar does)."""

    def __init__(self, record_cls) -> None:
        _check_record_class(record_cls)
        super().__init__(record_cls, "JSON", record_cls.schema(), "JSON")

    def encode(self, obj) -> bytes:
        self._check_type(obj)
        values = {name: getattr(obj, name) for name in obj._fields}
        return json.dumps(values, default=_json_value, indent=True).encode("utf-8")

    def decode(self, data: bytes):
        # Fields the record does not declare (a newer writer's) are left out.
        return self._record_cls.from_dict(json.loads(data))


class AvroSchema(Schema):
    """Records (or, given ``schema_definition`` instead of a class, dicts) as Avro binary."""

    def __init__(self, record_cls, schema_definition: dict | None = None) -> None:
        if record_cls is None and schema_definition is None:
            raise ValueError("AvroSchema needs a Record class or a schema definition")
        if record_cls is not None:
            _check_record_class(record_cls)
            schema_definition = record_cls.schema()
        assert schema_definition is not None
        super().__init__(record_cls, "AVRO", schema_definition, "AVRO")
        self._definition: dict = schema_definition
        self._parsed = fastavro.parse_schema(schema_definition)

    def encode(self, obj) -> bytes:
        if self._record_cls is not None:
            self._check_type(obj)
            obj = obj.as_dict()
        elif not isinstance(obj, dict):
            raise TypeError(f"an AvroSchema of a definition sends dicts, not {type(obj).__name__}")
        out = io.BytesIO()
        fastavro.schemaless_writer(out, self._parsed, obj)
        return out.getvalue()

    def decode(self, data: bytes):
        return self._value(fastavro.schemaless_reader(io.BytesIO(data), self._parsed))

    def parse_writer(self, writer: dict):
        """A writer's definition made ready for ``decode_written``."""
        # Resolution matches records by name: a writer's class may have been named
        # otherwise (another application's), so the top-level name is ours.
        return fastavro.parse_schema(dict(writer, name=self._definition.get("name", writer.get("name"))))

    def decode_written(self, data: bytes, writer):
        """``data`` written with ``writer`` (from ``parse_writer``), read as this schema
        (Avro's schema resolution: fields added with defaults, fields removed)."""
        return self._value(fastavro.schemaless_reader(io.BytesIO(data), writer, self._parsed))

    def _value(self, plain):
        if self._record_cls is None:
            return plain
        return self._record_cls.from_dict(plain)
