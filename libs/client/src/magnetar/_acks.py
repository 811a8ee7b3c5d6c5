"""Grouped acknowledgements, delayed negative acks and the ack timeout's tracker.  Pure:
the caller sends.

As Pulsar's ack grouping tracker: plain acks are collected and sent every
``ACK_GROUP_S`` or once ``ACK_GROUP_MAX`` are waiting, so acking costs no request per
message.  They are best effort (an ack that never arrives means a redelivery); one that
failed for a transient reason is put back and sent with the next group.  A batch whose
every message was acknowledged, in order, goes as one whole-entry position (as Pulsar's
client acknowledges a batch once all of it is acknowledged).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from typing import Protocol

from magnetar_protocol import magnetar_pb2 as pb

ACK_GROUP_S = 0.01
ACK_GROUP_MAX = 1000

Pos = tuple[int, int]  # (entry id, batch index)
Ack = tuple[int, int, int]  # (entry id, batch index, batch size)


class AckGroup:
    """One partition's plain acks waiting to be sent.  ``add`` and ``cumulative`` may be
    called from any thread (a deque append is atomic); ``take`` runs on the event loop."""

    def __init__(self) -> None:
        self._individual: deque[Ack] = deque()
        self._cumulative: Pos | None = None

    def add(self, entry_id: int, batch_index: int, batch_size: int = 0) -> int:
        """Queue an individual ack; how many are now waiting."""
        self._individual.append((entry_id, batch_index, batch_size))
        return len(self._individual)

    def cumulative(self, entry_id: int, batch_index: int) -> None:
        """Acknowledge everything up to and including the position (the highest wins)."""
        pos = (entry_id, batch_index)
        current = self._cumulative
        if current is None or pos > current:
            self._cumulative = pos

    def __len__(self) -> int:
        return len(self._individual) + (self._cumulative is not None)

    def take(self) -> tuple[list[Ack], Pos | None]:
        """Everything waiting, removed."""
        individual = []
        popleft = self._individual.popleft
        while self._individual:
            individual.append(popleft())
        cumulative, self._cumulative = self._cumulative, None
        return individual, cumulative

    def put_back(self, individual: list[Ack], cumulative: Pos | None) -> None:
        """Return acks whose request failed transiently, for the next group."""
        self._individual.extendleft(reversed(individual))
        if cumulative is not None:
            self.cumulative(*cumulative)


def compact(individual: list[Ack]) -> list[Pos]:
    """The positions to send, in order, repeats dropped: an entry whose messages
    0..size-1 were all acknowledged one after the other becomes ``(entry, -1)``."""
    out: list[Pos] = []
    i, n = 0, len(individual)
    while i < n:
        entry, index, size = individual[i]
        if index == 0 and size > 0:
            end = i + size
            if (end <= n and individual[end - 1] == (entry, size - 1, size)
                    and individual[i:end] == [(entry, k, size) for k in range(size)]):
                out.append((entry, -1))
                i = end
                continue
        out.append((entry, index))
        i += 1
    return list(dict.fromkeys(out))


def ack_requests(consumer_id: int, session_id: str, individual: list[Ack],
                 cumulative: Pos | None) -> list[pb.AckRequest]:
    """The requests for one taken group: individual acks in one, the cumulative in another."""
    requests = []
    if individual:
        req = pb.AckRequest(consumer_id=consumer_id, session_id=session_id, ack_type=pb.ACK_INDIVIDUAL)
        add = req.positions.add
        for entry_id, batch_index in compact(individual):
            add(entry_id=entry_id, batch_index=batch_index)
        requests.append(req)
    if cumulative is not None:
        requests.append(pb.AckRequest(
            consumer_id=consumer_id, session_id=session_id, ack_type=pb.ACK_CUMULATIVE,
            positions=[pb.Position(entry_id=cumulative[0], batch_index=cumulative[1])]))
    return requests


class Backoff(Protocol):
    """A redelivery backoff (``magnetar.MultiplierRedeliveryBackoff``)."""

    def next(self, redelivery_count: int) -> int: ...


class NackTracker:
    """Negatively acknowledged positions waiting out their redelivery delay: the fixed
    ``negative_ack_redelivery_delay_ms``, or, with a backoff (Pulsar's
    ``MultiplierRedeliveryBackoff``), a delay that grows with the message's redelivery
    count; due times then come out of order, hence a heap."""

    def __init__(self, delay_s: float, backoff: Backoff | None = None) -> None:
        self.delay_s = max(delay_s, 0.0)
        self.backoff = backoff
        self._due: list[tuple[float, int, int, Pos]] = []  # (due time, order, partition, position)
        self._order = 0

    def delay_for(self, redelivery_count: int) -> float:
        """Seconds before a message nacked with this redelivery count goes out again."""
        if self.backoff is None:
            return self.delay_s
        return max(self.backoff.next(redelivery_count), 0) / 1000

    def add(self, partition: int, pos: Pos, now: float, redelivery_count: int = 0) -> None:
        self._order += 1
        heapq.heappush(self._due, (now + self.delay_for(redelivery_count), self._order, partition, pos))

    def next_due(self) -> float | None:
        return self._due[0][0] if self._due else None

    def take_due(self, now: float) -> dict[int, list[Pos]]:
        """Positions whose delay is over, by partition."""
        out: dict[int, list[Pos]] = {}
        while self._due and self._due[0][0] <= now:
            _, _, partition, pos = heapq.heappop(self._due)
            out.setdefault(partition, []).append(pos)
        return out

    def __len__(self) -> int:
        return len(self._due)


Key = tuple[int, int, int]  # (partition, entry id, batch index)


class UnackedTracker:
    """Received messages not acknowledged yet, for the ack timeout (Pulsar's
    UnAckedMessageTracker): time buckets of one tick each, a message in the newest; each
    tick takes the oldest bucket, whose messages are then redelivered.  So a message goes
    out again between ``timeout`` and ``timeout + tick`` after it was received, and a
    tick costs the size of one bucket, whatever the number of messages held.  Not
    thread-safe: the consumer guards it."""

    def __init__(self, timeout_s: float, tick_s: float) -> None:
        tick_s = min(tick_s, timeout_s)
        self.tick_s = tick_s
        count = max(math.ceil(timeout_s / tick_s), 1)
        self._buckets: deque[set[Key]] = deque(set() for _ in range(count + 1))
        self._where: dict[Key, set[Key]] = {}

    def add(self, key: Key) -> None:
        if key in self._where:
            return
        newest = self._buckets[-1]
        newest.add(key)
        self._where[key] = newest

    def remove(self, key: Key) -> None:
        """Forget an acknowledged message (batch index -1: every message of the entry)."""
        if key[2] < 0:
            for held in [k for k in self._where if k[0] == key[0] and k[1] == key[1]]:
                self.remove(held)
            return
        bucket = self._where.pop(key, None)
        if bucket is not None:
            bucket.discard(key)

    def remove_through(self, partition: int, entry_id: int, batch_index: int) -> None:
        """A cumulative ack: everything of ``partition`` up to the position (batch index
        -1: the whole entry)."""
        last = (entry_id, float("inf") if batch_index < 0 else batch_index)
        for key in [k for k in self._where if k[0] == partition and (k[1], k[2]) <= last]:
            self.remove(key)

    def clear(self) -> None:
        for bucket in self._buckets:
            bucket.clear()
        self._where.clear()

    def tick(self) -> list[Key]:
        """Advance one tick: the messages whose time is up (forgotten here)."""
        oldest = self._buckets.popleft()
        expired = list(oldest)
        for key in expired:
            del self._where[key]
        oldest.clear()
        self._buckets.append(oldest)
        return expired

    def __len__(self) -> int:
        return len(self._where)
