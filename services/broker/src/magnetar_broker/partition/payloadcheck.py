"""Payloads checked against their topic's schema before they are stored, under the
namespace's ``schemaValidationEnforced`` (beyond Pulsar, whose broker checks only that a
producer has a schema: docs/admin.md, "Schema validation").  Pure: no I/O; the rules a
payload must meet, per schema type:

- AVRO: Avro binary of the schema that reads exactly to the payload's end (fastavro's
  schemaless reader);
- JSON: a JSON document that fits the schema's Avro definition (records are objects
  holding every field without a default that is not nullable, with values of the
  field's type; extra fields are let through, as readers ignore them);
- STRING: UTF-8 text; the fixed-size primitives: their size (BOOLEAN a 0 or 1 byte,
  INT8 1, INT16 2, INT32 4, INT64 8, FLOAT 4, DOUBLE 8, DATE/TIME/TIMESTAMP 8 (ms),
  INSTANT 12, LOCAL_DATE 8, LOCAL_TIME 8, LOCAL_DATE_TIME 16);
- KEY_VALUE (inline encoding): ``[key length][key][value length][value]``, each part
  by its own type;
- PROTOBUF, PROTOBUF_NATIVE: not checked (no message descriptor is compiled here).

A null value (a tombstone) is never checked.
"""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Callable

import fastavro

from magnetar_protocol.schemainfo import Schema, key_value_parts

Check = Callable[[bytes], "str | None"]   # a payload -> why it does not fit, or None

SIZES = {"INT8": 1, "INT16": 2, "INT32": 4, "INT64": 8, "FLOAT": 4, "DOUBLE": 8, "DATE": 8, "TIME": 8,
         "TIMESTAMP": 8, "INSTANT": 12, "LOCAL_DATE": 8, "LOCAL_TIME": 8, "LOCAL_DATE_TIME": 16}
_LEN = struct.Struct(">i")


def payload_check(schema: Schema) -> Check | None:
    """The check of one payload against ``schema``; None when its type has none."""
    kind = schema.type
    if kind == "AVRO":
        return _avro(schema)
    if kind == "JSON":
        return _json(schema)
    if kind == "STRING":
        return _utf8
    if kind == "BOOLEAN":
        return lambda data: None if data in (b"\x00", b"\x01") else f"a BOOLEAN is one byte 0 or 1, not {data[:8]!r}"
    if kind in SIZES:
        size = SIZES[kind]
        return lambda data: None if len(data) == size else f"a {kind} is {size} bytes, not {len(data)}"
    if kind == "KEY_VALUE" and schema.properties.get("kv.encoding.type", "INLINE") == "INLINE":
        return _key_value(schema)
    return None


def _utf8(data: bytes) -> str | None:
    try:
        data.decode()
    except UnicodeDecodeError as exc:
        return f"a STRING must be UTF-8: {exc}"
    return None


def _avro(schema: Schema) -> Check:
    parsed = fastavro.parse_schema(json.loads(schema.data))
    reader = fastavro.schemaless_reader

    def check(data: bytes) -> str | None:
        buffer = io.BytesIO(data)
        try:
            reader(buffer, parsed, None)
        except Exception as exc:   # fastavro raises whatever the bytes lead it to
            return f"not Avro of the topic's schema: {type(exc).__name__}: {exc}"
        if buffer.tell() != len(data):
            return f"not Avro of the topic's schema: {len(data) - buffer.tell()} bytes left after the record"
        return None
    return check


def _json(schema: Schema) -> Check:
    definition = json.loads(schema.data)
    names = _named(definition)
    fits = _compile(definition, names, {})

    def check(data: bytes) -> str | None:
        try:
            value = json.loads(data)
        except ValueError as exc:
            return f"not JSON: {exc}"
        # The compiled yes/no first (a fit costs a third of walking the definition);
        # the walk only to say why a payload does not fit.
        if fits(value):
            return None
        return _fits(value, definition, names, "") or "does not fit the topic's schema"
    return check


def _key_value(schema: Schema) -> Check:
    key, value = key_value_parts(schema)
    checks = [payload_check(key), payload_check(value)]

    def check(data: bytes) -> str | None:
        offset = 0
        for which, part_check in zip(("key", "value"), checks):
            if offset + 4 > len(data):
                return f"a KEY_VALUE payload lacks its {which}'s length"
            (size,) = _LEN.unpack_from(data, offset)
            offset += 4
            size = max(size, 0)
            if offset + size > len(data):
                return f"a KEY_VALUE payload's {which} overruns it"
            if part_check is not None and (problem := part_check(data[offset:offset + size])):
                return f"{which}: {problem}"
            offset += size
        return None if offset == len(data) else f"{len(data) - offset} bytes after a KEY_VALUE payload's value"
    return check


# ---------------------------------------------------------------- JSON against an Avro definition

def _named(schema: object, found: dict[str, object] | None = None) -> dict[str, object]:
    found = {} if found is None else found
    if isinstance(schema, list):
        for branch in schema:
            _named(branch, found)
    elif isinstance(schema, dict):
        if schema.get("type") in ("record", "error", "enum", "fixed") and "name" in schema:
            found[schema["name"]] = schema
            if schema.get("namespace"):
                found[f"{schema['namespace']}.{schema['name']}"] = schema
        for child in ([f.get("type") for f in schema.get("fields", []) if isinstance(f, dict)]
                      + [schema.get("items"), schema.get("values")]):
            if child is not None:
                _named(child, found)
        if isinstance(schema.get("type"), (dict, list)):
            _named(schema["type"], found)
    return found


_JSON_TYPES: dict[str, Callable[[object], bool]] = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool) and -2**31 <= v < 2**31,
    "long": lambda v: isinstance(v, int) and not isinstance(v, bool) and -2**63 <= v < 2**63,
    "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "double": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "bytes": lambda v: isinstance(v, str),   # JSON carries bytes as text
}


def _fits(value: object, schema: object, names: dict[str, object], path: str) -> str | None:
    at = path or "the value"
    if isinstance(schema, str) and schema in names:
        schema = names[schema]
    if isinstance(schema, list):
        if any(_fits(value, branch, names, path) is None for branch in schema):
            return None
        return f"{at} fits none of {_type_names(schema)}"
    kind = schema.get("type") if isinstance(schema, dict) else schema
    if isinstance(kind, (dict, list)):
        return _fits(value, kind, names, path)
    if isinstance(kind, str) and kind in _JSON_TYPES:
        return None if _JSON_TYPES[kind](value) else f"{at} is {_what(value)}, not {kind}"
    assert isinstance(schema, dict)
    if kind in ("record", "error"):
        if not isinstance(value, dict):
            return f"{at} is {_what(value)}, not a record"
        for field in schema.get("fields", []):
            name = field["name"]
            inner = f"{path}.{name}" if path else name
            if name not in value:
                if "default" in field or _nullable(field["type"], names):
                    continue
                return f"field {inner!r} is missing"
            if problem := _fits(value[name], field["type"], names, inner):
                return problem
        return None
    if kind == "enum":
        symbols = schema.get("symbols", [])
        # the wheel's JsonSchema writes an enum's value, Avro its symbol: both accepted
        ok = value in symbols or (isinstance(value, int) and not isinstance(value, bool))
        return None if ok else f"{at} is {value!r}, not one of {symbols}"
    if kind == "array":
        if not isinstance(value, list):
            return f"{at} is {_what(value)}, not an array"
        for i, item in enumerate(value):
            if problem := _fits(item, schema.get("items"), names, f"{at}[{i}]"):
                return problem
        return None
    if kind == "map":
        if not isinstance(value, dict):
            return f"{at} is {_what(value)}, not a map"
        for key, item in value.items():
            if problem := _fits(item, schema.get("values"), names, f"{at}[{key!r}]"):
                return problem
        return None
    if kind == "fixed":
        return None if isinstance(value, str) else f"{at} is {_what(value)}, not fixed bytes"
    return None   # a type this check does not know: let it through


def _compile(schema: object, names: dict[str, object], done: dict[str, Fits]) -> Fits:
    """``_fits`` as a yes/no closure built once per schema: the same rules, without
    looking the definition up for every value.  ``done``: the named types compiled so far
    (a record may refer to itself, so a name is looked up when the value is checked)."""
    if isinstance(schema, str) and schema in names:
        if schema not in done:
            done[schema] = _ALWAYS   # a placeholder while a recursive definition compiles
            done[schema] = _compile(names[schema], names, done)
        return lambda value: done[schema](value)
    if isinstance(schema, list):
        branches = [_compile(branch, names, done) for branch in schema]
        return lambda value: any(branch(value) for branch in branches)
    kind = schema.get("type") if isinstance(schema, dict) else schema
    if isinstance(kind, (dict, list)):
        return _compile(kind, names, done)
    if isinstance(kind, str) and kind in _JSON_TYPES:
        return _JSON_TYPES[kind]
    if not isinstance(schema, dict):
        return _ALWAYS
    if kind in ("record", "error"):
        fields = [(f["name"], _compile(f["type"], names, done),
                   "default" in f or _nullable(f["type"], names)) for f in schema.get("fields", [])]

        def record(value: object) -> bool:
            if not isinstance(value, dict):
                return False
            for name, fits, optional in fields:
                if name in value:
                    if not fits(value[name]):
                        return False
                elif not optional:
                    return False
            return True
        return record
    if kind == "enum":
        symbols = set(schema.get("symbols", []))
        return lambda value: (isinstance(value, str) and value in symbols) or \
            (isinstance(value, int) and not isinstance(value, bool))
    if kind == "array":
        items = _compile(schema.get("items"), names, done)
        return lambda value: isinstance(value, list) and all(items(item) for item in value)
    if kind == "map":
        values = _compile(schema.get("values"), names, done)
        return lambda value: isinstance(value, dict) and all(values(item) for item in value.values())
    if kind == "fixed":
        return lambda value: isinstance(value, str)
    return _ALWAYS


Fits = Callable[[object], bool]


def _ALWAYS(value: object) -> bool:
    return True


def _nullable(schema: object, names: dict[str, object]) -> bool:
    if isinstance(schema, list):
        return any(_nullable(b, names) for b in schema)
    return schema == "null" or (isinstance(schema, dict) and schema.get("type") == "null")


def _type_names(branches: list[object]) -> list[str]:
    return [str(b.get("name") or b.get("type")) if isinstance(b, dict) else str(b) for b in branches]


def _what(value: object) -> str:
    return "null" if value is None else type(value).__name__
