"""``magnetar.spark``: Magnetar as a PySpark 4 data source named ``magnetar``
(``pip install 'magnetar[spark]'``; docs/spark.md).

    import magnetar.spark
    magnetar.spark.register(spark)
    df = (spark.read.format("magnetar").option("service.url", "http://127.0.0.1:8080")
          .option("admin.url", "http://127.0.0.1:8081").option("topic", "orders").load())
    df.write.mode("append").format("magnetar").option("service.url", ...).option("topic", "copy").save()

Reads see committed data only; a batch write commits in one transaction; a streaming
write commits each micro-batch once, even when replayed (magnetar.spark._writer).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from magnetar.spark._broker import MagnetarSparkError
from magnetar.spark._offsets import MagnetarOffsetError
from magnetar.spark._options import MagnetarOptionError, read_options, write_options
from magnetar.spark._reader import BatchReader, StreamReader
from magnetar.spark._rows import SCHEMA as SCHEMA_STRUCT
from magnetar.spark._sending import check_schema
from magnetar.spark._writer import BatchWriter, StreamWriter, last_committed_batch

__all__ = ["MagnetarDataSource", "register", "SCHEMA", "SCHEMA_STRUCT", "MagnetarOptionError",
           "MagnetarOffsetError", "MagnetarSparkError", "last_committed_batch"]

NAME = "magnetar"

# What a read gives: one row per message (as a DDL string; SCHEMA_STRUCT is the same).
SCHEMA = ("value binary, __key string, __topic string, __messageId string, "
          "__publishTime timestamp, __eventTime timestamp, "
          "__messageProperties map<string,string>")


class MagnetarDataSource(DataSource):
    """The ``magnetar`` format for spark.read, readStream, write and writeStream."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return SCHEMA_STRUCT

    def reader(self, schema) -> BatchReader:
        return BatchReader(read_options(self.options, streaming=False))

    def streamReader(self, schema) -> StreamReader:
        return StreamReader(read_options(self.options, streaming=True))

    def writer(self, schema, overwrite: bool) -> BatchWriter:
        _check_mode(overwrite)
        columns = check_schema(schema)
        return BatchWriter(write_options(self.options, False, "__topic" in columns), columns)

    def streamWriter(self, schema, overwrite: bool) -> StreamWriter:
        _check_mode(overwrite)
        columns = check_schema(schema)
        return StreamWriter(write_options(self.options, True, "__topic" in columns), columns)


def _check_mode(overwrite: bool) -> None:
    if overwrite:
        raise MagnetarOptionError("a topic is appended to, never overwritten: use .mode('append') "
                                  "(streaming: outputMode('append'))")


def register(spark) -> None:
    """Make ``format("magnetar")`` available in this SparkSession."""
    spark.dataSource.register(MagnetarDataSource)
