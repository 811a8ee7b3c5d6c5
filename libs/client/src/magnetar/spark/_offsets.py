"""Offsets of the ``magnetar`` data source.  Pure: no I/O.

An offset is an entry id per partition: a partition's log is a sequence of entries
numbered 0, 1, 2, ... (one entry is a producer batch, or every message a committed
transaction sent to that partition), and only committed data ever gets an entry id.
Offsets are "the next entry to read", so a range [start, end) is half open, as Kafka's.

Spark's checkpoint, ``startingOffsets`` and ``endingOffsets`` share one JSON shape, the
Kafka connector's: ``{"persistent://public/default/orders": {"0": 12, "1": 7}}``, keyed by
topic then partition index ("-1" for a non-partitioned topic), where -2 means earliest
and -1 latest.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from magnetar_protocol.errors import InvalidTopicName
from magnetar_protocol.topics import TopicName

EARLIEST = -2
LATEST = -1


class MagnetarOffsetError(ValueError):
    """Offsets that do not fit the topic: a bad option, or data lost since the checkpoint."""


@dataclass(frozen=True)
class OffsetSpec:
    """``earliest``, ``latest`` or per-partition entry ids (partition full name -> id)."""

    earliest: bool = False
    latest: bool = False
    per_partition: dict[str, int] = field(default_factory=dict)


def partition_name(topic: str, index: int) -> str:
    """The full name of partition ``index`` of ``topic`` (the topic itself for -1)."""
    base = TopicName.parse(topic)
    return base.full if index < 0 else base.partition(index).full


def split_partition(name: str) -> tuple[str, int]:
    """(base topic full name, partition index or -1)."""
    parsed = TopicName.parse(name)
    return parsed.base.full, parsed.partition_index


def parse_offsets(text, option: str) -> OffsetSpec:
    """``earliest`` | ``latest`` | the JSON shape of the module docstring."""
    raw = str(text).strip()
    if raw.lower() == "earliest":
        return OffsetSpec(earliest=True)
    if raw.lower() == "latest":
        return OffsetSpec(latest=True)
    fix = (f"option {option!r} must be 'earliest', 'latest' or JSON such as "
           '{"persistent://public/default/orders": {"0": 12, "1": -2}} (-2 earliest, -1 latest)')
    try:
        doc = json.loads(raw)
    except ValueError:
        raise ValueError(f"{fix}; got {raw[:100]!r}") from None
    try:
        return OffsetSpec(per_partition=from_spark(doc))
    except (TypeError, ValueError, AttributeError, InvalidTopicName) as exc:
        raise ValueError(f"{fix}; {exc}") from None


def from_spark(doc: dict) -> dict[str, int]:
    """The nested JSON shape -> {partition full name: entry id}."""
    if not isinstance(doc, dict):
        raise TypeError("offsets must be a JSON object keyed by topic")
    out: dict[str, int] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise TypeError(f"offsets of {topic!r} must be an object keyed by partition index")
        for index, entry in parts.items():
            if not isinstance(entry, int) or isinstance(entry, bool) or entry < EARLIEST:
                raise ValueError(f"offset of {topic!r} partition {index!r} must be an entry id, "
                                 f"-1 or -2; got {entry!r}")
            out[partition_name(topic, int(index))] = entry
    return out


def to_spark(offsets: dict[str, int]) -> dict:
    """{partition full name: entry id} -> the nested JSON shape (what Spark checkpoints)."""
    doc: dict[str, dict[str, int]] = {}
    for name in sorted(offsets):
        topic, index = split_partition(name)
        doc.setdefault(topic, {})[str(index)] = int(offsets[name])
    return doc


def resolve(spec: OffsetSpec, latest: dict[str, int], default: int, option: str,
            earliest: dict[str, int] | None = None) -> dict[str, int]:
    """Entry ids for every partition in ``latest`` (partition -> its next entry id).
    A partition the JSON does not name gets ``default`` (EARLIEST or LATEST); earliest
    is the first entry still stored (``earliest``: partition -> it; else 0)."""
    out = {}
    for name, end in latest.items():
        wanted = (EARLIEST if spec.earliest else LATEST if spec.latest
                  else spec.per_partition.get(name, default))
        if wanted == EARLIEST:
            out[name] = (earliest or {}).get(name, 0)
        elif wanted == LATEST:
            out[name] = end
        elif wanted > end:
            raise MagnetarOffsetError(
                f"option {option!r}: entry {wanted} of {name} is past its end ({end} entries); "
                "use -1 (latest) or a smaller entry id")
        else:
            out[name] = wanted
    unknown = sorted(set(spec.per_partition) - set(latest))
    if unknown:
        raise MagnetarOffsetError(f"option {option!r} names partitions that do not exist or are "
                                  f"not read: {', '.join(unknown)}")
    return out


def check_data_loss(start: dict[str, int], latest: dict[str, int], fail: bool,
                    earliest: dict[str, int] | None = None) -> dict[str, int]:
    """The start offsets, checked against what exists now.  A partition gone, or shorter
    than the offset (deleted and created again), lost data: that raises unless
    ``failOnDataLoss`` is false, in which case the partition is dropped or read from 0.
    An offset below the partition's first stored entry (``earliest``) names entries
    trimmed by retention: that raises, naming the lost range, or (failOnDataLoss false)
    reads on from the first stored entry.  Partitions new since ``start`` start at their
    first stored entry (nothing of them was read yet)."""
    first = earliest or {}
    out = {}
    for name, offset in start.items():
        if name in latest and offset <= latest[name] and offset < first.get(name, 0):
            if fail:
                raise MagnetarOffsetError(
                    f"data lost: entries {offset}..{first[name] - 1} of {name} were deleted (trimmed by "
                    "the retention policy) before this query read them. Set .option('failOnDataLoss', "
                    f"'false') to go on from entry {first[name]}, or keep data longer "
                    "(magnetar-admin namespaces set-retention).")
            out[name] = first[name]
            continue
        if name not in latest or offset > latest[name]:
            if fail:
                what = ("no longer exists" if name not in latest else
                        f"has {latest[name]} entries, fewer than the offset {offset}")
                raise MagnetarOffsetError(
                    f"data lost: {name} {what} (deleted or created again since the offsets were "
                    "recorded). Set .option('failOnDataLoss', 'false') to go on without it.")
            if name in latest:
                out[name] = first.get(name, 0)
            continue
        out[name] = offset
    for name in latest:
        out.setdefault(name, first.get(name, 0))
    return out


def rate_limit(start: dict[str, int], latest: dict[str, int], max_entries: int | None) -> dict[str, int]:
    """End offsets at most ``max_entries`` past ``start`` in total, shared fairly between
    the partitions that have something to read (each gets an equal share; what a short
    partition leaves over goes to the others)."""
    if max_entries is None:
        return dict(latest)
    lag = {p: max(latest[p] - start.get(p, 0), 0) for p in latest}
    given = dict.fromkeys(latest, 0)
    active = sorted(p for p in lag if lag[p] > 0)
    budget = max_entries
    while budget > 0 and active:
        share = max(budget // len(active), 1)
        for p in list(active):
            if budget == 0:
                break
            take = min(share, lag[p] - given[p], budget)
            given[p] += take
            budget -= take
            if given[p] == lag[p]:
                active.remove(p)
    return {p: (start.get(p, 0) + given[p] if lag[p] > 0 else latest[p]) for p in latest}


@dataclass(frozen=True)
class Split:
    """One Spark task's work: entries [start, end) of one partition."""

    partition: str
    start: int
    end: int


def plan_splits(start: dict[str, int], end: dict[str, int], min_partitions: int | None = None,
                max_per_split: int | None = None) -> list[Split]:
    """One split per partition with entries to read, cut into equal pieces when a
    partition has more than ``max_per_split`` entries or when fewer than
    ``min_partitions`` splits would result (pieces are proportional to size)."""
    ranges = [(p, start.get(p, 0), end[p]) for p in sorted(end) if end[p] > start.get(p, 0)]
    total = sum(e - s for _, s, e in ranges)
    out = []
    for p, s, e in ranges:
        size = e - s
        pieces = 1
        if max_per_split:
            pieces = max(pieces, math.ceil(size / max_per_split))
        if min_partitions and len(ranges) < min_partitions:
            pieces = max(pieces, math.ceil(size * min_partitions / total))
        pieces = min(pieces, size)
        step = size / pieces
        bounds = [s + round(i * step) for i in range(pieces)] + [e]
        out.extend(Split(p, a, b) for a, b in zip(bounds, bounds[1:]) if b > a)
    return out


def checkpointed_source_offsets(text: str) -> dict[str, int]:
    """The magnetar sources' end offsets in a Spark checkpoint's ``offsets/<batch id>``
    file: a version line, the batch metadata, then one line per source (its offset
    JSON, or ``-`` for a source without one); ours are keyed by persistent:// topics."""
    out: dict[str, int] = {}
    for line in text.splitlines()[2:]:
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and doc and all(str(k).startswith("persistent://") for k in doc):
            out.update(from_spark(doc))
    return out
