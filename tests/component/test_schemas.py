"""The schema registry in the broker (schemas.py and its rules, schemaregistry.py) against
real PostgreSQL: versions per topic, identical schemas deduplicated by hash, each
compatibility strategy as a namespace policy, isAllowAutoUpdateSchema,
schemaValidationEnforced (producers without a schema, and payloads checked before they
are stored), the consumer's rules, deletions that keep the history, a partitioned topic's
one registry, and two brokers registering at once."""

from __future__ import annotations

import asyncio
import io
import json

import fastavro
import pytest

from magnetar_broker.commands import CreateProducer, Subscribe
from magnetar_broker.partition.sends import Batch
from magnetar_broker.service import BrokerService
from magnetar_broker.settings import BrokerSettings
from magnetar_broker.store import BrokerStore
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import BadRequest, IncompatibleSchema, TopicNotFound
from magnetar_protocol.schemainfo import Schema, key_value_data

TOPIC = "persistent://public/default/schemas"


def record(*fields: dict, name: str = "User") -> dict:
    return {"type": "record", "name": name, "fields": list(fields)}


def opt(name: str, kind: str, **extra) -> dict:
    return {"name": name, "type": ["null", kind], **extra}


def avro(definition: dict, kind: str = "AVRO") -> Schema:
    return Schema(kind, json.dumps(definition).encode())


V1 = avro(record(opt("name", "string"), opt("age", "int")))
V2 = avro(record(opt("name", "string"), opt("age", "int"), opt("email", "string", default=None)))
RETYPED = avro(record(opt("name", "string"), opt("age", "string")))


async def set_policy(pool, column: str, value) -> None:
    await pool.execute(f"UPDATE namespaces SET {column} = $1 WHERE tenant = 'public' AND namespace = 'default'",
                       value)


async def create(broker, schema: Schema | None, topic: str = TOPIC):
    await broker.partition(topic)
    return await broker.service.create_producer(CreateProducer(session_id=broker.session, topic=topic,
                                                               schema=schema))


async def subscribe(broker, schema: Schema | None, subscription: str = "sub", topic: str = TOPIC):
    await broker.partition(topic)
    return await broker.service.subscribe(Subscribe(session_id=broker.session, topic=topic,
                                                    subscription=subscription, sub_type=pb.SUB_SHARED,
                                                    durable=True, schema=schema))


async def versions(pool, topic: str = TOPIC) -> list[tuple[int, str, bool]]:
    return [tuple(r) for r in await pool.fetch(
        "SELECT version, type, deleted FROM schemas WHERE topic = $1 ORDER BY version", topic)]


def avro_bytes(definition: dict, value: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(definition), value)
    return out.getvalue()


async def publish(broker, producer_id: int, *payloads: bytes, null: tuple[int, ...] = ()):
    messages = [pb.SingleMessage(payload=p, sequence_id=i, null_value=i in null) for i, p in enumerate(payloads)]
    [result] = await broker.service.publish(broker.session, [Batch(
        producer_id=producer_id, payload=pb.MessageBatch(messages=messages).SerializeToString(),
        num_messages=len(messages), sequence_id=0, highest_sequence_id=len(messages) - 1)])
    return result


# ---------------------------------------------------------------- versions


async def test_versions_grow_and_an_identical_schema_keeps_its_version(broker, pool):
    first = await create(broker, V1)
    again = await create(broker, avro(record(opt("name", "string"), opt("age", "int"))))  # same bytes
    evolved = await create(broker, V2)
    plain = await create(broker, None)
    assert (first.schema_version, again.schema_version, evolved.schema_version) == (0, 0, 1)
    assert plain.schema_version is None                 # a bytes producer writes without a version
    assert await versions(pool) == [(0, "AVRO", False), (1, "AVRO", False)]
    # The producer object carries its version for the front ends.
    assert first.producer.schema_version == 0 and evolved.producer.schema_version == 1


async def test_an_incompatible_producer_is_refused_and_nothing_is_registered(broker, pool):
    await create(broker, V1)
    with pytest.raises(IncompatibleSchema, match="age"):
        await create(broker, RETYPED)
    with pytest.raises(IncompatibleSchema, match="AVRO, not JSON"):
        await create(broker, avro(record(opt("name", "string")), kind="JSON"))
    assert await versions(pool) == [(0, "AVRO", False)]


@pytest.mark.parametrize("strategy, accepts_required_field, accepts_removed_field", [
    ("BACKWARD", False, True),    # new readers read old data: a new field needs a default
    ("FORWARD", True, False),     # old readers read new data: a removed field needs one
    ("FULL", False, False),
    ("ALWAYS_COMPATIBLE", True, True),
    ("ALWAYS_INCOMPATIBLE", False, False),
])
async def test_each_strategy_as_the_namespace_policy(broker, pool, strategy, accepts_required_field,
                                                     accepts_removed_field):
    await set_policy(pool, "schema_compatibility_strategy", strategy)
    base = avro(record(opt("name", "string"), {"name": "age", "type": "int"}))
    required = avro(record(opt("name", "string"), {"name": "age", "type": "int"}, {"name": "x", "type": "int"}))
    removed = avro(record({"name": "age", "type": "int"}))
    for i, (schema, accepted) in enumerate(((required, accepts_required_field), (removed, accepts_removed_field))):
        topic = f"{TOPIC}-{strategy.lower()}-{i}"
        await create(broker, base, topic)
        if accepted:
            assert (await create(broker, schema, topic)).schema_version == 1
        else:
            with pytest.raises(IncompatibleSchema, match=strategy):
                await create(broker, schema, topic)


async def test_transitive_strategies_check_every_version(broker, pool):
    # v1 has b required; v2 gives it a default; v3 drops b: FORWARD checks v3 against v2
    # only (whose b has a default), FORWARD_TRANSITIVE against v1 too (which needs b).
    v1 = avro(record({"name": "a", "type": "int"}, {"name": "b", "type": "int"}))
    v2 = avro(record({"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0}))
    v3 = avro(record({"name": "a", "type": "int"}))
    for strategy, accepted in (("FORWARD", True), ("FORWARD_TRANSITIVE", False)):
        await set_policy(pool, "schema_compatibility_strategy", strategy)
        topic = f"{TOPIC}-{strategy.lower()}"
        await create(broker, v1, topic)
        await create(broker, v2, topic)
        if accepted:
            assert (await create(broker, v3, topic)).schema_version == 2
        else:
            with pytest.raises(IncompatibleSchema):
                await create(broker, v3, topic)


async def test_auto_update_off_registers_only_through_an_upload(broker, pool):
    await set_policy(pool, "is_allow_auto_update_schema", False)
    with pytest.raises(IncompatibleSchema, match="isAllowAutoUpdateSchema"):
        await create(broker, V1)                      # not even the first schema
    assert await versions(pool) == []
    assert await broker.service.schemas.create(TOPIC, V1, admin=True) == 0
    assert (await create(broker, V1)).schema_version == 0      # registered: found by its hash
    with pytest.raises(IncompatibleSchema, match="isAllowAutoUpdateSchema"):
        await create(broker, V2)
    # GET_OR_CREATE_SCHEMA (a client's) obeys the policy; the admin's upload does not.
    with pytest.raises(IncompatibleSchema):
        await broker.service.schemas.create(TOPIC, V2, admin=False)
    assert await broker.service.schemas.create(TOPIC, V2, admin=True) == 1


# ---------------------------------------------------------------- schemaValidationEnforced


async def test_validation_enforced_refuses_schemaless_producers_and_bad_payloads(broker, pool):
    definition = record(opt("name", "string"), {"name": "age", "type": "int"})
    schema = avro(definition)
    unchecked = await create(broker, schema)   # before the policy: payloads not checked
    assert (await publish(broker, unchecked.producer.producer_id, b"\xff\xff")).entry_id == 0
    await set_policy(pool, "schema_validation_enforced", True)
    with pytest.raises(IncompatibleSchema, match="without a schema"):
        await create(broker, None)
    checked = await create(broker, schema)
    good = avro_bytes(definition, {"name": "ann", "age": 7})
    sent = await publish(broker, checked.producer.producer_id, good, b"", null=(1,))   # a tombstone passes
    assert not isinstance(sent, Exception)
    refused = await publish(broker, checked.producer.producer_id, good, good + b"\x00")
    assert isinstance(refused, IncompatibleSchema)
    assert "message 1 (sequence id 1)" in refused.message and "bytes left" in refused.message
    assert isinstance(await publish(broker, checked.producer.producer_id, b"\x02"), IncompatibleSchema)
    stored = await pool.fetchval("SELECT count(*) FROM entries")
    assert stored == 2   # the unchecked one and the good batch only


@pytest.mark.parametrize("schema, good, bad, why", [
    (avro(record({"name": "a", "type": "int"}, opt("b", "string")), "JSON"),
     b'{"a": 1, "b": null, "extra": true}', b'{"b": "x"}', "field 'a' is missing"),
    (avro(record({"name": "a", "type": "int"}), "JSON"), b'{"a": 1}', b'{"a": "1"}', "a is str, not int"),
    (Schema("STRING"), "héllo".encode(), b"\xff", "UTF-8"),
    (Schema("INT32"), b"\x00\x00\x00\x01", b"\x01", "4 bytes"),
    (Schema("BOOLEAN"), b"\x01", b"\x02", "0 or 1"),
    (Schema("KEY_VALUE", key_value_data(b"", b""), {"key.schema.type": "STRING", "value.schema.type": "INT64"}),
     key_value_data(b"k", b"\x00" * 8), key_value_data(b"k", b"\x00"), "value: a INT64 is 8 bytes"),
])
async def test_payload_checks_per_type(broker, pool, schema, good, bad, why):
    await set_policy(pool, "schema_validation_enforced", True)
    producer = (await create(broker, schema)).producer
    assert not isinstance(await publish(broker, producer.producer_id, good), Exception)
    refused = await publish(broker, producer.producer_id, bad)
    assert isinstance(refused, IncompatibleSchema) and why in refused.message, refused


# ---------------------------------------------------------------- consumers


async def test_a_consumer_registers_on_an_idle_topic_and_is_checked_on_a_busy_one(broker, pool):
    await subscribe(broker, V1)                       # idle: registered as version 0
    assert await versions(pool) == [(0, "AVRO", False)]
    await subscribe(broker, V2, "evolved")            # reads v1's data (the new field has a default)
    with pytest.raises(IncompatibleSchema, match="age"):
        await subscribe(broker, RETYPED, "retyped")
    await subscribe(broker, None, "bytes")            # a consumer without a schema is not checked
    other = f"{TOPIC}-busy"
    producer = (await create(broker, None, other)).producer
    assert not isinstance(await publish(broker, producer.producer_id, b"raw"), Exception)
    with pytest.raises(IncompatibleSchema, match="does not have a schema"):
        await subscribe(broker, V1, topic=other)
    assert await versions(pool, other) == []


async def test_consumer_rules_follow_pulsar_per_strategy(broker, pool):
    # The consumer's schema must read the latest version's data (BACKWARD against it).
    v1 = avro(record({"name": "a", "type": "int"}))
    reader_with_default = avro(record({"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0}))
    reader_needing_b = avro(record({"name": "a", "type": "int"}, {"name": "b", "type": "int"}))
    await create(broker, v1)
    await subscribe(broker, reader_with_default, "ok")
    with pytest.raises(IncompatibleSchema):
        await subscribe(broker, reader_needing_b, "no")
    await set_policy(pool, "schema_compatibility_strategy", "ALWAYS_COMPATIBLE")
    await subscribe(broker, reader_needing_b, "anything-goes")


# ---------------------------------------------------------------- deletion, partitions, races


async def test_a_deletion_is_a_version_and_history_stays_readable(broker, pool):
    registry = broker.service.schemas
    await create(broker, V1)
    assert await registry.delete(TOPIC, force=False) == 1
    with pytest.raises(TopicNotFound, match="deleted"):
        await registry.get(TOPIC, None)
    assert (await registry.get(TOPIC, 0)).schema == V1    # a message written with it stays readable
    with pytest.raises(TopicNotFound):
        await registry.delete(TOPIC, force=False)          # nothing left to delete
    # After the deletion nothing constrains the next schema; versions go on from 2.
    assert (await create(broker, RETYPED)).schema_version == 2
    assert [v.version for v in await registry.versions(TOPIC)] == [2]
    assert await versions(pool) == [(0, "AVRO", False), (1, "NONE", True), (2, "AVRO", False)]
    assert await registry.delete(TOPIC, force=True) == 0
    assert await versions(pool) == []
    assert (await create(broker, V1)).schema_version == 0  # a forced delete starts again


async def test_partitions_share_their_topics_registry(broker, pool):
    await pool.execute("INSERT INTO partitioned_topics (topic, tenant, namespace, partitions) "
                       "VALUES ($1, 'public', 'default', 2)", f"{TOPIC}-p")
    first = await create(broker, V1, f"{TOPIC}-p-partition-0")
    second = await create(broker, V1, f"{TOPIC}-p-partition-1")
    with pytest.raises(IncompatibleSchema):
        await create(broker, RETYPED, f"{TOPIC}-p-partition-1")
    assert first.schema_version == second.schema_version == 0
    assert await versions(pool, f"{TOPIC}-p") == [(0, "AVRO", False)]


async def test_two_brokers_registering_at_once_get_distinct_checked_versions(broker, pool, database_url):
    settings = BrokerSettings(database_url=database_url, broker_id="b-other", advertised_url="http://other:1")
    other = BrokerService(BrokerStore(pool, settings.resolved_broker_id), settings)
    v3 = avro(record(opt("name", "string"), opt("age", "int"), opt("phone", "string", default=None)))
    got = await asyncio.gather(broker.service.schemas.create(TOPIC, V1, admin=True),
                               other.schemas.create(TOPIC, V2, admin=True),
                               broker.service.schemas.create(TOPIC, v3, admin=True))
    assert sorted(got) == [0, 1, 2]
    assert [v for v, _, _ in await versions(pool)] == [0, 1, 2]


async def test_bad_schemas_are_refused_before_anything_is_written(broker, pool):
    from magnetar_protocol.schemainfo import from_proto
    with pytest.raises(BadRequest, match="unknown schema type"):
        from_proto(pb.Schema(type="XML", data=b"<a/>"))
    with pytest.raises(BadRequest, match="must be JSON"):
        from_proto(pb.Schema(type="AVRO", data=b"{not json"))
    assert from_proto(pb.Schema(type="BYTES")) is None
    assert await versions(pool) == []
