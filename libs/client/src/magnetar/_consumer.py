"""The ``magnetar.asyncio`` consumer: one PartitionConsumer per partition feeding one
receiver queue (a partitioned topic's messages are merged), grouped plain acks,
delayed negative acks (a fixed delay or a backoff), the ack timeout, and transactional
acks that wait for the broker's answer.

The sync API reads the receiver queue from the user's thread (a thread-safe C queue),
so receiving and plain acks cost no hop to the client's thread.
"""

from __future__ import annotations

import asyncio
import logging
import queue as thread_queue
import threading
import time
import uuid
from collections.abc import Callable

from magnetar._acks import ACK_GROUP_MAX, ACK_GROUP_S, NackTracker, UnackedTracker
from magnetar._errors import AlreadyClosed
from magnetar._message import Message, UndecodableEntry
from magnetar._partition_consumer import PartitionConsumer
from magnetar._partition_watch import PartitionWatch, connect_new
from magnetar._reader import gather_last, has_more, initial_start
from magnetar._retryletter import RetryLetters
from magnetar._types import ConsumerDeadLetterPolicy, ConsumerType, MessageId
from magnetar._values import ValueReader
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import MagnetarError, NotAllowedError, Timeout

log = logging.getLogger("magnetar.consumer")


class Consumer:
    """``magnetar.asyncio`` consumer (create it with ``await client.subscribe``); a
    reader uses one on a non-durable subscription."""

    def __init__(self, core, topic: str, partitions: int, options: dict, threaded: bool = False,
                 merge_into: Consumer | None = None):
        self.core = core
        self.topic_name = topic
        self.options = options
        if not options.get("consumer_name"):
            options["consumer_name"] = f"c-{uuid.uuid4().hex[:8]}"
        self.parts = [PartitionConsumer(self, f"{topic}-partition-{i}" if partitions else topic,
                                        i if partitions else -1) for i in range(max(partitions, 1))]
        self.loop = asyncio.get_running_loop()
        if merge_into is not None:  # a retry topic's consumer feeds its consumer's queue
            self.queue, self.space = merge_into.queue, merge_into.space
        else:
            self.queue = thread_queue.SimpleQueue() if threaded else asyncio.Queue()
            self.space = _Room(self.loop, self.queue, options["receiver_queue_size"])
        # enable_retry: the retry topic's consumer (same subscription) and reconsume_later's
        # producers (_retryletter.py).
        self.retry: Consumer | None = None
        self.letters: RetryLetters | None = None
        self.closed = False
        self.on_close: Callable[[Consumer], None] | None = None  # the client forgets a closed consumer
        self._nacks = NackTracker(options["nack_delay_ms"] / 1000, options.get("nack_backoff"))
        # The ack timeout (off unless set): received messages not acknowledged within it
        # are redelivered.  Receives and acks come from any thread, hence the lock; it
        # is taken only when the timeout is on.
        self._unacked: UnackedTracker | None = None
        if options.get("ack_timeout_ms"):
            self._unacked = UnackedTracker(options["ack_timeout_ms"] / 1000, options["tick_ms"] / 1000)
        self._unacked_lock = threading.Lock()
        # msg.value()'s decoder (None: values are the payloads)
        self.values = ValueReader(options["schema"]) if options.get("schema") is not None else None
        self._ack_wake = asyncio.Event()  # a full group: flush now
        # An idle consumer's flusher sleeps until an ack comes: the first plain ack after
        # a flush signals it (once per group, from any thread), instead of the flusher
        # waking every ACK_GROUP_S for nothing.
        self._ack_queued = asyncio.Event()
        self._ack_armed = False
        self._tasks: list[asyncio.Task] = []
        self._known_last: dict[int, tuple[int, int]] = {}  # partition -> last visible
        self._undecodable = 0  # entries skipped: their batch did not decode
        self.watch = PartitionWatch(core, topic, partitions, self._grow)

    async def start(self) -> "Consumer":
        """Subscribe every partition and start fetching."""
        try:
            await asyncio.gather(*(p.connect() for p in self.parts))
        except BaseException:
            self.closed = True  # close the partitions that subscribed
            await asyncio.gather(*(p.close() for p in self.parts if p.consumer_id),
                                 return_exceptions=True)
            raise
        for p in self.parts:
            p.start()
        self._tasks = [self.loop.create_task(self._ack_flusher()),
                       self.loop.create_task(self._nack_sender())]
        if self._unacked is not None:
            self._tasks.append(self.loop.create_task(self._ack_timeout_ticker()))
        self.watch.start()
        return self

    async def start_retry(self, topic: str, partitions: int, letters: RetryLetters) -> None:
        """Also consume the retry topic (``enable_retry``), into the same queue."""
        policy = letters.policy  # the retry topic's dead letters go to the same DLQ
        options = dict(self.options, dead_letter_policy=ConsumerDeadLetterPolicy(
            policy.max_redeliver_count, letters.dlq_topic, policy.initial_subscription_name,
            letters.retry_topic))
        self.retry = await Consumer(self.core, topic, partitions, options, merge_into=self).start()
        self.letters = letters

    def _owner(self, msg_or_id) -> Consumer:
        """This consumer, or its retry topic's for a message received from there."""
        if self.retry is not None and type(msg_or_id) is Message:
            part = msg_or_id._info.source
            if part is not None and part.consumer is self.retry:
                return self.retry
        return self

    async def reconsume_later(self, msg: Message, delay) -> None:
        """Send the message to the retry topic, due after ``delay`` (a timedelta or ms),
        or to the dead-letter topic once its ``RECONSUMETIMES`` passes the policy's
        ``max_redeliver_count``, and acknowledge it: one transaction (_retryletter.py)."""
        if self.letters is None:
            raise NotAllowedError("reconsume_later needs subscribe(..., enable_retry=True)")
        await self.letters.reconsume_later(self, msg, delay)

    async def _grow(self, count: int) -> None:
        """Subscribe to partitions added since this consumer started.  They start at
        their earliest message, whatever the initial position: anything there was sent
        after this consumer subscribed to the topic (Pulsar's clients do the same, or a
        message sent before the consumer noticed the partition would be skipped)."""
        new = [PartitionConsumer(self, f"{self.topic_name}-partition-{i}", i, earliest=True)
               for i in range(len(self.parts), count)]
        if await connect_new(new, lambda p: p.connect(), lambda p: p.consumer_id, self):
            self.parts.extend(new)
            for part in new:
                part.start()

    def _part(self, partition: int) -> PartitionConsumer:
        return self.parts[partition] if partition >= 0 and len(self.parts) > 1 else self.parts[0]

    # ---------------------------------------------------------------- receiving

    @staticmethod
    def _accept(msg: Message) -> bool:
        """Whether a queued message is current (see PartitionConsumer) and for the user,
        noting it returned."""
        info = msg._info
        part = info.source
        if info.generation != part.generation:
            return False
        if part.reader:  # readers resume after the last message returned (or skipped)
            part.returned = (info.entry_id, msg._index)
        return type(msg) is not UndecodableEntry

    async def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; raises magnetar.Timeout when none arrives in time."""
        deadline = None if timeout_millis is None else time.monotonic() + timeout_millis / 1000
        while True:
            if self.closed:
                raise AlreadyClosed(f"consumer on {self.topic_name} is closed")
            try:
                if deadline is None:
                    msg = await self.queue.get()
                else:
                    left = max(deadline - time.monotonic(), 0)
                    msg = await asyncio.wait_for(self.queue.get(), left)
            except TimeoutError:
                raise Timeout(f"no message on {self.topic_name} within {timeout_millis} ms") \
                    from None
            if msg is None:  # closed: pass the wake-up on to the next receiver
                self.queue.put_nowait(None)
                continue
            self.space.notify()
            if self._accept(msg):
                owner = self._owner(msg)
                if owner._unacked is not None:
                    owner._track(msg)
                return msg

    def receive_from_thread(self, timeout_millis: int | None = None) -> Message:
        """The sync API's receive, on the user's thread."""
        deadline = None if timeout_millis is None else time.monotonic() + timeout_millis / 1000
        while True:
            if self.closed:
                raise AlreadyClosed(f"consumer on {self.topic_name} is closed")
            try:
                msg = self.queue.get(timeout=None if deadline is None
                                     else max(deadline - time.monotonic(), 0))
            except thread_queue.Empty:
                raise Timeout(f"no message on {self.topic_name} within {timeout_millis} ms") \
                    from None
            if msg is None:  # closed: pass the wake-up on to the next receiver
                self.queue.put(None)
                continue
            self.space.notify()
            if self._accept(msg):
                owner = self._owner(msg)
                if owner._unacked is not None:
                    owner._track(msg)
                return msg

    # ---------------------------------------------------------------- the ack timeout

    def _track(self, msg: Message) -> None:
        info = msg._info
        with self._unacked_lock:
            self._unacked.add((info.partition, info.entry_id, msg._index))
            for entry, index in msg._extra:   # a chunked message: its other chunks too
                self._unacked.add((info.partition, entry, index))

    def _untrack(self, part: PartitionConsumer, entry: int, index: int, cumulative: bool = False,
                 extra=()) -> None:
        if self._unacked is None:
            return
        with self._unacked_lock:
            if cumulative:
                self._unacked.remove_through(part.partition, *max([(entry, index), *extra]))
            else:
                for e, i in ((entry, index), *extra):
                    self._unacked.remove((part.partition, e, i))

    async def _ack_timeout_ticker(self) -> None:
        """Each tick, redeliver what was received longer than the ack timeout ago and
        not acknowledged (Pulsar's UnAckedMessageTracker); the broker counts the
        redelivery."""
        tracker = self._unacked
        assert tracker is not None
        while not self.closed:
            await asyncio.sleep(tracker.tick_s)
            with self._unacked_lock:
                expired = tracker.tick()
            by_partition: dict[int, list[tuple[int, int]]] = {}
            for partition, entry, index in expired:
                by_partition.setdefault(partition, []).append((entry, index))
            for partition, positions in by_partition.items():
                await self._redeliver(self._part(partition), positions, "ack timeout")

    # ---------------------------------------------------------------- acks

    def _position(self, msg_or_id) -> tuple[PartitionConsumer, int, int, int]:
        """(partition consumer, entry id, batch index, batch size) of what is acked."""
        if type(msg_or_id) is Message:
            info = msg_or_id._info
            part = info.source
            if part is None or part.consumer is not self:  # a message of another consumer
                part = self._part(info.partition)
            return part, info.entry_id, msg_or_id._index, info.size
        if isinstance(msg_or_id, MessageId):
            return (self._part(msg_or_id.partition()), msg_or_id.entry_id(),
                    msg_or_id.batch_index(), msg_or_id.batch_size())
        raise TypeError(f"expected a Message or MessageId, not {type(msg_or_id).__name__}")

    def ack_nowait(self, msg_or_id, cumulative: bool = False) -> None:
        """A plain ack, grouped (any thread)."""
        if (owner := self._owner(msg_or_id)) is not self:
            owner.ack_nowait(msg_or_id, cumulative)
            return
        part, entry, index, size = self._position(msg_or_id)
        extra = msg_or_id._extra if type(msg_or_id) is Message else ()
        if self._unacked is not None:
            self._untrack(part, entry, index, cumulative, extra)
        if cumulative:
            self._check_cumulative()
            part.acks.cumulative(*max([(entry, index), *extra]))
        elif part.acks.add(entry, index, size) == ACK_GROUP_MAX or any(
                part.acks.add(e, i, 0) == ACK_GROUP_MAX for e, i in extra):
            self.loop.call_soon_threadsafe(self._ack_wake.set)
        # Queued first, flag read second; the flusher clears the flag before it takes
        # the acks: so an ack is either in the flush or signals the next one.
        if not self._ack_armed:
            self._ack_armed = True
            self.loop.call_soon_threadsafe(self._ack_queued.set)

    def _check_cumulative(self) -> None:
        if self.options["consumer_type"] in (ConsumerType.Shared, ConsumerType.KeyShared):
            raise NotAllowedError("cumulative acknowledgement is not allowed on a Shared or "
                                  "KeyShared subscription")

    async def acknowledge(self, msg_or_id, txn=None, cumulative: bool = False) -> None:
        """Plain acks are grouped and return at once; a transactional ack waits for the
        broker (TransactionConflict and friends raise here)."""
        if (owner := self._owner(msg_or_id)) is not self:
            await owner.acknowledge(msg_or_id, txn, cumulative)
            return
        if txn is None:
            self.ack_nowait(msg_or_id, cumulative)
            return
        if cumulative:
            self._check_cumulative()
        part, entry, index, _ = self._position(msg_or_id)
        extra = msg_or_id._extra if type(msg_or_id) is Message else ()
        # Pending in the transaction now: the broker holds it for the transaction and
        # redelivers it if the transaction aborts, so the ack timeout lets it be.
        self._untrack(part, entry, index, cumulative, extra)
        if cumulative:
            entry, index = max([(entry, index), *extra])
            extra = ()
        for e, i in ((entry, index), *extra):   # a chunked message: every chunk
            await txn.ack(part, pb.Position(entry_id=e, batch_index=i), cumulative)

    async def acknowledge_cumulative(self, msg_or_id, txn=None) -> None:
        """Acknowledge everything up to and including the message (Exclusive and Failover
        only)."""
        await self.acknowledge(msg_or_id, txn, cumulative=True)

    async def _ack_flusher(self) -> None:
        while not self.closed:
            await self._ack_queued.wait()
            try:
                await asyncio.wait_for(self._ack_wake.wait(), ACK_GROUP_S)
            except TimeoutError:
                pass
            self._ack_wake.clear()
            self._ack_queued.clear()
            self._ack_armed = False
            await self.flush_acks()
            if any(len(p.acks) for p in self.parts):  # put back after a transient failure
                self._ack_queued.set()

    async def flush_acks(self) -> None:
        """Send the grouped plain acks now."""
        await asyncio.gather(*(p.send_acks() for p in self.parts if len(p.acks)))
        if self.retry is not None:
            await self.retry.flush_acks()

    def negative_acknowledge(self, msg_or_id) -> None:
        """Have the message redelivered after ``negative_ack_redelivery_delay_ms``, or
        after the backoff's delay for its redelivery count (event loop; the sync API hops
        here)."""
        if (owner := self._owner(msg_or_id)) is not self:
            owner.negative_acknowledge(msg_or_id)
            return
        part, entry, index, _ = self._position(msg_or_id)
        extra = msg_or_id._extra if type(msg_or_id) is Message else ()
        self._untrack(part, entry, index, extra=extra)
        count = msg_or_id.redelivery_count() if type(msg_or_id) is Message else 0
        now = time.monotonic()
        for position in ((entry, index), *extra):   # a chunked message: every chunk
            self._nacks.add(part.partition, position, now, count)

    async def _nack_sender(self) -> None:
        while not self.closed:
            due = self._nacks.next_due()
            now = time.monotonic()
            if due is None or due > now:
                await asyncio.sleep(0.05 if due is None else min(due - now, 0.5))
                continue
            for partition, positions in self._nacks.take_due(now).items():
                await self._redeliver(self._part(partition), positions, "negative ack")

    async def _redeliver(self, part: PartitionConsumer, positions: list[tuple[int, int]], why: str) -> None:
        req = pb.RedeliverRequest(positions=[pb.Position(entry_id=e, batch_index=i) for e, i in positions])
        try:
            await part.call("/v1/consumers/redeliver", req, pb.RedeliverResponse)
        except MagnetarError as exc:  # redelivered anyway when the session lapses
            log.info("%s on %s not delivered: %s", why, part.topic, exc)

    async def redeliver_unacknowledged_messages(self) -> None:
        """Have every unacknowledged message of this consumer redelivered now, those
        received and those still queued here (dropped first, as Pulsar's client does, so
        each comes once, in order)."""
        if self._unacked is not None:
            with self._unacked_lock:
                self._unacked.clear()
        for part in self.parts:
            part.drop_queued()
            try:
                await part.redeliver_all()
            finally:
                part.resume()
        if self.retry is not None:
            await self.retry.redeliver_unacknowledged_messages()

    # ---------------------------------------------------------------- positions

    async def seek(self, target) -> None:
        """Reset to a message id (delivered next) or a publish time in ms."""
        if not isinstance(target, (MessageId, int)) or isinstance(target, bool):
            raise TypeError("seek takes a MessageId or a publish time in ms")
        for part in self.parts:
            req = pb.SeekRequest()
            if isinstance(target, MessageId):
                if len(self.parts) > 1 and target.partition() != part.partition:
                    continue
                entry, index = max(target.entry_id(), 0), max(target.batch_index(), 0)
                req.position.CopyFrom(pb.Position(entry_id=entry, batch_index=index))
                part.start_id, part.start_inclusive, part.seek_time = target, True, None
            else:
                req.publish_time = target
                part.start_id, part.seek_time = None, target
            part.generation += 1  # what is queued or being fetched predates the seek
            part.seeks += 1
            req.seeks = part.seeks
            part.not_seeking.clear()
            try:
                await part.call("/v1/consumers/seek", req, pb.SeekResponse)
            finally:
                part.not_seeking.set()
            part.returned = None
            self._known_last.pop(part.partition, None)
        if self._unacked is not None:  # what it held goes out again from the new position
            with self._unacked_lock:
                self._unacked.clear()
        self.space.notify()

    def has_reached_end_of_topic(self) -> bool:
        """The topic was terminated and every message of it was received (the Java
        client's ``hasReachedEndOfTopic``)."""
        return all(p.end_of_topic for p in self.parts) and self.queue.empty()

    async def has_message_available(self) -> bool:
        """Whether a message after the last one returned exists (readers)."""
        parts = []
        for part in self.parts:
            known = self._known_last.get(part.partition)
            if known is not None and part.returned is not None and known > part.returned:
                return True  # no request needed: the log only grows
            parts.append(part)
        replies = await gather_last(parts, self.core)
        for part, reply in zip(parts, replies):
            last = (reply.last.entry_id, reply.last.batch_index) if reply.has_message else None
            if last is not None:
                self._known_last[part.partition] = last
            start = (None if part.start_id is None
                     else initial_start(part.start_id, part.start_inclusive))
            if has_more(last, part.returned, start, reply.mark_delete.entry_id):
                return True
        return False

    # ---------------------------------------------------------------- closing

    async def close(self, unsubscribe: bool = False) -> None:
        """Send pending acks, then close (``unsubscribe=True`` also deletes the
        subscription)."""
        if self.closed:
            return
        self.closed = True
        if self.retry is not None:
            await self.retry.close(unsubscribe)
        if self.letters is not None:
            await self.letters.close()
        self.watch.stop()
        for task in self._tasks:
            task.cancel()
        results = await asyncio.gather(*(p.close(unsubscribe) for p in self.parts),
                                       return_exceptions=True)
        self.queue.put_nowait(None)  # wakes whoever is blocked in receive
        if self.on_close is not None:
            self.on_close(self)
        if unsubscribe:
            for result in results:
                if isinstance(result, BaseException):
                    raise result

    async def unsubscribe(self) -> None:
        """Delete the subscription and close this consumer."""
        await self.close(unsubscribe=True)

    def undecodable_entries(self) -> int:
        """How many delivered entries this consumer skipped because their batch did not
        decode (each also logged as an error naming its message id)."""
        return self._undecodable

    def topic(self) -> str:
        """The topic's full name."""
        return self.topic_name

    def subscription_name(self) -> str:
        """The subscription's name."""
        return self.options["subscription"]

    def consumer_name(self) -> str:
        """This consumer's name (generated when none was given)."""
        return self.options["consumer_name"]

    def is_connected(self) -> bool:
        """Whether every partition has a live consumer."""
        return not self.closed and all(p.consumer_id for p in self.parts)


def chunk_options(max_pending: int, auto_ack_oldest: bool, expire_ms: int) -> dict:
    """Validated options for chunked messages (pulsar-client's names and defaults)."""
    for name, value in (("max_pending_chunked_message", max_pending),
                        ("expire_time_of_incomplete_chunked_message_ms", expire_ms)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be an int >= 0 (0: no limit), got {value!r}")
    return {"max_pending_chunks": max_pending, "auto_ack_oldest_chunk": bool(auto_ack_oldest),
            "chunk_expiry_ms": expire_ms}


class _Room:
    """Free space in the receiver queue, for the fetch loops.  A fetch loop that found
    the queue (more than half) full waits until half of it is free again, as Pulsar
    grants permits in halves; receivers wake it once, from any thread, so a full queue
    costs no loop wake-up per received message."""

    def __init__(self, loop: asyncio.AbstractEventLoop, queue, size: int) -> None:
        self._loop = loop
        self._queue = queue
        self.size = size
        self.refill = max(1, size // 2)
        self._event = asyncio.Event()
        self.waiting = False

    def free(self) -> int:
        return self.size - self._queue.qsize()

    def notify(self) -> None:
        """A message left the queue (any thread)."""
        if self.waiting and self.free() >= self.refill:
            self.waiting = False
            self._loop.call_soon_threadsafe(self._event.set)

    async def wait(self) -> None:
        while self.free() < self.refill:
            self._event.clear()
            self.waiting = True
            if self.free() >= self.refill:  # freed between the check and the flag
                break
            try:
                await asyncio.wait_for(self._event.wait(), 1.0)
            except TimeoutError:
                pass
        self.waiting = False
