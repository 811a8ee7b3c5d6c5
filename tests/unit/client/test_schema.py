"""magnetar.schema (the client's ``schema=``): records describe the same Avro schema as
pulsar-client's for the same class, values encode to the same bytes, decode back (an
Avro value through its writer's schema), and wrong values are refused before sending."""

from __future__ import annotations

import enum
import json

import pulsar.schema as wheel
import pytest

import magnetar.schema as ours
from magnetar._values import ValueReader, check_schema
from magnetar_protocol import magnetar_pb2 as pb


class Color(enum.Enum):
    red = 1
    green = 2


def classes(s):
    """The same records declared with either package (``s``: pulsar.schema or magnetar.schema)."""
    class Inner(s.Record):
        x = s.Integer(required=True)
        label = s.String(default="hi", required_default=True)

    class Example(s.Record):
        _avro_namespace = "com.example"
        a = s.Integer()
        b = s.Long(required=True)
        c = s.String(required_default=True)
        d = s.Boolean()
        e = s.Float()
        f = s.Double()
        g = s.Bytes()
        h = s.Array(s.String())
        i = s.Map(s.Integer())
        j = Color
        k = Inner
        items = s.Array(Inner())
        m = s.CustomEnum(Color, default=Color.green, required_default=True)

    return Example, Inner


OURS, WHEELS = classes(ours), classes(wheel)


def value(s):
    example, inner = OURS if s is ours else WHEELS
    return example(a=1, b=2, c="x", d=True, e=1.5, f=2.25, g=b"q", h=["a"], i={"z": 3}, j=Color.red,
                   k=inner(x=5), items=[inner(x=1)], m="red")


def test_a_record_describes_the_schema_pulsar_client_describes():
    ours_example, wheel_example = OURS[0], WHEELS[0]
    assert ours_example.schema() == wheel_example.schema()
    # the definition's text too: the registry finds an identical schema by its bytes
    for kind in ("AvroSchema", "JsonSchema"):
        text = getattr(ours, kind)(ours_example).schema_info().schema()
        assert text == getattr(wheel, kind)(wheel_example).schema_info().schema()
    sorted_cls = type("S", (ours.Record,), {"_sorted_fields": True, "b": ours.Integer(), "a": ours.Integer()})
    assert [f["name"] for f in sorted_cls.schema()["fields"]] == ["a", "b"]


def test_avro_values_are_pulsar_clients_bytes_both_ways():
    ours_avro, wheel_avro = ours.AvroSchema(OURS[0]), wheel.AvroSchema(WHEELS[0])
    data = ours_avro.encode(value(ours))
    assert data == wheel_avro.encode(value(wheel))
    back = ours_avro.decode(data)
    assert back == value(ours)
    assert (back.k.x, back.items[0].label, back.m) == (5, "hi", Color.red)


def test_json_values_round_trip_and_read_pulsar_clients():
    example = OURS[0]
    schema = ours.JsonSchema(example)
    data = schema.encode(value(ours))
    assert json.loads(data)["j"] == 1                     # an enum by value, as pulsar-client writes it
    assert schema.decode(data) == value(ours)
    assert schema.decode(wheel.JsonSchema(WHEELS[0]).encode(value(wheel))) == value(ours)
    # a newer writer's field is left out, not an error
    newer = json.loads(data) | {"added": 1}
    assert schema.decode(json.dumps(newer).encode()) == value(ours)


def test_wrong_values_are_refused_before_sending():
    example = OURS[0]
    with pytest.raises(TypeError, match="'a'"):
        example(a="one", b=1)
    with pytest.raises(TypeError, match="bool"):
        example(a=True, b=1)
    with pytest.raises(AttributeError, match="nope"):
        example(b=1, nope=2)
    with pytest.raises(TypeError, match="'j'"):
        example(b=1, j="blue")
    with pytest.raises(TypeError):
        ours.AvroSchema(example).encode({"b": 1})           # a record schema sends records
    with pytest.raises(TypeError):
        ours.StringSchema().encode(b"bytes")
    with pytest.raises(TypeError, match="magnetar.schema"):
        check_schema(wheel.AvroSchema(WHEELS[0]))   # the wheel's schema objects are not ours
    assert check_schema(ours.BytesSchema()) is None and check_schema(None) is None


def test_an_avro_definition_without_a_class_sends_dicts():
    definition = {"type": "record", "name": "P", "fields": [{"name": "n", "type": "int"}]}
    schema = ours.AvroSchema(None, definition)
    assert schema.decode(schema.encode({"n": 7})) == {"n": 7}
    with pytest.raises(ValueError):
        ours.AvroSchema(None)


def test_values_are_read_with_their_writers_schema():
    old = type("Example", (ours.Record,), {"a": ours.Integer(), "b": ours.Integer()})
    new = type("Example", (ours.Record,), {"a": ours.Integer(), "b": ours.Integer(),
                                           "c": ours.String(required_default=True)})
    reader = ValueReader(ours.AvroSchema(new))
    written = pb.SingleMessage(payload=ours.AvroSchema(old).encode(old(a=1, b=2)), schema_version=0)
    messages = [type("M", (), {"_msg": written})()]
    assert reader.missing(messages) == {0}
    with pytest.raises(EOFError):
        reader.value(written)             # read as the new schema the old bytes do not parse
    reader.learn(0, pb.SchemaVersion(version=0, schema=pb.Schema(
        type="AVRO", data=ours.AvroSchema(old).schema_info().schema().encode())))
    assert reader.missing(messages) == set()
    assert reader.value(written) == new(a=1, b=2, c=None)
    unversioned = pb.SingleMessage(payload=ours.AvroSchema(new).encode(new(a=3, b=4, c="z")))
    assert reader.value(unversioned) == new(a=3, b=4, c="z")
    reader.learn(1, None)                 # a version the registry no longer has: our own schema
    assert reader.value(pb.SingleMessage(payload=unversioned.payload, schema_version=1)).c == "z"
