"""Growing with a partitioned topic while producers and consumers run.

``update-partitioned-topic -p N`` may add partitions at any time.  Each partitioned
producer and consumer asks for the partition count every
``partitions_update_interval_seconds`` (pulsar-client's ``partitionsUpdateInterval``,
60 s) and takes the new partitions on, as Pulsar's clients do with
``autoUpdatePartitions``: a producer routes to them, a consumer subscribes to them.
Partitions are only ever added (the admin refuses to shrink a topic).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable, Sequence

from magnetar_protocol.errors import MagnetarError

log = logging.getLogger("magnetar.client")

DEFAULT_INTERVAL_S = 60.0


class PartitionWatch:
    """Polls ``topic``'s partition count; ``grow(count)`` takes on partitions
    ``[known, count)`` and raises if it could not (tried again next round)."""

    def __init__(self, core, topic: str, known: int, grow: Callable[[int], Awaitable[None]]) -> None:
        self.core = core
        self.topic = topic
        self.known = known
        self.grow = grow
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        interval = self.core.partitions_update_interval_s
        if self.known and interval:  # a non-partitioned topic never becomes partitioned
            self.task = asyncio.get_running_loop().create_task(
                self._run(interval), name=f"magnetar-partitions {self.topic}")

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()

    async def _run(self, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            await self.check()

    async def check(self) -> None:
        """One round: ask the count, take on what was added."""
        try:
            _, count = await self.core.partitions(self.topic)
        except MagnetarError as exc:
            log.debug("partition count of %s: %s (asked again in the next round)", self.topic, exc)
            return
        if count <= self.known:
            return
        try:
            await self.grow(count)
        except MagnetarError as exc:
            log.warning("%s grew to %d partitions; taking them on failed (retried in the next "
                        "round): %s", self.topic, count, exc)
            return
        log.info("%s grew from %d to %d partitions", self.topic, self.known, count)
        self.known = count


async def connect_new(parts: Sequence, connect: Callable, connected: Callable, owner) -> bool:
    """Connect every one of ``parts`` (``connect(part)``).  If one fails, close those that
    connected and raise; if ``owner`` closed meanwhile, close them and return False."""
    results = await asyncio.gather(*(connect(p) for p in parts), return_exceptions=True)
    failed = next((r for r in results if isinstance(r, BaseException)), None)
    if failed is None and not owner.closed:
        return True
    await asyncio.gather(*(p.close() for p in parts if connected(p)), return_exceptions=True)
    if failed is not None:
        raise failed
    return False
