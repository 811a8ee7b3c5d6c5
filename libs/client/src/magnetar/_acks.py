"""Grouped acknowledgements and delayed negative acks.  Pure: the caller sends.

As Pulsar's ack grouping tracker: plain acks are collected and sent every
``ACK_GROUP_S`` or once ``ACK_GROUP_MAX`` are waiting, so acking costs no request per
message.  They are best effort (an ack that never arrives means a redelivery); one that
failed for a transient reason is put back and sent with the next group.  A batch whose
every message was acknowledged, in order, goes as one whole-entry position (as Pulsar's
client acknowledges a batch once all of it is acknowledged).
"""

from __future__ import annotations

from collections import deque

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


class NackTracker:
    """Negatively acknowledged positions waiting out the redelivery delay.  The delay is
    the same for every nack, so due times arrive in order and a deque suffices."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = max(delay_s, 0.0)
        self._due: deque[tuple[float, int, Pos]] = deque()  # (due time, partition, position)

    def add(self, partition: int, pos: Pos, now: float) -> None:
        self._due.append((now + self.delay_s, partition, pos))

    def next_due(self) -> float | None:
        return self._due[0][0] if self._due else None

    def take_due(self, now: float) -> dict[int, list[Pos]]:
        """Positions whose delay is over, by partition."""
        out: dict[int, list[Pos]] = {}
        while self._due and self._due[0][0] <= now:
            _, partition, pos = self._due.popleft()
            out.setdefault(partition, []).append(pos)
        return out

    def __len__(self) -> int:
        return len(self._due)
