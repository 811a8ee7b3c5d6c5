"""Batch and streaming writes: one Magnetar transaction per Spark job or micro-batch.

The driver opens the transaction, every task sends into it (magnetar.spark._sending),
and the driver's commit step commits it once every task succeeded, or aborts it: the
whole output becomes visible at once or not at all.

A streaming sink is exactly-once across restarts.  Its transactions are opened under a
transaction key (``transactionKeyPrefix``, else derived from the checkpoint location),
so a newer driver of the same query fences an older one: the older one's open
transaction is aborted and its commit fails.  Each micro-batch's transaction also
carries a progress message ``{"batchId": N}`` to the sink's progress topic, so "batch N
is committed" and batch N's output become visible together; before committing, the
sink reads its last recorded batch id and aborts a replayed batch it already committed.
"""

from __future__ import annotations

import itertools
import json
import os

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

import magnetar

try:  # PySpark 4.1+: micro-batches reach the writer as Arrow too
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase
except ImportError:  # pragma: no cover - PySpark 4.0 hands rows
    from pyspark.sql.datasource import DataSourceStreamWriter as _StreamWriterBase

from magnetar.spark import _broker
from magnetar.spark._offsets import checkpointed_source_offsets, split_partition
from magnetar.spark._options import WriteOptions
from magnetar.spark._sending import arrow_rows, send_rows


class TaskDone(WriterCommitMessage):
    """What a task tells the driver: the transaction it sent into and how many rows."""

    def __init__(self, txn: tuple[int, int], spark_partition: int, rows: int,
                 query_id: str | None = None) -> None:
        self.txn = txn
        self.spark_partition = spark_partition
        self.rows = rows
        self.query_id = query_id  # a streaming query's id (kept by its checkpoint)


def open_transaction(opts: WriteOptions) -> tuple[int, int]:
    """Open the job's transaction (under the transaction key, if any: that fences the
    key's previous holder) and return its id."""
    client = _broker.client(opts.connection, opts.transaction_key)
    try:
        return tuple(client.new_transaction(opts.transaction_timeout_ms).txn_id)
    finally:
        client.close()


def _task_partition() -> int:
    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


def _query_id() -> str | None:
    """The streaming query's id: Spark keeps it in the checkpoint, so a restarted query
    has the same one and a query on a new checkpoint a new one."""
    ctx = TaskContext.get()
    return ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None


def _txn_of(messages) -> tuple[int, int] | None:
    txns = {tuple(m.txn) for m in messages if isinstance(m, TaskDone)}
    if len(txns) > 1:
        raise _broker.MagnetarSparkError(f"tasks of one write sent into several transactions: {txns}")
    return txns.pop() if txns else None


def _rows(iterator):
    """Rows from Arrow record batches (what the Arrow writer bases get), or as they come."""
    first = next(iterator, None)
    if first is None:
        return iter(())
    rest = itertools.chain([first], iterator)
    return arrow_rows(rest) if isinstance(first, pa.RecordBatch) else rest


class _Sender:
    opts: WriteOptions
    columns: tuple[str, ...]
    txn: tuple[int, int] | None

    def write(self, iterator) -> TaskDone:
        part = _task_partition()
        rows = _rows(iterator)
        count = send_rows(self.opts.connection, self.transaction(), self.opts.topic, self.columns,
                          rows, part)
        return TaskDone(self.transaction(), part, count, _query_id())

    def transaction(self) -> tuple[int, int]:
        if self.txn is None:
            raise _broker.MagnetarSparkError("the writer reached a task without a transaction")
        return self.txn


class BatchWriter(_Sender, DataSourceArrowWriter):
    """``df.write``: Spark ships this object, with the transaction opened here, to the
    tasks and to the commit step."""

    def __init__(self, opts: WriteOptions, columns: tuple[str, ...]) -> None:
        self.opts = opts
        self.columns = columns
        self.txn = open_transaction(opts)

    def commit(self, messages) -> None:
        client = _broker.client(self.opts.connection)
        try:
            client.transaction_from_id(magnetar.TxnID(*self.txn)).commit()
        except (magnetar.InvalidTxnStatusError, magnetar.ExpiredTransactionError,
                magnetar.TransactionNotFound) as exc:
            raise _broker.MagnetarSparkError(
                f"the write's transaction {magnetar.TxnID(*self.txn)} could not commit, nothing "
                f"of it is visible: {exc}. If the job ran longer than transactionTimeoutMs "
                f"({self.opts.transaction_timeout_ms} ms), raise that option") from exc
        finally:
            client.close()

    def abort(self, messages) -> None:
        _abort(self.opts, self.txn)


def _abort(opts: WriteOptions, txn: tuple[int, int] | None) -> None:
    if txn is None:
        return
    client = _broker.client(opts.connection)
    try:
        client.transaction_from_id(magnetar.TxnID(*txn)).abort()
    except (magnetar.InvalidTxnStatusError, magnetar.ExpiredTransactionError):
        pass  # already ended (timed out, fenced): nothing of it is visible
    finally:
        client.close()


class StreamWriter(_Sender, _StreamWriterBase):
    """``df.writeStream``: Spark makes one of these per micro-batch to ship to the tasks,
    and another one in its commit step (which gets the tasks' TaskDone messages)."""

    def __init__(self, opts: WriteOptions, columns: tuple[str, ...]) -> None:
        self.opts = opts
        self.columns = columns
        self.txn = None

    def __getstate__(self) -> dict:
        # Spark pickles the micro-batch's writer to ship it to the tasks, and never the
        # commit step's: so the batch's transaction is opened here, once per batch.
        if self.txn is None:
            self.txn = open_transaction(self.opts)
        return dict(self.__dict__)

    def commit(self, messages, batchId: int) -> None:
        txn = _txn_of(messages)
        if txn is None:
            return  # no task ran: nothing was written
        client = _broker.client(self.opts.connection)
        try:
            queries = {m.query_id for m in messages if isinstance(m, TaskDone)}
            query_id = queries.pop() if len(queries) == 1 else None
            # Batch ids count from 0 again in a query on a new checkpoint: only this
            # query's records say whether this batch was committed.
            last = last_committed_batch(client, self.opts.progress_topic, query_id,
                                        _progress_tail(self.opts))
            attached = client.transaction_from_id(magnetar.TxnID(*txn))
            if last is not None and batchId <= last:
                attached.abort()  # a replay of a batch whose output is already visible
                return
            record = {"batchId": batchId, "queryId": query_id,
                      "rows": sum(m.rows for m in messages if m)}
            try:
                if self.opts.ack_subscription:
                    acknowledge_input(client, attached, self.opts, batchId)
                client.create_producer(self.opts.progress_topic).send(
                    json.dumps(record).encode(),
                    properties={"transactionKey": self.opts.transaction_key or ""}, txn=attached)
                attached.commit()
            except magnetar.ExpiredTransactionError as exc:
                raise _broker.MagnetarSparkError(
                    f"micro-batch {batchId} was not committed: another run of this query (same "
                    f"transaction key {self.opts.transaction_key!r}, i.e. the same checkpoint) "
                    f"took over and fenced this one ({exc})") from exc
        finally:
            client.close()

    def abort(self, messages, batchId: int) -> None:
        _abort(self.opts, _txn_of(messages))


# Each committed micro-batch adds one entry to the progress topic, and one run of a query
# holds its key at a time, so the query's last record is among the newest entries: the
# commit reads these instead of the whole topic (which grows with every batch).
PROGRESS_TAIL_ENTRIES = 64


def _progress_tail(opts: WriteOptions) -> int:
    """The first progress entry worth reading (0 without admin.url: all of them)."""
    last = _broker.last_entry(opts.connection, opts.progress_topic)
    return 0 if last is None else max(last - PROGRESS_TAIL_ENTRIES + 1, 0)


def last_committed_batch(client: magnetar.Client, progress_topic: str,
                         query_id: str | None = None, first_entry: int = 0) -> int | None:
    """The highest batch id recorded on the sink's progress topic (by query ``query_id``
    when given) from entry ``first_entry`` on, None when none is."""
    reader = client.create_reader(progress_topic, magnetar.MessageId(-1, first_entry, -1),
                                  start_message_id_inclusive=True)
    last = None
    try:
        while reader.has_message_available():
            record = json.loads(reader.read_next(timeout_millis=30000).data())
            if query_id is not None and record.get("queryId") != query_id:
                continue
            last = record["batchId"] if last is None else max(last, record["batchId"])
    finally:
        reader.close()
    return last


def acknowledge_input(client: magnetar.Client, txn, opts: WriteOptions, batch_id: int) -> None:
    """Consume-transform-produce (PIP-31): acknowledge, in the batch's transaction, every
    input entry the batch read (its end offsets, from Spark's checkpoint) on the
    ``ackSubscription``, so the subscription's position moves exactly with the output."""
    path = os.path.join(opts.checkpoint_dir, "offsets", str(batch_id))
    try:
        with open(path, encoding="utf-8") as f:
            ends = checkpointed_source_offsets(f.read())
    except OSError as exc:
        raise _broker.MagnetarSparkError(f"ackSubscription: cannot read {path}: {exc}") from None
    if not ends:
        raise _broker.MagnetarSparkError(
            f"ackSubscription: {path} holds no magnetar source offsets (the query must read "
            "from format('magnetar'))")
    for partition, end in sorted(ends.items()):
        if end <= 0:
            continue
        _, index = split_partition(partition)
        consumer = client.subscribe(partition, opts.ack_subscription, receiver_queue_size=1,
                                    initial_position=magnetar.InitialPosition.Earliest)
        try:
            consumer.acknowledge_cumulative(magnetar.MessageId(index, end - 1, -1), txn=txn)
        finally:
            consumer.close()
