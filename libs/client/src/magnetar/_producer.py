"""The ``magnetar.asyncio`` producer: one PartitionProducer per partition, routing,
the pending-message limit, and the send calls.

The per-message path is kept short on purpose (the benchmark sends 100-byte messages
with ``send_async``): a payload check, a slot, a routing decision and three list
appends; no protobuf object, future, lock or task per message.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from magnetar._batch import delivery_time, message_fields
from magnetar._errors import AlreadyClosed
from magnetar._partition_producer import PartitionProducer
from magnetar._partition_watch import PartitionWatch, connect_new
from magnetar._routing import Router
from magnetar._slots import Slots
from magnetar._types import MessageId, PartitionsRoutingMode, ProducerAccessMode, Result
from magnetar._values import check_schema
from magnetar_protocol.errors import MessageTooBig


class FutureCallback:
    """A send callback that completes an asyncio future (``await producer.send``)."""

    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future) -> None:
        self.future = future

    def __call__(self, result, msg_id: MessageId | None) -> None:
        if self.future.done():
            return
        if result is Result.Ok:
            self.future.set_result(msg_id)
        else:
            self.future.set_exception(result)


def payload_bytes(data) -> bytes:
    if type(data) is bytes:
        return data
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    raise TypeError(f"message data must be bytes, not {type(data).__name__}")


class Producer:
    """``magnetar.asyncio`` producer (create it with ``await client.create_producer``)."""

    def __init__(self, core, topic: str, partitions: int, options: dict) -> None:
        self.core = core
        self.topic_name = topic
        self.options = options
        count = max(partitions, 1)
        self.parts = [PartitionProducer(self, f"{topic}-partition-{i}" if partitions else topic,
                                        i if partitions else -1, options) for i in range(count)]
        self.router = Router(self.parts, options["routing_mode"]) if partitions else None
        self.slots = Slots(options["max_pending"], options["block_if_full"])
        self.max_message_size = 5 * 1024 * 1024
        # Values go through it (None: payloads are bytes, as with BytesSchema).
        self.schema = options.get("schema")
        self.closed = False
        self.on_close: Callable[[Producer], None] | None = None  # the client forgets a closed producer
        self.watch = PartitionWatch(core, topic, partitions, self._grow)

    async def start(self) -> "Producer":
        """Create the producer on every partition."""
        self.slots.loop = asyncio.get_running_loop()
        self.slots.loop_thread = threading.get_ident()
        # One name on every partition (dedup state is per partition and name), so the
        # first partition lets the broker choose it when the user did not.
        first, rest = self.parts[0], self.parts[1:]
        try:
            await first.connect(first=True)
            for part in rest:
                part.name = first.name
            await asyncio.gather(*(part.connect(first=True) for part in rest))
        except BaseException:
            # Do not leave the partitions that made it holding the name.
            await asyncio.gather(*(p.close() for p in self.parts if p.producer_id),
                                 return_exceptions=True)
            raise
        self.max_message_size = min(p.max_message_size for p in self.parts)
        self.watch.start()
        return self

    async def _grow(self, count: int) -> None:
        """Create the producer on partitions added since it started; routing (which
        shares ``self.parts``) sends to them once all are connected."""
        new = [PartitionProducer(self, f"{self.topic_name}-partition-{i}", i, self.options)
               for i in range(len(self.parts), count)]
        for part in new:
            part.name = self.parts[0].name
        if await connect_new(new, lambda p: p.connect(first=True), lambda p: p.producer_id, self):
            self.parts.extend(new)
            self.max_message_size = min(p.max_message_size for p in self.parts)

    # ---------------------------------------------------------------- per message

    def check(self, data) -> bytes:
        """The payload as bytes, or the error its send would meet (any thread)."""
        if self.closed:
            raise AlreadyClosed(f"producer on {self.topic_name} is closed")
        if self.schema is not None:
            data = self.schema.encode(data)
        data = payload_bytes(data)
        if len(data) > self.max_message_size and not self.options.get("chunking"):
            raise MessageTooBig(f"message of {len(data)} bytes exceeds the maximum of "
                                f"{self.max_message_size} bytes")
        return data

    def enqueue(self, data: bytes, callback, fields: dict | None = None, seq: int | None = None,
                txn=None, awaited: bool = False) -> None:
        """Route one checked message to its partition's batch (event loop only).  Its
        slot must be taken; ``callback(result, msg_id)`` runs when the batch settles.
        ``awaited``: a caller waits for it, so it goes without the publish delay."""
        if self.router is None:
            part = self.parts[0]
        elif fields is not None and "partition_key" in fields:
            part = self.router.keyed(fields["partition_key"])
        else:
            part = self.router.keyless()
        if part.fenced is not None:
            raise part.fenced
        if txn is not None:
            txn.check_usable()
            if txn.keeping:
                txn.before_send(part, len(data), seq)  # may spill to the classic path
            txn.ops_started(1, part)
        if len(data) > part.max_message_size:   # only with chunking (check)
            part.add_chunked(data, callback, fields, seq, txn)
        else:
            part.add(data, callback, fields, seq, txn)
        if awaited:
            part.send_soon()

    def send_async(self, data, callback, properties=None, partition_key=None, sequence_id=None,
                   event_timestamp=None, txn=None, ordering_key=None, deliver_at=None,
                   deliver_after=None) -> None:
        """Queue a message (on the event loop; never blocks: raises ProducerQueueIsFull
        when ``max_pending_messages`` are pending).  ``callback(result, msg_id)`` gets
        ``Result.Ok`` and the MessageId, or the exception and None.  ``deliver_at`` (ms
        since the epoch) or ``deliver_after`` (a timedelta): delayed delivery."""
        data = self.check(data)
        fields = message_fields(properties, partition_key, event_timestamp, ordering_key,
                                delivery_time(deliver_at, deliver_after))
        seq = check_sequence_id(sequence_id)
        self.slots.take()
        try:
            self.enqueue(data, callback, fields, seq, txn)
        except BaseException:
            self.slots.release(1)
            raise

    async def send(self, data, properties=None, partition_key=None, sequence_id=None,
                   event_timestamp=None, txn=None, ordering_key=None, deliver_at=None,
                   deliver_after=None) -> MessageId:
        """Send one message and wait for the broker's receipt; its MessageId.
        ``deliver_at`` (ms since the epoch) or ``deliver_after`` (a timedelta): not
        delivered before then to Shared and Key_Shared subscriptions (docs/client.md)."""
        data = self.check(data)
        fields = message_fields(properties, partition_key, event_timestamp, ordering_key,
                                delivery_time(deliver_at, deliver_after))
        seq = check_sequence_id(sequence_id)
        await self.slots.take_async()
        future = asyncio.get_running_loop().create_future()
        try:
            self.enqueue(data, FutureCallback(future), fields, seq, txn, awaited=True)
        except BaseException:
            self.slots.release(1)
            raise
        return await future

    # ---------------------------------------------------------------- the rest

    async def flush(self) -> None:
        """Send everything queued and wait for the answers."""
        await asyncio.gather(*(p.flush() for p in self.parts))

    async def close(self) -> None:
        """Flush, then close the producer on every partition."""
        if self.closed:
            return
        self.closed = True
        self.watch.stop()
        try:
            await asyncio.gather(*(p.close() for p in self.parts))
        finally:
            self.slots.close()
            if self.on_close is not None:
                self.on_close(self)

    def producer_name(self) -> str:
        """The producer's name (the broker's choice when none was given)."""
        return self.parts[0].name

    def last_sequence_id(self) -> int:
        """The highest sequence id the broker acknowledged (-1 when none)."""
        return max(p.last_seq for p in self.parts)

    def topic(self) -> str:
        """The topic's full name."""
        return self.topic_name

    def is_connected(self) -> bool:
        """Whether every partition has a live producer."""
        return not self.closed and all(p.producer_id for p in self.parts)


def check_sequence_id(sequence_id) -> int | None:
    if sequence_id is None:
        return None
    if not isinstance(sequence_id, int) or sequence_id < 0:
        raise ValueError(f"sequence_id must be an int >= 0, got {sequence_id!r}")
    return sequence_id


def producer_options(producer_name=None, initial_sequence_id=None,
                     access_mode=ProducerAccessMode.Shared, batching_enabled=True,
                     send_timeout_millis=30000, batching_max_messages=1000,
                     batching_max_allowed_size_in_bytes=128 * 1024,
                     batching_max_publish_delay_ms=1, max_pending_messages=1000,
                     block_if_queue_full=True,
                     message_routing_mode=PartitionsRoutingMode.RoundRobinDistribution,
                     chunking_enabled=False, schema=None) -> dict:
    """Validated create_producer options (pulsar-client's names and defaults)."""
    if initial_sequence_id is not None and (not isinstance(initial_sequence_id, int)
                                            or initial_sequence_id < -1):
        raise ValueError(f"initial_sequence_id must be an int >= -1, got {initial_sequence_id!r}")
    if producer_name is not None and not isinstance(producer_name, str):
        raise TypeError("producer_name must be a str")
    if send_timeout_millis < 0 or max_pending_messages < 1 or batching_max_messages < 1:
        raise ValueError("send_timeout_millis must be >= 0 (0: no timeout); "
                         "max_pending_messages and batching_max_messages >= 1")
    if chunking_enabled and batching_enabled:
        # Pulsar's rule: a chunked message travels alone, so chunking needs batching off.
        raise ValueError("chunking_enabled needs batching_enabled=False, as in Pulsar")
    return {
        "chunking": bool(chunking_enabled),
        "producer_name": producer_name or None, "initial_sequence_id": initial_sequence_id,
        "access_mode": ProducerAccessMode(access_mode), "batching": bool(batching_enabled),
        "send_timeout_s": send_timeout_millis / 1000, "max_messages": batching_max_messages,
        "max_bytes": batching_max_allowed_size_in_bytes,
        "delay_s": max(batching_max_publish_delay_ms, 0) / 1000,
        "max_pending": max_pending_messages, "block_if_full": bool(block_if_queue_full),
        "routing_mode": PartitionsRoutingMode(message_routing_mode),
        "schema": check_schema(schema),
    }
