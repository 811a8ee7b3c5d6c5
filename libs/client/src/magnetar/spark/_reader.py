"""Batch and streaming reads.  The driver plans splits from offsets; each task reads one
split with its own reader (magnetar._broker.read_range)."""

from __future__ import annotations

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from magnetar.spark import _broker
from magnetar.spark._offsets import (
    EARLIEST,
    LATEST,
    Split,
    check_data_loss,
    from_spark,
    plan_splits,
    rate_limit,
    resolve,
    split_partition,
    to_spark,
)
from magnetar.spark._options import MagnetarOptionError, ReadOptions
from magnetar.spark._rows import batches

try:  # PySpark 4.2+: the engine passes read limits, and knows Trigger.AvailableNow sources
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - older PySpark 4.x
    ReadAllAvailable = ReadMaxRows = None

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


class SplitPartition(InputPartition):
    def __init__(self, split: Split) -> None:
        super().__init__(split)
        self.split = split


def _read(opts: ReadOptions, partition: SplitPartition):
    s = partition.split
    topic, index = split_partition(s.partition)
    messages = _broker.read_range(opts.connection, s.partition, s.start, s.end,
                                  opts.poll_timeout_ms, opts.fail_on_data_loss)
    yield from batches(messages, topic, index)


def _partitions(opts: ReadOptions, start: dict[str, int], end: dict[str, int]) -> list[SplitPartition]:
    return [SplitPartition(s) for s in plan_splits(start, end, opts.min_partitions,
                                                   opts.max_records_per_partition)]


class BatchReader(DataSourceReader):
    """``spark.read``: [startingOffsets, endingOffsets) of every partition, fixed when the
    query is planned."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self):
        parts = _broker.discover(self.opts)
        earliest, latest = _broker.log_bounds(self.opts, parts)
        start = check_data_loss(resolve(self.opts.starting, latest, EARLIEST, "startingOffsets", earliest),
                                latest, self.opts.fail_on_data_loss, earliest)
        end = resolve(self.opts.ending, latest, LATEST, "endingOffsets", earliest)
        for name in end:
            if start[name] > end[name]:
                raise MagnetarOptionError(
                    f"startingOffsets ({start[name]}) is after endingOffsets ({end[name]}) "
                    f"for {name}")
        return _partitions(self.opts, start, end)

    def read(self, partition):
        return _read(self.opts, partition)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream``: Spark checkpoints the offsets (see magnetar.spark._offsets);
    each micro-batch reads [previous end, new end) of every partition."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts
        self._last_end: dict | None = None  # for PySpark versions that pass no start
        self._target: dict[str, int] | None = None  # Trigger.AvailableNow: read up to here

    def _bounds(self) -> tuple[dict[str, int], dict[str, int]]:
        """(first stored entry, end) of every partition read."""
        earliest, latest = _broker.log_bounds(self.opts, _broker.discover(self.opts))
        if self._target is None:
            return earliest, latest
        # Nothing that arrived after the query started, not even new partitions.
        return earliest, {p: min(end, self._target[p]) for p, end in latest.items() if p in self._target}

    def _latest(self) -> dict[str, int]:
        return self._bounds()[1]

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: what exists now is read (in batches of
        ``maxOffsetsPerTrigger``), then the query stops."""
        self._target = None
        self._target = self._latest()

    def initialOffset(self) -> dict:
        earliest, latest = self._bounds()
        return to_spark(resolve(self.opts.starting, latest, LATEST, "startingOffsets", earliest))

    def getDefaultReadLimit(self):
        if self.opts.max_offsets_per_trigger is None or ReadMaxRows is None:
            return super().getDefaultReadLimit()
        return ReadMaxRows(self.opts.max_offsets_per_trigger)

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        if start is None:
            start = self._last_end if self._last_end is not None else self.initialOffset()
        earliest, latest = self._bounds()
        begin = check_data_loss(from_spark(start), latest, self.opts.fail_on_data_loss, earliest)
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            cap = limit.max_rows
        elif ReadAllAvailable is not None and isinstance(limit, ReadAllAvailable):
            cap = None
        else:
            cap = self.opts.max_offsets_per_trigger
        end = to_spark(rate_limit(begin, latest, cap))
        self._last_end = end
        return end

    def partitions(self, start: dict, end: dict):
        end_offsets = from_spark(end)
        earliest, _ = self._bounds()
        begin = check_data_loss(from_spark(start), end_offsets, self.opts.fail_on_data_loss,
                                {p: min(first, end_offsets.get(p, first)) for p, first in earliest.items()})
        return _partitions(self.opts, begin, end_offsets)

    def read(self, partition):
        return _read(self.opts, partition)

    def commit(self, end: dict) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint, not on a subscription."""
