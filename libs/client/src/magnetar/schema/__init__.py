"""Schemas for ``schema=`` on ``create_producer``, ``subscribe`` and ``create_reader``,
with ``pulsar.schema``'s names, so a Pulsar application's imports change only in name::

    from magnetar.schema import AvroSchema, Integer, Record, String

    class Order(Record):
        id = Integer(required=True)
        item = String()

    producer = client.create_producer("orders", schema=AvroSchema(Order))
    producer.send(Order(id=1, item="tea"))
    consumer = client.subscribe("orders", "audit", schema=AvroSchema(Order))
    consumer.receive().value()   # Order(id=1, item='tea')

See docs/client.md, "Schemas".
"""

from magnetar.schema._definition import (
    Array,
    Boolean,
    Bytes,
    CustomEnum,
    Double,
    Field,
    Float,
    Integer,
    Long,
    Map,
    Null,
    Record,
    String,
)
from magnetar.schema._schemas import AvroSchema, BytesSchema, JsonSchema, Schema, SchemaInfo, StringSchema

__all__ = ["Record", "Field", "Null", "Boolean", "Integer", "Long", "Float", "Double", "Bytes", "String",
           "Array", "Map", "CustomEnum", "Schema", "SchemaInfo", "BytesSchema", "StringSchema", "JsonSchema",
           "AvroSchema"]
