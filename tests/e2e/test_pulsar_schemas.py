"""Schemas with the real `pulsar-client` wheel against a real local Magnetar (two brokers
and the admin, one cluster for the module): Avro and JSON values with ``msg.value()``,
schema versions on messages, GET_SCHEMA (latest and one version) and
GET_OR_CREATE_SCHEMA, evolution under each strategy, incompatible producers and consumers
refused, isAllowAutoUpdateSchema and schemaValidationEnforced; and the Magnetar client's
``schema=`` (magnetar.schema) interoperating with the wheel both ways.

Each test that sets a schema policy does it on a namespace of its own, so the module's
cluster is shared (no cluster-wide setting changes).
"""

from __future__ import annotations

import itertools
import json

import _pulsar
import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String, StringSchema

import magnetar
import magnetar.schema as mschema
from magnetar_protocol import pulsar_api_pb2 as pb
from tests.e2e.helpers import admin
from tests.e2e.pulsar_wire import Wire

pytestmark = [pytest.mark.shared_cluster, pytest.mark.cluster(brokers=2, coordinators=0, registry=False)]

TIMEOUT_MS = 10_000
_names = itertools.count()
Type = pb.BaseCommand.Type


def namespace(cluster, **policies) -> str:
    """A namespace of this test's own, with its schema policies set through the admin."""
    ns = f"public/schemas-{next(_names)}"
    assert admin(cluster, "PUT", f"/admin/v2/namespaces/{ns}")[0] == 204
    routes = {"strategy": ("PUT", "schemaCompatibilityStrategy"), "auto_update": ("POST", "isAllowAutoUpdateSchema"),
              "enforced": ("POST", "schemaValidationEnforced")}
    for key, value in policies.items():
        method, route = routes[key]
        assert admin(cluster, method, f"/admin/v2/namespaces/{ns}/{route}", value)[0] == 204
    return ns


def topic(ns: str = "public/default") -> str:
    return f"persistent://{ns}/schema-{next(_names)}"


@pytest.fixture
def client(wheel):
    """This module's tests call the wheel ``client`` (the upstream tests' name)."""
    return wheel


class Example(Record):
    a = Integer()
    b = Integer()


class BadExample(Record):        # the wheel's own incompatible variation: a is a string
    a = String()
    b = Integer()


class WithDefault(Record):       # Example plus a field with a default: compatible both ways
    a = Integer()
    b = Integer()
    c = String(required_default=True)


class AddedNoDefault(Record):    # a new field without a default: old data lacks it
    a = Integer()
    b = Integer()
    c = String()


class Removed(Record):           # b removed (it had no default): old readers need it
    a = Integer()


# ---------------------------------------------------------------- values and versions


def test_avro_values_schema_versions_and_get_schema(client):
    name = topic()
    consumer = client.subscribe(name, "sub", schema=AvroSchema(Example),
                                initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(name, schema=AvroSchema(Example))
    producer.send(Example(a=1, b=2))
    msg = consumer.receive(timeout_millis=TIMEOUT_MS)
    assert msg.value() == Example(a=1, b=2)
    assert msg.schema_version().encode() == b"\x00" * 8    # the wheel's own test_schema_version
    for version in (-1, 0):                                  # latest, then version 0
        info = client._client.get_schema_info(name, version)
        assert info.schema_type() == _pulsar.SchemaType.AVRO
        assert json.loads(info.schema()) == Example.schema()
    with pytest.raises(Exception, match="TopicNotFound|not found"):
        client._client.get_schema_info(name, 7)


def test_old_messages_read_with_their_writers_schema_after_evolution(client):
    name = topic()
    old = client.create_producer(name, schema=AvroSchema(Example))
    old.send(Example(a=1, b=2))
    new = client.create_producer(name, schema=AvroSchema(WithDefault))   # FULL: compatible
    new.send(WithDefault(a=3, b=4, c="x"))
    consumer = client.subscribe(name, "sub", schema=AvroSchema(WithDefault),
                                initial_position=pulsar.InitialPosition.Earliest)
    first, second = (consumer.receive(timeout_millis=TIMEOUT_MS) for _ in range(2))
    # Decoding the first needs version 0's definition (GET_SCHEMA by version): read with
    # the consumer's own schema the bytes would not parse.
    assert (first.value().a, first.value().b, first.value().c) == (1, 2, None)
    assert (second.value().a, second.value().c) == (3, "x")
    assert [m.schema_version().encode() for m in (first, second)] == [b"\x00" * 8, b"\x00" * 7 + b"\x01"]


def test_json_values_and_evolution(client):
    name = topic()
    producer = client.create_producer(name, schema=JsonSchema(Example))
    consumer = client.subscribe(name, "sub", schema=JsonSchema(Example),
                                initial_position=pulsar.InitialPosition.Earliest)
    producer.send(Example(a=5, b=6))
    assert consumer.receive(timeout_millis=TIMEOUT_MS).value() == Example(a=5, b=6)
    client.create_producer(name, schema=JsonSchema(WithDefault)).send(WithDefault(a=7, b=8, c="y"))
    assert json.loads(consumer.receive(timeout_millis=TIMEOUT_MS).data()) == {"a": 7, "b": 8, "c": "y"}
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(name, schema=JsonSchema(BadExample))


# ---------------------------------------------------------------- refusals


def test_incompatible_producers_and_consumers_are_refused(client):
    name = topic()
    client.create_producer(name, schema=AvroSchema(Example))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(name, schema=AvroSchema(BadExample))
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(name, schema=JsonSchema(Example))      # another type
    for schema in (AvroSchema(BadExample), JsonSchema(BadExample), StringSchema()):
        with pytest.raises(pulsar.IncompatibleSchema):
            client.subscribe(name, "sub", schema=schema)
    client.subscribe(name, "sub", schema=AvroSchema(Example)).close()   # the right one is accepted
    client.subscribe(name, "bytes").close()                             # no schema: not checked


@pytest.mark.parametrize("strategy, added_no_default, removed, with_default", [
    ("BACKWARD", False, True, True),
    ("FORWARD", True, False, True),
    ("FULL", False, False, True),
    ("ALWAYS_COMPATIBLE", True, True, True),
    ("ALWAYS_INCOMPATIBLE", False, False, False),
])
def test_evolution_under_each_strategy(cluster, client, strategy, added_no_default, removed, with_default):
    ns = namespace(cluster, strategy=strategy)
    for record_cls, accepted in ((AddedNoDefault, added_no_default), (Removed, removed),
                                 (WithDefault, with_default)):
        name = topic(ns)
        client.create_producer(name, schema=AvroSchema(Example)).close()
        if accepted:
            producer = client.create_producer(name, schema=AvroSchema(record_cls))
            producer.send(record_cls(a=1))
        else:
            with pytest.raises(pulsar.IncompatibleSchema):
                client.create_producer(name, schema=AvroSchema(record_cls))


def test_auto_update_off_takes_only_uploaded_schemas(cluster, client):
    ns = namespace(cluster, auto_update=False)
    name = topic(ns)
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(name, schema=AvroSchema(Example))
    local = name.rsplit("/", 1)[1]
    upload = {"type": "AVRO", "schema": json.dumps(Example.schema(), indent=True), "properties": {}}
    status, answer = admin(cluster, "POST", f"/admin/v2/schemas/{ns}/{local}/schema", upload)
    assert (status, answer) == (200, {"version": 0})
    producer = client.create_producer(name, schema=AvroSchema(Example))   # the wheel sends the same text
    producer.send(Example(a=1, b=1))


def test_validation_enforced_refuses_bytes_producers_and_invalid_payloads(cluster, client):
    ns = namespace(cluster, enforced=True)
    name = topic(ns)

    class Garbled(AvroSchema):   # the Avro schema on the wire, bytes that are not its Avro
        def encode(self, obj):
            return b"\xff" * 3 if obj.a < 0 else super().encode(obj)

    producer = client.create_producer(name, schema=Garbled(Example), batching_enabled=False)
    consumer = client.subscribe(name, "sub", schema=AvroSchema(Example),
                                initial_position=pulsar.InitialPosition.Earliest)
    with pytest.raises(pulsar.IncompatibleSchema):
        client.create_producer(name)                     # bytes: no schema on a topic with one
    producer.send(Example(a=1, b=1))
    # Refused with the one code the C++ client fails a single message on; the producer
    # goes on (any other code would make it reconnect and resend the message forever).
    with pytest.raises(pulsar.ChecksumError):
        producer.send(Example(a=-1, b=0))
    producer.send(Example(a=2, b=2))
    got = [consumer.receive(timeout_millis=TIMEOUT_MS).value().a for _ in range(2)]
    assert got == [1, 2]


# ---------------------------------------------------------------- frame level


def test_get_or_create_schema_and_get_schema_frames(cluster):
    name = topic()
    wire = Wire(cluster.pulsar_service_url)
    try:
        owner = wire.lookup(name)
        if owner != wire.url:
            wire.close()
            wire = Wire(owner)
        avro = pb.Schema(name="x", type=pb.Schema.Avro, schema_data=json.dumps(Example.schema()).encode())
        first = wire.request(pb.CommandGetOrCreateSchema(topic=name, schema=avro), Type.GET_OR_CREATE_SCHEMA_RESPONSE)
        again = wire.request(pb.CommandGetOrCreateSchema(topic=name, schema=avro), Type.GET_OR_CREATE_SCHEMA_RESPONSE)
        assert not first.HasField("error_code") and first.schema_version == again.schema_version == b"\x00" * 8
        bad = pb.Schema(name="x", type=pb.Schema.Avro, schema_data=json.dumps(BadExample.schema()).encode())
        refused = wire.request(pb.CommandGetOrCreateSchema(topic=name, schema=bad), Type.GET_OR_CREATE_SCHEMA_RESPONSE)
        assert refused.error_code == pb.IncompatibleSchema and "a:" in refused.error_message
        got = wire.request(pb.CommandGetSchema(topic=name, schema_version=b"\x00" * 8), Type.GET_SCHEMA_RESPONSE)
        assert (got.schema.type, got.schema.schema_data, got.schema_version) == \
            (pb.Schema.Avro, avro.schema_data, b"\x00" * 8)
        assert got.schema.name == name.removeprefix("persistent://")
        none = wire.request(pb.CommandGetSchema(topic=topic()), Type.GET_SCHEMA_RESPONSE)
        assert none.error_code == pb.TopicNotFound
        malformed = wire.request(pb.CommandGetSchema(topic=name, schema_version=b"\x01"), Type.GET_SCHEMA_RESPONSE)
        assert malformed.error_code == pb.NotAllowedError and "8 bytes" in malformed.error_message
    finally:
        wire.close()


# ---------------------------------------------------------------- the Magnetar client's schema=


# The same records declared with magnetar.schema, under the same names (a record's name
# is part of its schema).
MExample = type("Example", (mschema.Record,), {"a": mschema.Integer(), "b": mschema.Integer()})
MWithDefault = type("WithDefault", (mschema.Record,), {"a": mschema.Integer(), "b": mschema.Integer(),
                                                       "c": mschema.String(required_default=True)})
MBadExample = type("BadExample", (mschema.Record,), {"a": mschema.String(), "b": mschema.Integer()})


@pytest.fixture
def mclient(cluster):
    c = magnetar.Client(",".join(cluster.broker_urls), operation_timeout_seconds=10)
    yield c
    c.close()


def versions(cluster, name: str) -> list[int]:
    ns, local = name.removeprefix("persistent://").rsplit("/", 1)
    status, answer = admin(cluster, "GET", f"/admin/v2/schemas/{ns}/{local}/schemas")
    assert status == 200, answer
    return [v["version"] for v in answer["getSchemaResponses"]]


@pytest.mark.parametrize("kind", ["avro", "json"])
def test_magnetar_and_wheel_clients_share_schema_and_values_both_ways(cluster, client, mclient, kind):
    name = topic()
    wheel_schema, magnetar_schema = ((AvroSchema(Example), mschema.AvroSchema(MExample)) if kind == "avro"
                                     else (JsonSchema(Example), mschema.JsonSchema(MExample)))
    wheel_consumer = client.subscribe(name, "wheel", schema=wheel_schema,
                                      initial_position=pulsar.InitialPosition.Earliest)
    magnetar_consumer = mclient.subscribe(name, "magnetar", schema=magnetar_schema,
                                          initial_position=magnetar.InitialPosition.Earliest)
    mclient.create_producer(name, schema=magnetar_schema).send(MExample(a=1, b=2))
    client.create_producer(name, schema=wheel_schema).send(Example(a=3, b=4))
    # The same class described by both clients is one schema: one version.
    assert versions(cluster, name) == [0]
    got = [wheel_consumer.receive(timeout_millis=TIMEOUT_MS) for _ in range(2)]
    assert [m.value() for m in got] == [Example(a=1, b=2), Example(a=3, b=4)]
    assert [m.schema_version().encode() for m in got] == [b"\x00" * 8] * 2
    got = [magnetar_consumer.receive(timeout_millis=TIMEOUT_MS) for _ in range(2)]
    assert [m.value() for m in got] == [MExample(a=1, b=2), MExample(a=3, b=4)]
    assert [(m.schema_version(), m.int_schema_version()) for m in got] == [(b"\x00" * 8, 0)] * 2


def test_magnetar_strings_and_bytes_interoperate(client, mclient):
    name = topic()
    wheel_consumer = client.subscribe(name, "wheel", schema=StringSchema(),
                                      initial_position=pulsar.InitialPosition.Earliest)
    producer = mclient.create_producer(name, schema=mschema.StringSchema())
    producer.send("héllo")
    with pytest.raises(TypeError):
        producer.send(b"bytes are not a str")
    client.create_producer(name, schema=StringSchema()).send("wörld")
    reader = mclient.create_reader(name, magnetar.MessageId.earliest, schema=mschema.StringSchema())
    assert [reader.read_next(TIMEOUT_MS).value() for _ in range(2)] == ["héllo", "wörld"]
    assert [wheel_consumer.receive(timeout_millis=TIMEOUT_MS).value() for _ in range(2)] == ["héllo", "wörld"]
    plain = mclient.create_reader(name, magnetar.MessageId.earliest)       # no schema: bytes, unchecked
    msg = plain.read_next(TIMEOUT_MS)
    assert (msg.value(), msg.int_schema_version()) == ("héllo".encode(), 0)


def test_magnetar_consumer_reads_old_messages_with_their_writers_schema(client, mclient):
    name = topic()
    client.create_producer(name, schema=AvroSchema(Example)).send(Example(a=1, b=2))      # version 0
    mclient.create_producer(name, schema=mschema.AvroSchema(MWithDefault)).send(MWithDefault(a=3, b=4, c="x"))
    consumer = mclient.subscribe(name, "sub", schema=mschema.AvroSchema(MWithDefault),
                                 initial_position=magnetar.InitialPosition.Earliest)
    first, second = (consumer.receive(timeout_millis=TIMEOUT_MS) for _ in range(2))
    # The first is version 0's bytes: read with MWithDefault's own schema they would not
    # parse (c's string is missing); the consumer fetched version 0's definition.
    assert (first.int_schema_version(), first.value()) == (0, MWithDefault(a=1, b=2, c=None))
    assert (second.int_schema_version(), second.value()) == (1, MWithDefault(a=3, b=4, c="x"))
    wheel = client.subscribe(name, "wheel", schema=AvroSchema(Example),
                             initial_position=pulsar.InitialPosition.Earliest)
    assert [wheel.receive(timeout_millis=TIMEOUT_MS).value().a for _ in range(2)] == [1, 3]


def test_magnetar_incompatible_producer_and_consumer_are_refused(mclient):
    name = topic()
    mclient.create_producer(name, schema=mschema.AvroSchema(MExample))
    with pytest.raises(magnetar.IncompatibleSchema):
        mclient.create_producer(name, schema=mschema.AvroSchema(MBadExample))
    with pytest.raises(magnetar.IncompatibleSchema):
        mclient.subscribe(name, "sub", schema=mschema.JsonSchema(MExample))
    with pytest.raises(magnetar.IncompatibleSchema):
        mclient.create_reader(name, magnetar.MessageId.earliest, schema=mschema.AvroSchema(MBadExample))
    with pytest.raises(TypeError):
        mclient.create_producer(name, schema=AvroSchema(Example))      # the wheel's class is not ours


def test_magnetar_producer_under_validation_enforced(cluster, mclient):
    ns = namespace(cluster, enforced=True)
    name = topic(ns)

    class Garbled(mschema.AvroSchema):   # the Avro schema on the wire, bytes that are not its Avro
        def encode(self, obj):
            return b"\xff" * 3 if obj.a < 0 else super().encode(obj)

    producer = mclient.create_producer(name, schema=Garbled(MExample), batching_enabled=False)
    with pytest.raises(magnetar.IncompatibleSchema):
        mclient.create_producer(name)                    # bytes: no schema on a topic with one
    producer.send(MExample(a=1, b=1))
    with pytest.raises(magnetar.IncompatibleSchema, match="Avro"):
        producer.send(MExample(a=-1, b=0))
    producer.send(MExample(a=2, b=2))
    reader = mclient.create_reader(name, magnetar.MessageId.earliest, schema=mschema.AvroSchema(MExample))
    assert [reader.read_next(TIMEOUT_MS).value().a for _ in range(2)] == [1, 2]


def test_magnetar_asyncio_client_takes_schemas_too(cluster, client):
    import asyncio

    import magnetar.asyncio as magnetar_aio

    name = topic()

    async def run():
        async with magnetar_aio.Client(",".join(cluster.broker_urls)) as aclient:
            consumer = await aclient.subscribe(name, "sub", schema=mschema.JsonSchema(MExample),
                                               initial_position=magnetar.InitialPosition.Earliest)
            producer = await aclient.create_producer(name, schema=mschema.JsonSchema(MExample))
            await producer.send(MExample(a=5, b=6))
            return (await consumer.receive(TIMEOUT_MS)).value()

    assert asyncio.run(run()) == MExample(a=5, b=6)
    wheel = client.subscribe(name, "wheel", schema=JsonSchema(Example),
                             initial_position=pulsar.InitialPosition.Earliest)
    assert wheel.receive(timeout_millis=TIMEOUT_MS).value() == Example(a=5, b=6)
