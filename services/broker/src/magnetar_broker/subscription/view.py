"""What a subscription sees of its partition: a narrow, typed interface (the partition's
``PartitionLog`` provides it), so subscription/ depends on this and not on the
partition's insides, and partition/ knows nothing of subscriptions."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol, TypeVar

from magnetar_broker.entry import Entry
from magnetar_broker.partition.batchcheck import PositionLike
from magnetar_broker.partition.lease import Lease
from magnetar_broker.partition.registry import Registry
from magnetar_broker.store import BrokerStore
from magnetar_protocol.policies import DelayedDelivery
from magnetar_runtime.roles import Roles

T = TypeVar("T")


class PartitionView(Lease, Protocol):
    # beyond its identity and lease (partition/lease.py): where it stores, who may act
    @property
    def partition_index(self) -> int: ...
    @property
    def store(self) -> BrokerStore: ...
    @property
    def roles(self) -> Roles: ...
    async def lease_checked(self, what: str, write: Awaitable[T],
                            owned: Callable[[T], bool] = bool) -> T: ...

    # the log: its bounds, reads, and the end of a terminated topic
    @property
    def next_entry_id(self) -> int: ...
    @property
    def first_entry_id(self) -> int: ...
    async def read(self, start: int, max_entries: int) -> list[Entry]: ...
    async def read_one(self, entry_id: int) -> Entry | None: ...
    async def last_entry(self) -> Entry | None: ...
    async def message_counts(self, entry_ids: Iterable[int]) -> dict[int, int]: ...
    async def check_batch_indexes(self, what: str, positions: Iterable[PositionLike],
                                  size_of: Callable[[int], int | None] = ...) -> None: ...
    def at_end(self, read_position: int) -> bool: ...

    # changes: waited for (long_poll: a fetch waiting for messages)
    async def long_poll(self, wait_s: float, attempt: Callable[[], Awaitable[T | None]]) -> T | None: ...
    def delivered(self, messages: int, nbytes: int) -> None: ...
    def quota_acked(self) -> None: ...

    # where subscriptions are served (the one get-or-open)
    @property
    def subscriptions(self) -> Registry[Any]: ...

    # its delayed_delivery policy (magnetar_protocol.policies.DelayedDelivery)
    @property
    def delayed_delivery(self) -> DelayedDelivery: ...

    # where a subscription's dead letters are written (deadletters.Sink; None: nowhere yet)
    @property
    def dead_letter_sink(self) -> Any: ...
