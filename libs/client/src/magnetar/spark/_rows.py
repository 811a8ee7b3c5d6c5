"""The rows a read gives, built as Arrow record batches (PySpark takes those as they are;
tuples it converts value by value, several times slower)."""

from __future__ import annotations

from typing import Iterable, Iterator

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, MapType, StringType, StructField, StructType, TimestampType

import magnetar

# __messageId is "partition:entry:batchIndex" (partition -1 for a non-partitioned topic).
SCHEMA = StructType([
    StructField("value", BinaryType()),
    StructField("__key", StringType()),
    StructField("__topic", StringType()),
    StructField("__messageId", StringType()),
    StructField("__publishTime", TimestampType()),
    StructField("__eventTime", TimestampType()),
    StructField("__messageProperties", MapType(StringType(), StringType())),
])
ARROW_SCHEMA = to_arrow_schema(SCHEMA, timezone="UTC")  # what PySpark checks batches against
BATCH_ROWS = 8192


def _micros(ms: int) -> int | None:
    return ms * 1000 if ms > 0 else None


def to_batch(messages: list[magnetar.Message], topic: str, partition: int) -> pa.RecordBatch:
    ids = [m.message_id() for m in messages]
    columns = [
        [m.data() for m in messages],
        [m.partition_key() or None for m in messages],
        [topic] * len(messages),
        [f"{partition}:{i.entry_id()}:{i.batch_index()}" for i in ids],
        [_micros(m.publish_timestamp()) for m in messages],
        [_micros(m.event_timestamp()) for m in messages],
        [list(m.properties().items()) for m in messages],
    ]
    arrays = [pa.array(col, type=field.type) for col, field in zip(columns, ARROW_SCHEMA)]
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)


def batches(messages: Iterable[magnetar.Message], topic: str, partition: int) -> Iterator[pa.RecordBatch]:
    chunk: list[magnetar.Message] = []
    for m in messages:
        chunk.append(m)
        if len(chunk) >= BATCH_ROWS:
            yield to_batch(chunk, topic, partition)
            chunk = []
    if chunk:
        yield to_batch(chunk, topic, partition)
