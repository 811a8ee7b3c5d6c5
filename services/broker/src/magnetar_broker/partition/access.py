"""PIP-68 producer access modes and topic epochs.  Pure: no I/O.

Per partition: the producers attached, the exclusive holder (if any), the FIFO queue of
WaitForExclusive waiters, and the topic epoch, which grows each time a new exclusive
producer takes over.  ``admit`` decides what a producer creation does; the broker then
persists a changed epoch (same row lock as every append) before answering.

    Shared                 refused (ProducerBusy) while an exclusive producer exists
    Exclusive              refused (ProducerFenced) while any other producer exists
    WaitForExclusive       queued (FIFO) until no producer remains
    ExclusiveWithFencing   fences every producer and waiter, takes over at once
    any exclusive mode     an epoch below the topic's is fenced; the current epoch is a
                           reconnect of the holder and keeps it
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass, field

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import BadRequest, ProducerBusy, ProducerFenced

SHARED = pb.ACCESS_SHARED
EXCLUSIVE = pb.ACCESS_EXCLUSIVE
WAIT_FOR_EXCLUSIVE = pb.ACCESS_WAIT_FOR_EXCLUSIVE
EXCLUSIVE_WITH_FENCING = pb.ACCESS_EXCLUSIVE_WITH_FENCING
MODE_NAMES: dict[int, str] = {SHARED: "Shared", EXCLUSIVE: "Exclusive", WAIT_FOR_EXCLUSIVE: "WaitForExclusive",
              EXCLUSIVE_WITH_FENCING: "ExclusiveWithFencing"}


class Outcome(enum.Enum):
    ADMIT = "admit"        # attach; epoch as in the decision
    WAIT = "wait"          # WaitForExclusive: stay queued


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    epoch: int | None = None           # the producer's topic epoch (exclusive modes)
    fence: tuple[int, ...] = ()        # producer ids to fence first
    fence_waiters: bool = False


@dataclass
class AccessState:
    topic_epoch: int = 0
    exclusive: int | None = None                  # producer id of the holder
    producers: dict[int, tuple[int, str]] = field(default_factory=dict)  # id -> (mode, name)
    waiters: deque[str] = field(default_factory=deque)  # producer names, FIFO

    def admit(self, mode: int, name: str, requested_epoch: int | None) -> Decision:
        """What creating producer ``name`` with ``mode`` does now.

        The caller has already refused a second live producer with the same name.
        """
        if mode not in MODE_NAMES:
            raise BadRequest(f"unknown producer access mode {mode}")
        if mode == SHARED:
            if self.exclusive is not None:
                holder = self.producers[self.exclusive][1]
                raise ProducerBusy(f"the topic has an exclusive producer ({holder!r})")
            return Decision(Outcome.ADMIT)
        if requested_epoch is not None and requested_epoch < self.topic_epoch:
            raise ProducerFenced(
                f"producer {name!r} has topic epoch {requested_epoch} but the topic is at "
                f"{self.topic_epoch}: another exclusive producer took over"
            )
        if requested_epoch is not None and requested_epoch > self.topic_epoch:
            raise BadRequest(f"topic epoch {requested_epoch} was never issued for this topic")
        reconnect = requested_epoch is not None  # equal to the topic epoch here
        others = tuple(self.producers)
        if mode == EXCLUSIVE_WITH_FENCING:
            keep = reconnect and not others
            return Decision(Outcome.ADMIT, self.topic_epoch if keep else self.topic_epoch + 1,
                            fence=others, fence_waiters=True)
        queued_ahead = bool(self.waiters) and self.waiters[0] != name
        if not others and not queued_ahead:
            return Decision(Outcome.ADMIT, self.topic_epoch if reconnect else self.topic_epoch + 1)
        if mode == EXCLUSIVE:
            if self.exclusive is not None:
                why = "an exclusive producer"
            elif others:
                why = "shared producers"
            else:
                why = "WaitForExclusive producers queued"
            raise ProducerFenced(f"Exclusive access refused: the topic has {why}")
        return Decision(Outcome.WAIT)

    # ---------------------------------------------------------------- changes

    def attach(self, producer_id: int, mode: int, name: str, epoch: int | None) -> None:
        self.producers[producer_id] = (mode, name)
        if mode != SHARED:
            self.exclusive = producer_id
            self.topic_epoch = max(self.topic_epoch, epoch or 0)
        if name in self.waiters:
            self.waiters.remove(name)

    def detach(self, producer_id: int) -> None:
        self.producers.pop(producer_id, None)
        if self.exclusive == producer_id:
            self.exclusive = None

    def exclusive_epoch(self) -> int | None:
        """The epoch a write must find still current (compared in its SQL), while an
        exclusive producer holds the topic; None: no check."""
        return self.topic_epoch if self.exclusive is not None else None

    def enqueue(self, name: str) -> None:
        if name not in self.waiters:
            self.waiters.append(name)

    def leave_queue(self, name: str) -> None:
        if name in self.waiters:
            self.waiters.remove(name)

    @property
    def access_mode(self) -> str:
        if self.exclusive is None:
            return "Shared"
        return MODE_NAMES[self.producers[self.exclusive][0]]
