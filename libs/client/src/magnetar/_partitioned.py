"""The producer users hold: routes messages to partitions (by key hash, else round
robin), bounds pending messages, and fans flush/close out to every partition."""

from __future__ import annotations

import asyncio
import itertools
import zlib

from magnetar_protocol import magnetar_pb2 as pb

from magnetar._core import Core
from magnetar._producer import PartitionProducer
from magnetar._types import MessageId


class Producer:
    """``magnetar.asyncio`` producer; one PartitionProducer per partition."""

    def __init__(self, core: Core, topic: str, partitions: int, options: dict):
        self.core = core
        self.topic_name = topic
        self.options = options
        self.requested_name = options["producer_name"]
        count = max(partitions, 1)
        self.parts = [PartitionProducer(self, f"{topic}-partition-{i}" if partitions else topic,
                                        i if partitions else -1) for i in range(count)]
        self._rr = itertools.count()
        self._pending = 0
        self._space = asyncio.Condition()
        self.on_released = None  # the sync API frees its pending-message slots here

    async def start(self) -> "Producer":
        # One name for every partition (dedup state is per topic partition and name).
        await self.parts[0].connect(first=True)
        for part in self.parts[1:]:
            part.name = self.parts[0].name
            await part.connect(first=True)
        return self

    def _route(self, partition_key: str | None) -> PartitionProducer:
        if len(self.parts) == 1:
            return self.parts[0]
        if partition_key is not None:
            return self.parts[zlib.crc32(partition_key.encode()) % len(self.parts)]
        return self.parts[next(self._rr) % len(self.parts)]

    def build(self, data: bytes, properties, partition_key, sequence_id, event_timestamp) -> pb.SingleMessage:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"message data must be bytes, not {type(data).__name__}")
        msg = pb.SingleMessage(payload=bytes(data))
        if properties:
            msg.properties.update({str(k): str(v) for k, v in properties.items()})
        if partition_key is not None:
            msg.partition_key = partition_key
        if sequence_id is not None:
            if sequence_id < 0:
                raise ValueError("sequence_id must be >= 0")
            msg.sequence_id = sequence_id
        if event_timestamp:
            msg.event_time = event_timestamp
        return msg

    def enqueue(self, msg: pb.SingleMessage, waiter, txn=None, explicit_seq: bool = False) -> None:
        self._pending += 1
        try:
            part = self._route(msg.partition_key if msg.HasField("partition_key") else None)
            part.add(msg, waiter, txn, explicit_seq)
        except BaseException:
            self._pending -= 1
            raise

    def released(self, n: int) -> None:
        self._pending -= n
        if self.on_released is not None:
            self.on_released(n)
        if self._space._waiters:  # noqa: SLF001 - skip the task hop when nobody waits
            asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._space:
            self._space.notify_all()

    async def send(self, data: bytes, properties=None, partition_key=None, sequence_id=None,
                   event_timestamp=None, txn=None) -> MessageId:
        if txn is not None:
            txn.check_usable()
        async with self._space:
            await self._space.wait_for(lambda: self._pending < self.options["max_pending"])
        fut = asyncio.get_running_loop().create_future()
        self.enqueue(self.build(data, properties, partition_key, sequence_id, event_timestamp), fut, txn,
                     sequence_id is not None)
        if txn is not None:
            txn.track(fut)
        return await fut

    async def flush(self) -> None:
        await asyncio.gather(*(p.flush() for p in self.parts))

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in self.parts))

    def producer_name(self) -> str:
        return self.parts[0].name

    def last_sequence_id(self) -> int:
        return max(p.last_seq for p in self.parts)

    def topic(self) -> str:
        return self.topic_name
