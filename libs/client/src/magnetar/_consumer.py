"""Consumers and readers: one fetch loop per partition feeding a receive queue, grouped
acknowledgements (as Pulsar's ack grouping tracker), delayed negative acks, and
transactional acks that wait for the broker's answer."""

from __future__ import annotations

import asyncio
import logging
import queue as thread_queue
import time
import uuid
from collections import deque

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import (
    ConsumerNotFound,
    MagnetarError,
    SessionNotFound,
    Timeout,
)

from magnetar._core import RETRYABLE, Core
from magnetar._message import Message, expand
from magnetar._types import LATEST_ENTRY, MessageId

log = logging.getLogger("magnetar.consumer")
ACK_GROUP_S = 0.01
ACK_GROUP_MAX = 1000
FETCH_WAIT_MS = 2000


class PartitionConsumer:
    def __init__(self, consumer: "Consumer", topic: str, partition: int):
        self.consumer = consumer
        self.core: Core = consumer.core
        self.topic = topic
        self.partition = partition
        self.url = ""
        self.session_id = ""
        self.consumer_id = 0
        self.last_delivered: tuple[int, int] | None = None  # readers resume after it
        self.acks: deque[pb.Position] = deque()  # appended from any thread
        self.cumulative: pb.Position | None = None
        self.task: asyncio.Task | None = None
        # Bumped on every (re)subscribe: messages queued under an earlier connection are
        # dropped at receive, since the broker redelivers them (as Pulsar's client
        # clears its receiver queue on reconnect).
        self.generation = 0

    async def connect(self) -> None:
        self.consumer_id = 0  # never reuse an id from an earlier broker
        o = self.consumer.options

        def request(session_id: str) -> pb.SubscribeRequest:
            req = pb.SubscribeRequest(
                session_id=session_id, topic=self.topic, subscription=o["subscription"],
                sub_type=int(o["consumer_type"]), initial_position=int(o["initial_position"]),
                consumer_name=o["consumer_name"], priority_level=o["priority_level"], durable=o["durable"])
            if not o["durable"]:
                if self.last_delivered is not None:  # a reader resumes after what it got
                    entry, index = self.last_delivered
                    req.start_position.CopyFrom(pb.Position(entry_id=entry, batch_index=index))
                    req.start_inclusive = False
                else:
                    start: MessageId = o["start"]
                    req.start_position.CopyFrom(pb.Position(entry_id=start.entry_id(),
                                                            batch_index=start.batch_index()))
                    req.start_inclusive = o["start_inclusive"] or start.entry_id() in (0, LATEST_ENTRY)
            return req

        self.url, self.session_id, reply = await self.core.attach(
            self.topic, "/v1/consumers/subscribe", request, pb.SubscribeResponse,
            f"subscribe to {self.topic}", time.monotonic() + self.core.operation_timeout_s)
        self.consumer_id = reply.consumer_id
        if o["durable"]:
            self.generation += 1

    def start(self) -> None:
        self.task = asyncio.create_task(self._fetch_loop())

    async def _fetch_loop(self) -> None:
        queue = self.consumer.queue
        attempt = 0
        while not self.consumer.closed:
            room = self.consumer.options["receiver_queue_size"] - queue.qsize()
            if room <= 0:
                await self.consumer.space.wait(lambda: self.consumer.options["receiver_queue_size"] > queue.qsize())
                continue
            try:
                reply = await self.core.call(
                    self.url, "/v1/consumers/fetch",
                    pb.FetchRequest(consumer_id=self.consumer_id, max_messages=room, wait_ms=FETCH_WAIT_MS),
                    pb.FetchResponse, timeout=FETCH_WAIT_MS / 1000 + 10)
                attempt = 0
            except asyncio.CancelledError:
                raise
            except (SessionNotFound, ConsumerNotFound, *RETRYABLE) as exc:
                if isinstance(exc, (SessionNotFound, ConsumerNotFound)):
                    self.core.drop_session(self.url, self.session_id)
                await asyncio.sleep(min(0.05 * 2 ** attempt, 1.0))
                attempt += 1
                try:
                    await self.connect()
                except MagnetarError as again:
                    log.info("reconnecting %s: %s", self.topic, again)
                continue
            except MagnetarError as exc:
                log.warning("fetch on %s failed: %s", self.topic, exc)
                await asyncio.sleep(1)
                continue
            for entry in reply.entries:
                for msg in expand(entry, self.partition, self.topic):
                    msg._source = self
                    msg._generation = self.generation
                    queue.put_nowait(msg)
                if entry.num_messages:
                    last = msg.message_id() if entry.indices else MessageId(
                        self.partition, entry.entry_id, entry.num_messages - 1, entry.num_messages)
                    self.last_delivered = (last.entry_id(), last.batch_index())

    async def send_acks(self) -> None:
        individual = []
        while self.acks:
            individual.append(self.acks.popleft())
        cumulative, self.cumulative = self.cumulative, None
        try:
            if individual:
                await self.core.call(self.url, "/v1/consumers/ack",
                                     pb.AckRequest(consumer_id=self.consumer_id, positions=individual),
                                     pb.AckResponse)
            if cumulative is not None:
                await self.core.call(self.url, "/v1/consumers/ack",
                                     pb.AckRequest(consumer_id=self.consumer_id, ack_type=pb.ACK_CUMULATIVE,
                                                   positions=[cumulative]), pb.AckResponse)
        except MagnetarError as exc:
            # Plain acks are best effort, as in Pulsar: unacknowledged messages come back.
            log.info("acknowledgement on %s not delivered: %s", self.topic, exc)

    async def close(self, unsubscribe: bool = False) -> None:
        if self.task:
            self.task.cancel()
        await self.send_acks()
        if self.consumer_id:
            await self.core.call(self.url, "/v1/consumers/close",
                                 pb.CloseConsumerRequest(consumer_id=self.consumer_id, unsubscribe=unsubscribe),
                                 pb.CloseConsumerResponse)


class Consumer:
    """``magnetar.asyncio`` consumer (a reader is one with a non-durable subscription)."""

    def __init__(self, core: Core, topic: str, partitions: int, options: dict, threaded: bool = False):
        self.core = core
        self.topic_name = topic
        self.options = options
        options.setdefault("consumer_name", f"c-{uuid.uuid4().hex[:8]}")
        self.parts = [PartitionConsumer(self, f"{topic}-partition-{i}" if partitions else topic,
                                        i if partitions else -1) for i in range(max(partitions, 1))]
        # The sync API reads from a thread-safe C queue without a thread hop per message.
        self.queue = thread_queue.SimpleQueue() if threaded else asyncio.Queue()
        self.space = _Signal(asyncio.get_running_loop())
        self.closed = False
        self._nacks: list[tuple[float, MessageId]] = []
        self._ack_task: asyncio.Task | None = None
        self._nack_task: asyncio.Task | None = None

    async def start(self) -> "Consumer":
        await asyncio.gather(*(p.connect() for p in self.parts))
        for p in self.parts:
            p.start()
        self._ack_task = asyncio.create_task(self._ack_flusher())
        self._nack_task = asyncio.create_task(self._nack_timer())
        return self

    def _part(self, msg_id: MessageId) -> PartitionConsumer:
        if len(self.parts) == 1:
            return self.parts[0]
        return self.parts[msg_id.partition()]

    async def receive(self, timeout_millis: int | None = None) -> Message:
        deadline = None if timeout_millis is None else time.monotonic() + timeout_millis / 1000
        while True:
            try:
                if deadline is None:
                    msg = await self.queue.get()
                else:
                    msg = await asyncio.wait_for(self.queue.get(), max(deadline - time.monotonic(), 0))
            except TimeoutError:
                raise Timeout(f"no message on {self.topic_name} within {timeout_millis} ms") from None
            self.space.set()
            if msg._generation == msg._source.generation:
                return msg

    def receive_from_thread(self, timeout_millis: int | None) -> Message:
        """The sync API's receive: called on the user's thread."""
        deadline = None if timeout_millis is None else time.monotonic() + timeout_millis / 1000
        while True:
            try:
                msg = self.queue.get(timeout=None if deadline is None else max(deadline - time.monotonic(), 0))
            except thread_queue.Empty:
                raise Timeout(f"no message on {self.topic_name} within {timeout_millis} ms") from None
            self.space.set()
            if msg._generation == msg._source.generation:  # else queued before a reconnect
                return msg

    def ack_from_thread(self, msg_or_id, cumulative: bool = False) -> None:
        """A plain ack from the user's thread: queued for the grouped flush."""
        msg_id = self._id(msg_or_id)
        pos = pb.Position(entry_id=msg_id.entry_id(), batch_index=msg_id.batch_index())
        part = self._part(msg_id)
        if cumulative:
            part.cumulative = pos
        else:
            part.acks.append(pos)

    # ---------------------------------------------------------------- acks

    @staticmethod
    def _id(msg_or_id) -> MessageId:
        return msg_or_id.message_id() if isinstance(msg_or_id, Message) else msg_or_id

    async def acknowledge(self, msg_or_id, txn=None, cumulative: bool = False) -> None:
        msg_id = self._id(msg_or_id)
        part = self._part(msg_id)
        pos = pb.Position(entry_id=msg_id.entry_id(), batch_index=msg_id.batch_index())
        if txn is not None:
            await txn.ack(part, pos, cumulative, self.options["subscription"])
            return
        if cumulative:
            part.cumulative = pos
        else:
            part.acks.append(pos)
            if len(part.acks) >= ACK_GROUP_MAX:
                await part.send_acks()

    async def _ack_flusher(self) -> None:
        while not self.closed:
            await asyncio.sleep(ACK_GROUP_S)
            for p in self.parts:
                if p.acks or p.cumulative is not None:
                    await p.send_acks()

    def negative_acknowledge(self, msg_or_id) -> None:
        due = time.monotonic() + self.options["nack_delay_ms"] / 1000
        self._nacks.append((due, self._id(msg_or_id)))

    async def _nack_timer(self) -> None:
        while not self.closed:
            await asyncio.sleep(min(0.1, self.options["nack_delay_ms"] / 1000 or 0.1))
            now = time.monotonic()
            due = [m for t, m in self._nacks if t <= now]
            if not due:
                continue
            self._nacks = [(t, m) for t, m in self._nacks if t > now]
            for part in self.parts:
                mine = [pb.Position(entry_id=m.entry_id(), batch_index=m.batch_index())
                        for m in due if self._part(m) is part]
                if mine:
                    try:
                        await self.core.call(part.url, "/v1/consumers/redeliver",
                                             pb.RedeliverRequest(consumer_id=part.consumer_id, positions=mine),
                                             pb.RedeliverResponse)
                    except MagnetarError as exc:
                        log.info("negative ack on %s not delivered: %s", part.topic, exc)

    async def redeliver_unacknowledged_messages(self) -> None:
        for part in self.parts:
            await self.core.call(part.url, "/v1/consumers/redeliver",
                                 pb.RedeliverRequest(consumer_id=part.consumer_id), pb.RedeliverResponse)

    async def seek(self, target) -> None:
        for part in self.parts:
            req = pb.SeekRequest(consumer_id=part.consumer_id)
            if isinstance(target, MessageId):
                if len(self.parts) > 1 and target.partition() != part.partition:
                    continue
                req.position.CopyFrom(pb.Position(entry_id=target.entry_id(), batch_index=max(target.batch_index(), 0)))
            else:
                req.publish_time = int(target)
            await self.core.call(part.url, "/v1/consumers/seek", req, pb.SeekResponse)
            part.last_delivered = None
        while not self.queue.empty():
            self.queue.get_nowait()
        self.space.set()

    async def has_message_available(self) -> bool:
        if not self.queue.empty():
            return True
        for part in self.parts:
            reply = await self.core.with_retries("last message id", lambda p=part: self.core.call(
                p.url, "/v1/consumers/last-message-id", pb.LastMessageIdRequest(consumer_id=p.consumer_id),
                pb.LastMessageIdResponse))
            if not reply.has_message:
                continue
            last = (reply.last.entry_id, reply.last.batch_index)
            seen = part.last_delivered
            if seen is None:
                start = self.options.get("start")
                if start is not None and start.entry_id() == LATEST_ENTRY:
                    continue
                if start is None or start.entry_id() <= last[0]:
                    return True
            elif last > seen:
                return True
        # The fetch loop may have queued the last message while we asked.
        return not self.queue.empty()

    async def close(self, unsubscribe: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        for task in (self._ack_task, self._nack_task):
            if task:
                task.cancel()
        await asyncio.gather(*(p.close(unsubscribe) for p in self.parts), return_exceptions=not unsubscribe)

    def topic(self) -> str:
        return self.topic_name

    def subscription_name(self) -> str:
        return self.options["subscription"]


class _Signal:
    """Wakes fetch loops waiting for room in the receive queue; safe to call from the
    user's thread, and cheap when nobody waits (no loop wake-up per message)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._event = asyncio.Event()
        self.waiting = False

    def set(self) -> None:
        if self.waiting:
            self._loop.call_soon_threadsafe(self._event.set)

    def set_from_thread(self) -> None:
        self.set()

    async def wait(self, has_room) -> None:
        self.waiting = True
        try:
            while not has_room():
                self._event.clear()
                try:
                    await asyncio.wait_for(self._event.wait(), 1.0)
                except TimeoutError:
                    pass
        finally:
            self.waiting = False
