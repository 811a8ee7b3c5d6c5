"""What a part of a partition (its writer, a subscription) needs of the partition it
belongs to: who it is and the lease its writes are checked against.  A typed seam, so a
part depends on this and not on ``PartitionLog``."""

from __future__ import annotations

from typing import Protocol

from magnetar_protocol.topics import TopicName


class Lease(Protocol):
    @property
    def name(self) -> TopicName: ...
    @property
    def topic_id(self) -> int: ...
    @property
    def epoch(self) -> int: ...  # the lease epoch every write compares in its SQL
    @property
    def closed(self) -> bool: ...  # no longer served here
    def check_open(self) -> None: ...  # NotOwner once closed
    def lose(self, reason: str) -> None: ...  # stop serving (a write failed or was fenced)
    def wake(self) -> None: ...  # something changed: long polls look again
