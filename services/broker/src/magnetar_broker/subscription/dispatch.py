"""Who gets which message: delivery bookkeeping and consumer selection.  Pure: no I/O.

A subscription hands out messages entry by entry; ``Deliveries`` tracks, per entry, the
batch indices each consumer holds unacknowledged (``pending``), the indices waiting to
be delivered again (``redeliver``) and each message's redelivery count.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.bitsets import set_bits

SUB_NAMES: dict[int | None, str] = {pb.SUB_EXCLUSIVE: "Exclusive", pb.SUB_SHARED: "Shared",
             pb.SUB_FAILOVER: "Failover", pb.SUB_KEY_SHARED: "Key_Shared"}

WHOLE = -1


def mask_indices(mask: int) -> list[int]:
    indices: list[int] = set_bits(mask)
    return indices


def upto_mask(index: int) -> int:
    """Bits 0..index set."""
    return (1 << (index + 1)) - 1


class Deliveries:
    def __init__(self) -> None:
        self.pending: dict[int, dict[int, int]] = {}   # entry -> consumer -> mask
        self.redeliver: dict[int, int] = {}            # entry -> mask
        self.counts: dict[tuple[int, int], int] = {}   # (entry, index) -> redeliveries
        self.unacked: dict[int, int] = {}              # consumer -> pending messages

    def delivered(self, consumer: int, entry_id: int, mask: int) -> None:
        holders = self.pending.setdefault(entry_id, {})
        held = holders.get(consumer, 0)
        holders[consumer] = held | mask
        # Only messages this consumer did not hold yet: the same entry handed to it again
        # (a retried fetch) must not count its messages twice.
        self.unacked[consumer] = self.unacked.get(consumer, 0) + (mask & ~held).bit_count()
        self._no_redelivery(entry_id, mask)

    def _no_redelivery(self, entry_id: int, mask: int) -> None:
        """The messages of ``mask`` in ``entry_id`` are no longer due for redelivery."""
        left = self.redeliver.get(entry_id)
        if left is not None:
            left &= ~mask
            if left:
                self.redeliver[entry_id] = left
            else:
                del self.redeliver[entry_id]

    def holder(self, entry_id: int, index: int) -> int | None:
        for consumer, mask in self.pending.get(entry_id, {}).items():
            if mask >> index & 1:
                return consumer
        return None

    def _drop(self, entry_id: int, mask: int) -> None:
        holders = self.pending.get(entry_id)
        if holders:
            for consumer in list(holders):
                held = holders[consumer]
                gone = held & mask
                if gone:
                    self.unacked[consumer] -= gone.bit_count()
                    held &= ~mask
                    if held:
                        holders[consumer] = held
                    else:
                        del holders[consumer]
            if not holders:
                del self.pending[entry_id]
        self._no_redelivery(entry_id, mask)
        if self.counts:
            for i in mask_indices(mask) if mask != -1 else []:
                self.counts.pop((entry_id, i), None)

    def acked(self, entry_id: int, index: int) -> None:
        if index == WHOLE:
            self._drop_entry(entry_id)
        else:
            self._drop(entry_id, 1 << index)

    def _drop_entry(self, entry_id: int) -> None:
        holders = self.pending.pop(entry_id, {})
        for consumer, mask in holders.items():
            self.unacked[consumer] -= mask.bit_count()
        self.redeliver.pop(entry_id, None)
        if self.counts:
            for key in [k for k in self.counts if k[0] == entry_id]:
                del self.counts[key]

    def acked_cumulative(self, entry_id: int, index: int) -> None:
        for e in [e for e in self.pending if e < entry_id] + [e for e in self.redeliver if e < entry_id]:
            self._drop_entry(e)
        if index == WHOLE:
            self._drop_entry(entry_id)
        else:
            self._drop(entry_id, upto_mask(index))

    def release(self, consumer: int, positions: Iterable[tuple[int, int]] | None = None,
                count: bool = True) -> int:
        """Take messages back from ``consumer`` for redelivery; return how many.

        ``positions`` None = everything it holds.  ``count`` adds one to each
        message's redelivery count (nack, consumer loss, transaction abort).
        """
        taken: dict[int, int] = {}
        if positions is None:
            for entry_id, holders in self.pending.items():
                if consumer in holders:
                    taken[entry_id] = holders[consumer]
        else:
            for entry_id, index in positions:
                held = self.pending.get(entry_id, {}).get(consumer, 0)
                want = held if index == WHOLE else held & (1 << index)
                if want:
                    taken[entry_id] = taken.get(entry_id, 0) | want
        moved = 0
        for entry_id, mask in taken.items():
            holders = self.pending[entry_id]
            holders[consumer] &= ~mask
            if not holders[consumer]:
                del holders[consumer]
            if not holders:
                del self.pending[entry_id]
            self.unacked[consumer] -= mask.bit_count()
            self.redeliver[entry_id] = self.redeliver.get(entry_id, 0) | mask
            if count:
                for i in mask_indices(mask):
                    self.counts[(entry_id, i)] = self.counts.get((entry_id, i), 0) + 1
            moved += mask.bit_count()
        return moved

    def requeue(self, entry_id: int, mask: int, count: bool = True) -> None:
        """Queue messages nobody holds for redelivery, counting one more delivery
        (a transaction that acknowledged them aborted) unless ``count`` is False (they
        were taken off a redelivery, not delivered: a dead-letter move given up)."""
        self.redeliver[entry_id] = self.redeliver.get(entry_id, 0) | mask
        if count:
            for i in mask_indices(mask):
                self.counts[(entry_id, i)] = self.counts.get((entry_id, i), 0) + 1

    def not_due(self, entry_id: int, mask: int) -> None:
        """Messages queued for redelivery that were acknowledged meanwhile: off the queue
        (whoever holds the entry's other messages still does)."""
        self._no_redelivery(entry_id, mask)

    def dead_lettered(self, entry_id: int, mask: int) -> None:
        """Messages due for redelivery go to a dead-letter topic instead: no longer due
        here (their counts stay until the move acknowledges them)."""
        self._no_redelivery(entry_id, mask)

    def forget_consumer(self, consumer: int) -> int:
        moved = self.release(consumer, None, count=True)
        self.unacked.pop(consumer, None)
        return moved

    def redelivery_entries(self) -> list[int]:
        return sorted(self.redeliver)

    def counts_for(self, entry_id: int, indices: list[int]) -> list[int]:
        return [self.counts.get((entry_id, i), 0) for i in indices]

    def pending_mask(self, entry_id: int) -> int:
        mask = 0
        for held in self.pending.get(entry_id, {}).values():
            mask |= held
        return mask

    def clear(self) -> None:
        self.pending.clear()
        self.redeliver.clear()
        self.counts.clear()
        for consumer in self.unacked:
            self.unacked[consumer] = 0


# ---------------------------------------------------------------- consumer selection

def _hash32(data: bytes) -> int:
    # Not crc32: it is linear, so keys that differ in a character or two ("key1",
    # "key2") land close together and one KeyShared consumer could get them all.
    return int.from_bytes(hashlib.blake2b(data, digest_size=4).digest(), "big")


def key_hash(key: str | bytes | None) -> int:
    return _hash32(key if isinstance(key, bytes) else (key or "").encode())


def dispatch_key(ordering_key: bytes | None, partition_key: str | None) -> str | bytes | None:
    """The key Key_Shared dispatches a message by: its ordering key when it has one (a
    Pulsar producer's), else its partition key (Pulsar's rule)."""
    return ordering_key if ordering_key is not None else partition_key


def failover_active(consumers: list[tuple[int, str, int]], partition_index: int) -> int | None:
    """Pulsar's rule: sort by (priority, name); the active one is
    ``sorted[partition % n]`` (index 0 for a non-partitioned topic).

    ``consumers`` holds (priority, name, consumer_id).
    """
    if not consumers:
        return None
    ordered = sorted(consumers)
    return ordered[max(partition_index, 0) % len(ordered)][2]


class HashRing:
    """Consistent hashing of message keys onto KeyShared consumers, so a consumer
    joining or leaving moves only its share of the keys."""

    POINTS = 64

    def __init__(self, consumers: Iterable[tuple[int, str]] = ()):
        self._points: list[int] = []
        self._owners: list[int] = []
        pairs = []
        for consumer_id, name in consumers:
            for i in range(self.POINTS):
                pairs.append((_hash32(f"{name}#{consumer_id}#{i}".encode()), consumer_id))
        pairs.sort()
        self._points = [p for p, _ in pairs]
        self._owners = [c for _, c in pairs]

    def owner(self, h: int) -> int | None:
        if not self._points:
            return None
        i = bisect.bisect_left(self._points, h)
        return self._owners[i % len(self._owners)]
