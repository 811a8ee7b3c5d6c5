"""Schema compatibility rules (magnetar_protocol.schemacompat): Pulsar's strategies over
Avro's resolution rules, on the schemas the `pulsar-client` wheel's classes produce."""

from __future__ import annotations

import json

import pytest

from magnetar_protocol.errors import BadRequest
from magnetar_protocol.schemacompat import DEFAULT_STRATEGY, SchemaData, consumer_incompatibility, incompatibility


def avro(*fields, name="Example", type_="AVRO") -> SchemaData:
    return SchemaData(type_, json.dumps({"name": name, "type": "record", "fields": list(fields)}))


def opt(name, kind, **extra):
    return {"name": name, "type": ["null", kind], **extra}


V1 = avro(opt("a", "int"), opt("b", "int"))
BAD = avro(opt("a", "string"), opt("b", "int"), name="BadExample")   # the wheel's own test case


def test_pulsars_default_is_full():
    # Checked against Apache Pulsar: ServiceConfiguration.schemaCompatibilityStrategy is
    # FULL; a namespace's schema_compatibility_strategy starts UNDEFINED (the broker's).
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


def test_other_types_follow_pulsars_default_check():
    # No rule beyond the type (Pulsar's default check) but ALWAYS_INCOMPATIBLE's.
    assert incompatibility(SchemaData("STRING", ""), [SchemaData("STRING", "")], "FULL") is None
    proto_v1, proto_v2 = SchemaData("PROTOBUF", '{"a": 1}'), SchemaData("PROTOBUF", '{"a": 2}')
    assert incompatibility(proto_v2, [proto_v1], "FULL_TRANSITIVE") is None
    assert incompatibility(proto_v2, [proto_v1], "ALWAYS_INCOMPATIBLE") is not None


def native(root: str, descriptor: str = "x") -> SchemaData:
    return SchemaData("PROTOBUF_NATIVE", json.dumps({"fileDescriptorSet": descriptor, "rootMessageTypeName": root,
                                                    "rootFileDescriptorName": "a.proto"}))


def test_protobuf_native_keeps_its_root_message():
    assert incompatibility(native("pkg.Order", "v2"), [native("pkg.Order", "v1")], "FULL") is None
    assert "root message changed" in incompatibility(native("pkg.Item"), [native("pkg.Order")], "BACKWARD")
    assert "not JSON" in incompatibility(SchemaData("PROTOBUF_NATIVE", "b"), [native("pkg.Order")], "FULL")


def test_key_value_checks_the_key_and_the_value():
    def kv(value: SchemaData) -> SchemaData:
        return SchemaData("KEY_VALUE", value.definition, (SchemaData("STRING", ""), value))

    assert incompatibility(kv(V1), [kv(V1)], "FULL") is None
    assert "value: " in incompatibility(kv(BAD), [kv(V1)], "FULL")
    assert incompatibility(kv(BAD), [kv(V1)], "ALWAYS_COMPATIBLE") is None


def test_a_consumer_must_read_the_latest_versions_data():
    needs_c = avro(opt("a", "int"), opt("b", "int"), {"name": "c", "type": "int"})
    drops_b = avro(opt("a", "int"))
    # FULL (and BACKWARD, FORWARD, FORWARD_TRANSITIVE): BACKWARD against the latest only.
    assert consumer_incompatibility(drops_b, [V1], "FULL") is None          # it reads v1's data
    assert "missing" in consumer_incompatibility(needs_c, [V1], "FORWARD")  # v1's data lacks c
    old = avro({"name": "a", "type": "int"})
    # BACKWARD_TRANSITIVE: against every version (old's a is no union: V1's optional a
    # reads it, but drops_b must also read it, which it does).
    assert consumer_incompatibility(drops_b, [old, V1], "BACKWARD_TRANSITIVE") is None
    assert consumer_incompatibility(needs_c, [old, V1], "FULL_TRANSITIVE") is not None
