"""Schema compatibility rules (magnetar_protocol.schemacompat): Pulsar's strategies over
Avro's resolution rules, on the schemas the `pulsar-client` wheel's classes produce."""

from __future__ import annotations

import json

import pytest

from magnetar_protocol.errors import BadRequest
from magnetar_protocol.schemacompat import DEFAULT_STRATEGY, SchemaData, incompatibility


def avro(*fields, name="Example", type_="AVRO") -> SchemaData:
    return SchemaData(type_, json.dumps({"name": name, "type": "record", "fields": list(fields)}))


def opt(name, kind, **extra):
    return {"name": name, "type": ["null", kind], **extra}


V1 = avro(opt("a", "int"), opt("b", "int"))
BAD = avro(opt("a", "string"), opt("b", "int"), name="BadExample")   # the wheel's own test case


def test_pulsars_default_is_full():
    assert DEFAULT_STRATEGY == "FULL"


def test_a_changed_field_type_is_refused_and_the_same_schema_accepted():
    assert incompatibility(V1, [V1], "FULL") is None
    assert "a: the reader's union has no branch for the writer's int" in incompatibility(BAD, [V1], "FULL")
    assert incompatibility(BAD, [V1], "ALWAYS_COMPATIBLE") is None


def test_another_type_is_refused_unless_always_compatible():
    json_v1 = SchemaData("JSON", V1.definition)
    assert "AVRO, not JSON" in incompatibility(json_v1, [V1], "FULL")
    assert "AVRO, not STRING" in incompatibility(SchemaData("STRING", ""), [V1], "BACKWARD")
    assert incompatibility(json_v1, [V1], "ALWAYS_COMPATIBLE") is None


def test_record_names_are_not_compared():
    # The wheel names a schema after its class: Example and ExampleRequiredDefault with
    # the same fields (defaults added) are one schema to Pulsar.
    renamed = avro(opt("a", "int", default=None), opt("b", "int", default=None), name="ExampleRequiredDefault")
    assert incompatibility(renamed, [V1], "FULL") is None


@pytest.mark.parametrize("strategy, added_with_default, added_required, removed_optional", [
    ("BACKWARD", None, "missing", None),
    ("FORWARD", None, None, "missing"),
    ("FULL", None, "missing", "missing"),
])
def test_the_directions_of_each_strategy(strategy, added_with_default, added_required, removed_optional):
    with_default = avro(opt("a", "int"), opt("b", "int"), opt("c", "string", default=None))
    required = avro(opt("a", "int"), opt("b", "int"), {"name": "c", "type": "string"})
    fewer = avro(opt("a", "int"))
    for candidate, expected in ((with_default, added_with_default), (required, added_required),
                                (fewer, removed_optional)):
        problem = incompatibility(candidate, [V1], strategy)
        assert (problem is None) == (expected is None), (strategy, candidate, problem)
        if expected:
            assert expected in problem


def test_the_wheels_schema_evolution_passes_forward():
    # pulsar-client's test_schema_evolve: User1 then User2 (age now required), FORWARD.
    user1 = avro(opt("name", "string"), opt("age", "int"), name="User1")
    user2 = avro({"name": "age", "type": "int"}, opt("name", "string"), name="User2")
    assert incompatibility(user2, [user1], "FORWARD") is None
    assert incompatibility(user2, [user1], "BACKWARD") is not None   # an int read from a null


def test_promotions_and_transitive_strategies():
    as_long = avro(opt("a", "long"), opt("b", "int"))
    assert incompatibility(as_long, [V1], "BACKWARD") is None      # int data read as long
    assert incompatibility(as_long, [V1], "FORWARD") is not None   # long data is no int
    v2 = avro(opt("a", "int"), opt("b", "int", default=None), opt("c", "int", default=None))
    v3 = avro(opt("a", "int"), opt("c", "int", default=None))
    assert incompatibility(v3, [V1, v2], "FORWARD") is None
    assert incompatibility(v3, [avro(opt("a", "int"), {"name": "b", "type": "int"}), v2],
                           "FORWARD_TRANSITIVE") is not None


def test_enums_arrays_maps_and_nested_records():
    color = {"type": "enum", "name": "Color", "symbols": ["red", "green"]}
    more = {"type": "enum", "name": "Color", "symbols": ["red", "green", "blue"]}
    nested = {"type": "record", "name": "Sub", "fields": [opt("x", "int")]}
    old = avro(opt("c", color), opt("xs", {"type": "array", "items": "int"}), opt("sub", nested),
               opt("again", "Sub"))
    new = avro(opt("c", more), opt("xs", {"type": "array", "items": "long"}), opt("sub", nested),
               opt("again", "Sub"))
    assert incompatibility(new, [old], "BACKWARD") is None
    assert "enum lacks ['blue']" in incompatibility(new, [old], "FORWARD")


def test_always_incompatible_and_unknown_strategies():
    assert incompatibility(V1, [V1], "ALWAYS_INCOMPATIBLE") is None
    assert incompatibility(avro(opt("a", "int")), [V1], "ALWAYS_INCOMPATIBLE") is not None
    assert incompatibility(BAD, [], "FULL") is None   # the first schema of a topic
    with pytest.raises(BadRequest, match="unknown schema compatibility strategy"):
        incompatibility(V1, [V1], "SOMETIMES")


def test_other_types_compare_their_definitions():
    assert incompatibility(SchemaData("STRING", ""), [SchemaData("STRING", "")], "FULL") is None
    assert incompatibility(SchemaData("PROTOBUF_NATIVE", "b"), [SchemaData("PROTOBUF_NATIVE", "a")], "FULL")
