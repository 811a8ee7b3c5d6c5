"""Which partition a message goes to.  No I/O (not pure: round robin starts at a random
partition unless the caller passes its ``rng``).

A message with a partition key goes to ``crc32(key) % partitions``: stable across
processes, restarts and client versions, so one key always lands on one partition.
Keyless messages follow the routing mode; round robin moves on per batch, not per
message, so batches stay full (Pulsar does the same with batching on).
"""

from __future__ import annotations

import random
import zlib

from magnetar._types import PartitionsRoutingMode


def partition_for_key(key: str, partitions: int) -> int:
    return zlib.crc32(key.encode("utf-8")) % partitions


class Router:
    """Routes to ``parts``, objects with a ``sealed_count`` that grows each time one of
    their batches is sealed."""

    def __init__(self, parts: list,
                 mode: PartitionsRoutingMode = PartitionsRoutingMode.RoundRobinDistribution,
                 rng: random.Random | None = None) -> None:
        self.parts = parts
        self.mode = PartitionsRoutingMode(mode)
        self._index = (rng or random).randrange(len(parts))
        self._seen = -1  # sealed_count of parts[_index] when keyless messages last went there

    def keyed(self, key: str):
        return self.parts[partition_for_key(key, len(self.parts))]

    def keyless(self):
        part = self.parts[self._index]
        if self.mode is PartitionsRoutingMode.UseSinglePartition:
            return part
        if part.sealed_count != self._seen:
            if self._seen != -1:  # the batch it filled went out: next partition
                self._index = (self._index + 1) % len(self.parts)
                part = self.parts[self._index]
            self._seen = part.sealed_count
        return part
