"""Schema compatibility (Pulsar's strategies) for a topic's schema registry: may a new
schema join the versions a topic has.  Pure: no I/O.  Schemas are Pulsar SchemaInfo
values (a type name and its definition text).

Strategies, as Pulsar names them (``schemaCompatibilityStrategy``):

| strategy | the new schema must |
|---|---|
| ALWAYS_COMPATIBLE | nothing (any schema, any type) |
| ALWAYS_INCOMPATIBLE | equal an existing one |
| BACKWARD | read data written with the latest version |
| FORWARD | write data the latest version reads |
| FULL | both, with the latest version (Pulsar's default) |
| BACKWARD_TRANSITIVE, FORWARD_TRANSITIVE, FULL_TRANSITIVE | the same against every version |

Types must match (an AVRO topic takes no JSON schema) unless ALWAYS_COMPATIBLE.  AVRO and
JSON definitions are Avro schemas (Pulsar's JSON schema is described in Avro) and are
checked with Avro's resolution rules (the spec's "Schema Resolution"); PROTOBUF_NATIVE
keeps its root message (Pulsar's default check for it); KEY_VALUE checks its key and its
value each by these rules; the other types (STRING, the primitives, PROTOBUF) have no
rule beyond their type, as Pulsar's default check: only ALWAYS_INCOMPATIBLE refuses them.

Record names are not compared (the wheel's Avro classes take their Python class name,
and Pulsar's check, Avro's resolving grammar, does not compare them either); field
names, types, defaults, enum symbols, union branches and promotions are.

A consumer's schema is checked as Pulsar's checkConsumerCompatibility does: it must read
what the latest version wrote (BACKWARD against the latest) under BACKWARD, FORWARD,
FORWARD_TRANSITIVE and FULL; against every version under the other transitive ones.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from magnetar_protocol.errors import BadRequest

STRATEGIES = ("ALWAYS_COMPATIBLE", "ALWAYS_INCOMPATIBLE", "BACKWARD", "FORWARD", "FULL",
              "BACKWARD_TRANSITIVE", "FORWARD_TRANSITIVE", "FULL_TRANSITIVE")
# Pulsar's broker default (ServiceConfiguration.schemaCompatibilityStrategy = FULL); a
# namespace's own policy starts UNDEFINED, which means the broker's.
DEFAULT_STRATEGY = "FULL"
UNDEFINED = "UNDEFINED"
AVRO_LIKE = ("AVRO", "JSON")

# Avro's promotions: a writer's type the reader's type reads.
_PROMOTIONS = {("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"), ("long", "double"),
               ("float", "double"), ("string", "bytes"), ("bytes", "string")}
_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


@dataclass(frozen=True, slots=True)
class SchemaData:
    type: str        # Pulsar's SchemaType name: AVRO, JSON, STRING, ...
    definition: str  # the schema text (an Avro schema for AVRO and JSON; "" for most others)
    parts: tuple[SchemaData, SchemaData] | None = None   # KEY_VALUE: the key's and the value's


class Incompatible(Exception):
    """Why one schema cannot read another's data."""


def check_strategy(name: str) -> str:
    if name not in STRATEGIES:
        raise BadRequest(f"unknown schema compatibility strategy {name!r}; one of {', '.join(STRATEGIES)}")
    return name


def consumer_incompatibility(new: SchemaData, existing: Sequence[SchemaData], strategy: str) -> str | None:
    """Why a consumer with schema ``new`` may not read a topic whose schemas are
    ``existing`` (oldest first, not empty), or None."""
    check_strategy(strategy)
    if strategy in ("BACKWARD", "FORWARD", "FORWARD_TRANSITIVE", "FULL"):
        return incompatibility(new, existing[-1:], "BACKWARD")
    return incompatibility(new, existing, strategy)


def incompatibility(new: SchemaData, existing: Sequence[SchemaData], strategy: str) -> str | None:
    """Why ``new`` may not join ``existing`` (oldest first) under ``strategy``, or None."""
    check_strategy(strategy)
    if strategy == "ALWAYS_COMPATIBLE" or not existing:
        return None
    if strategy == "ALWAYS_INCOMPATIBLE":
        return None if new in existing else "the strategy is ALWAYS_INCOMPATIBLE: no new schema may be added"
    against = existing if strategy.endswith("_TRANSITIVE") else existing[-1:]
    base = strategy.removesuffix("_TRANSITIVE")
    for old in reversed(against):
        if old.type != new.type:
            return f"the topic's schema is {old.type}, not {new.type}"
        try:
            if base in ("BACKWARD", "FULL"):
                can_read(old, new)   # the new schema reads old data
            if base in ("FORWARD", "FULL"):
                can_read(new, old)   # old readers read new data
        except Incompatible as exc:
            return f"{strategy}: {exc}"
    return None


def can_read(writer: SchemaData, reader: SchemaData) -> None:
    """Raise Incompatible unless data written with ``writer`` reads with ``reader``."""
    if writer.type != reader.type:
        raise Incompatible(f"{writer.type} data cannot be read as {reader.type}")
    if writer.type in AVRO_LIKE:
        w, r = _json(writer), _json(reader)
        _resolve(w, r, _names(w), _names(r), "")
    elif writer.type == "PROTOBUF_NATIVE":
        roots = [_json(s).get("rootMessageTypeName") if isinstance(_json(s), dict) else None
                 for s in (writer, reader)]
        if roots[0] != roots[1]:
            raise Incompatible(f"the root message changed from {roots[0]!r} to {roots[1]!r}")
    elif writer.type == "KEY_VALUE":
        if writer.parts is None or reader.parts is None:
            raise Incompatible("a KEY_VALUE schema without its key and value schemas")
        for which, w_part, r_part in zip(("key", "value"), writer.parts, reader.parts):
            try:
                can_read(w_part, r_part)
            except Incompatible as exc:
                raise Incompatible(f"{which}: {exc}") from None


def _json(schema: SchemaData) -> object:
    try:
        return json.loads(schema.definition or "null")
    except ValueError as exc:
        raise Incompatible(f"a {schema.type} definition is not JSON: {exc}") from None


def _names(schema: object) -> dict[str, object]:
    """Named types (records, enums, fixed) by full and short name, for references."""
    found: dict[str, object] = {}

    def walk(s: object, namespace: str) -> None:
        if isinstance(s, list):
            for branch in s:
                walk(branch, namespace)
        elif isinstance(s, dict):
            kind = s.get("type")
            if kind in ("record", "error", "enum", "fixed") and "name" in s:
                ns = s.get("namespace", namespace)
                name = s["name"]
                full = name if "." in name or not ns else f"{ns}.{name}"
                found[full] = found[name.rsplit(".", 1)[-1]] = s
                for f in s.get("fields", []) if kind in ("record", "error") else []:
                    walk(f.get("type"), ns)
            elif kind == "array":
                walk(s.get("items"), namespace)
            elif kind == "map":
                walk(s.get("values"), namespace)
            elif isinstance(kind, (dict, list)):
                walk(kind, namespace)
    walk(schema, "")
    return found


def _deref(s: object, names: dict[str, object]) -> object:
    while isinstance(s, str) and s not in _PRIMITIVES:
        if s not in names:
            raise Incompatible(f"unknown type {s!r}")
        s = names[s]
    if isinstance(s, dict) and isinstance(s.get("type"), str) and s["type"] in _PRIMITIVES:
        return s["type"]   # {"type": "int", "logicalType": ...}: its primitive
    return s


def _kind(s: object) -> str:
    if isinstance(s, list):
        return "union"
    if isinstance(s, str):
        return s
    assert isinstance(s, dict)
    kind = s.get("type")
    return "record" if kind == "error" else str(kind)


def _resolve(w: object, r: object, wn: dict, rn: dict, where: str) -> None:
    w, r = _deref(w, wn), _deref(r, rn)
    wk, rk = _kind(w), _kind(r)
    at = where or "the schema"
    if wk == "union":
        assert isinstance(w, list)
        for branch in w:   # every branch the writer may write must be readable
            _resolve(branch, r, wn, rn, where)
        return
    if rk == "union":
        assert isinstance(r, list)
        if any(_matches(w, branch, wn, rn, where) for branch in r):
            return
        alike = [b for b in r if _kind(_deref(b, rn)) == wk]
        if len(alike) == 1:   # the branch meant for it: its own reason is the useful one
            _resolve(w, alike[0], wn, rn, where)
        raise Incompatible(f"{at}: the reader's union has no branch for the writer's {wk}")
    if wk == rk:
        if wk == "record":
            _resolve_records(w, r, wn, rn, where)
        elif wk == "enum":
            assert isinstance(w, dict) and isinstance(r, dict)
            missing = set(w.get("symbols", [])) - set(r.get("symbols", []))
            if missing and "default" not in r:
                raise Incompatible(f"{at}: the reader's enum lacks {sorted(missing)}")
        elif wk == "array":
            assert isinstance(w, dict) and isinstance(r, dict)
            _resolve(w.get("items"), r.get("items"), wn, rn, f"{where}[]")
        elif wk == "map":
            assert isinstance(w, dict) and isinstance(r, dict)
            _resolve(w.get("values"), r.get("values"), wn, rn, f"{where}{{}}")
        elif wk == "fixed":
            assert isinstance(w, dict) and isinstance(r, dict)
            if w.get("size") != r.get("size"):
                raise Incompatible(f"{at}: fixed of size {w.get('size')} read as size {r.get('size')}")
        return
    if (wk, rk) in _PROMOTIONS:
        return
    raise Incompatible(f"{at}: the writer's {wk} cannot be read as {rk}")


def _matches(w: object, branch: object, wn: dict, rn: dict, where: str) -> bool:
    try:
        _resolve(w, branch, wn, rn, where)
    except Incompatible:
        return False
    return True


def _resolve_records(w: object, r: object, wn: dict, rn: dict, where: str) -> None:
    assert isinstance(w, dict) and isinstance(r, dict)
    written = {f["name"]: f for f in _fields(w)}
    for field in _fields(r):
        path = f"{where}.{field['name']}" if where else field["name"]
        source = written.get(field["name"]) or next(
            (written[a] for a in field.get("aliases", []) if a in written), None)
        if source is None:
            if "default" not in field:
                raise Incompatible(f"field {path!r} is missing from the written data and has no default")
            continue
        _resolve(source["type"], field["type"], wn, rn, path)


def _fields(record: dict) -> Iterable[dict]:
    fields = record.get("fields", [])
    if not isinstance(fields, list) or not all(isinstance(f, dict) and "name" in f and "type" in f
                                               for f in fields):
        raise Incompatible(f"record {record.get('name')!r} has malformed fields")
    return fields
