"""One Spark task's sends into the job's (or micro-batch's) transaction.

A task attaches to the transaction the driver opened (``client.transaction_from_id``)
and sends each row with producer name ``<txn>-<Spark partition>`` and sequence id = the
row's index in the partition.  A retried task sends the same rows under the same names
and ids, so the broker's deduplication drops what the failed attempt already stored:
the transaction holds each row once.  (That needs the partition's rows in the same
order on a retry, as Spark gives them for deterministic input.)
"""

from __future__ import annotations

import datetime as dt
from typing import Iterator

import pyarrow as pa
from pyspark.sql.types import BinaryType, LongType, MapType, StringType, StructType, TimestampType

import magnetar
from magnetar.spark import _broker
from magnetar.spark._options import Connection, MagnetarOptionError

# Columns a write uses, and the read-only ones it accepts (a DataFrame read from Magnetar
# can be written back as it is).
WRITTEN = {"value": (BinaryType, StringType), "__key": (StringType,), "__topic": (StringType,),
           "__messageProperties": (MapType,), "__eventTime": (TimestampType, LongType)}
IGNORED = ("__messageId", "__publishTime")


def check_schema(schema: StructType) -> tuple[str, ...]:
    """The written columns present; a missing ``value`` or a foreign column raises."""
    names = schema.fieldNames()
    if "value" not in names:
        raise MagnetarOptionError(
            f"a write needs a 'value' column (binary or string); the columns are {names}. "
            "E.g. df.selectExpr('CAST(id AS STRING) AS value')")
    for f in schema.fields:
        if f.name in IGNORED:
            continue
        allowed = WRITTEN.get(f.name)
        if allowed is None:
            raise MagnetarOptionError(
                f"column {f.name!r} is not written to Magnetar: select only value, __key, __topic, "
                "__messageProperties and __eventTime (put other fields into value, e.g. to_json)")
        if not isinstance(f.dataType, allowed):
            raise MagnetarOptionError(
                f"column {f.name!r} has type {f.dataType.simpleString()}; it must be "
                + " or ".join(t.typeName() for t in allowed))
    return tuple(n for n in names if n in WRITTEN)


def _payload(value, index: int) -> bytes:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode()
    raise ValueError(f"row {index}: value is {value!r}; Magnetar messages need bytes or a string")


def _event_ms(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:  # Spark hands local time without a zone
            value = value.astimezone()
        return int(value.timestamp() * 1000)
    return int(value)


def arrow_rows(batches) -> Iterator[dict]:
    """Rows (dicts) of Arrow record batches; timestamps as epoch milliseconds (Arrow keeps
    them as UTC instants whatever the session's time zone)."""
    for batch in batches:
        columns = {}
        for name in batch.schema.names:
            col = batch.column(name)
            if pa.types.is_timestamp(col.type):
                col = col.cast(pa.timestamp("ms", tz=col.type.tz), safe=False).cast(pa.int64())
            columns[name] = col.to_pylist()
        names = list(columns)
        for values in zip(*columns.values()):
            yield dict(zip(names, values))


def send_rows(conn: Connection, txn_id: tuple[int, int], default_topic: str | None,
              columns: tuple[str, ...], rows, spark_partition: int) -> int:
    """Send every row into the transaction; the number sent.  Raises on any failure
    (the task fails, Spark aborts the job, the driver aborts the transaction)."""
    txn_id = magnetar.TxnID(*txn_id)
    name = f"spark-{txn_id.most_bits}-{txn_id.least_bits}-{spark_partition}"
    failures: list[BaseException] = []

    def done(result, _msg_id) -> None:
        if result is not magnetar.Result.Ok:
            failures.append(result)

    client = _broker.client(conn)
    try:
        txn = client.transaction_from_id(txn_id)
        producers: dict[str, magnetar.Producer] = {}
        count = 0
        for index, row in enumerate(rows):
            # The option wins over the column, as in Spark's Kafka sink: a DataFrame read
            # from one topic and written with .option("topic", ...) never goes back.
            topic = default_topic or (row["__topic"] if "__topic" in columns else None)
            if topic is None:
                raise ValueError(f"row {index} has no __topic and the write has no 'topic' option")
            producer = producers.get(topic)
            if producer is None:
                producer = producers[topic] = client.create_producer(topic, producer_name=name)
            producer.send_async(
                _payload(row["value"], index), done,
                properties=dict(row["__messageProperties"] or {}) if "__messageProperties" in columns else None,
                partition_key=row["__key"] if "__key" in columns else None,
                sequence_id=index,
                event_timestamp=_event_ms(row["__eventTime"]) if "__eventTime" in columns else None,
                txn=txn)
            count += 1
            if failures:
                raise failures[0]
        for producer in producers.values():
            producer.flush()
        if failures:
            raise failures[0]
        return count
    finally:
        client.close()
