"""What a schema is on each wire (magnetar_protocol.schemainfo): Pulsar's type numbers,
8-byte versions, the hash identical schemas share, KEY_VALUE's encoding, the admin's
PostSchemaPayload and GetSchemaResponse bodies, and refusals of malformed schemas."""

from __future__ import annotations

import json

import pytest

from magnetar_protocol import magnetar_pb2 as mpb
from magnetar_protocol import pulsar_api_pb2 as pb
from magnetar_protocol import schemainfo as si
from magnetar_protocol.errors import BadRequest

AVRO = json.dumps({"type": "record", "name": "A", "fields": [{"name": "x", "type": "int"}]})


def test_versions_are_pulsars_eight_bytes():
    assert si.version_bytes(0) == b"\x00" * 8
    assert si.version_bytes(258) == b"\x00" * 6 + b"\x01\x02"
    assert si.parse_version(si.version_bytes(2**40)) == 2**40
    with pytest.raises(BadRequest, match="8 bytes"):
        si.parse_version(b"\x01")


def test_pulsar_schemas_map_both_ways_and_none_is_no_schema():
    schema = si.from_pulsar(pb.Schema(name="t", type=pb.Schema.Avro, schema_data=AVRO.encode(),
                                      properties=[pb.KeyValue(key="k", value="v")]))
    assert schema == si.Schema("AVRO", AVRO.encode(), {"k": "v"})
    back = si.to_pulsar(schema, "public/default/t")
    assert (back.type, back.name, back.schema_data) == (pb.Schema.Avro, "public/default/t", AVRO.encode())
    assert si.from_pulsar(pb.Schema(name="t", type=pb.Schema.Type.Value("None"), schema_data=b"")) is None
    assert si.from_pulsar(pb.Schema(name="t", type=pb.Schema.AutoConsume, schema_data=b"")) is None
    assert si.from_proto(mpb.Schema()) is None and si.from_proto(mpb.Schema(type="BYTES")) is None
    assert set(si.TYPES) >= {"AVRO", "JSON", "PROTOBUF", "PROTOBUF_NATIVE", "KEY_VALUE", "STRING", "INT64"}


def test_the_hash_is_type_and_definition_not_properties():
    a = si.Schema("AVRO", AVRO.encode(), {"k": "1"})
    assert a.hash == si.Schema("AVRO", AVRO.encode(), {"k": "2"}).hash
    assert a.hash != si.Schema("JSON", AVRO.encode()).hash
    assert a.hash != si.Schema("AVRO", AVRO.encode() + b" ").hash


def test_a_primitive_has_no_definition_whichever_client_sent_one():
    # pulsar-client's Python StringSchema sends "null", Java's StringSchema nothing: one schema
    wheel = si.from_pulsar(pb.Schema(name="t", type=pb.Schema.String, schema_data=b"null"))
    assert wheel == si.from_proto(mpb.Schema(type="STRING")) == si.Schema("STRING")
    assert si.from_payload({"type": "INT64", "schema": "null"}).data == b""


def test_key_value_schemas_encode_decode_and_show_as_pulsar_does():
    body = {"type": "KEY_VALUE", "schema": json.dumps({"key": "", "value": json.loads(AVRO)}),
            "properties": {"key.schema.type": "STRING", "value.schema.type": "AVRO"}}
    schema = si.from_payload(body)
    key, value = si.key_value_parts(schema)
    assert (key.type, key.data, value.type, json.loads(value.data)) == ("STRING", b"", "AVRO", json.loads(AVRO))
    assert json.loads(si.definition_text(schema)) == {"key": "", "value": json.loads(AVRO)}
    assert schema.comparable().parts[1].type == "AVRO"
    with pytest.raises(BadRequest, match="overruns"):
        si.key_value_parts(si.Schema("KEY_VALUE", b"\x00\x00\x00\x09ab"))
    with pytest.raises(BadRequest, match="after the value"):
        si.key_value_parts(si.Schema("KEY_VALUE", si.key_value_data(b"", b"") + b"x"))


@pytest.mark.parametrize("body, why", [
    ("AVRO", "the body must be"),
    ({"schema": AVRO}, "type is required"),
    ({"type": "AVRO", "schema": "{nope"}, "must be JSON"),
    ({"type": "BYTES", "schema": ""}, "BYTES is no schema"),
    ({"type": "XML", "schema": "<a/>"}, "unknown schema type"),
    ({"type": "AVRO", "schema": AVRO, "properties": {"k": 1}}, "properties must be"),
    ({"type": "AVRO", "schema": AVRO, "extra": 1}, "unknown field"),
    ({"type": "KEY_VALUE", "schema": '{"key": ""}'}, "KEY_VALUE schema is"),
])
def test_malformed_payloads_are_refused(body, why):
    with pytest.raises(BadRequest, match=why):
        si.from_payload(body)


def test_get_schema_response_body():
    schema = si.from_payload({"type": "avro", "schema": AVRO, "properties": {"p": "q"}})
    assert si.as_json(3, schema, 1234) == {"version": 3, "type": "AVRO", "timestamp": 1234, "data": AVRO,
                                           "properties": {"p": "q"}}
