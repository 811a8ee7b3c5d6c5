"""One partition's consumer: the subscription on the partition's owner and its fetch
loop, which long-polls ``/v1/consumers/fetch`` for as many messages as the receiver
queue has room for.

Reconnects: a lapsed session, an unknown consumer or ``NotOwner`` mean the broker-side
consumer is gone, so the partition subscribes again (a reader from just after the last
message it returned).  No answer means the broker may still hold it: the partition
looks the topic up again and only re-subscribes when the owner changed.  Each
subscription is a new *generation*; messages of an older one still in the receiver
queue are dropped on receive (the broker redelivers what was unacknowledged).
"""

from __future__ import annotations

import asyncio
import logging
import time

from google.protobuf.message import DecodeError

from magnetar._acks import AckGroup, ack_requests
from magnetar._chunks import Assembler, Outcome
from magnetar._message import ChunkPiece, EntryInfo, UndecodableEntry, expand
from magnetar._reader import start_position
from magnetar._retry import RETRYABLE, SESSION_LOST, TRANSIENT, Backoff, deadline_after
from magnetar._types import InitialPosition, MessageId
from magnetar._values import ValueReader
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import MagnetarError, NotOwner, SessionNotFound, TopicNotFound

log = logging.getLogger("magnetar.consumer")

FETCH_WAIT_MS = 2000
END_OF_TOPIC_POLL_S = 1.0


class PartitionConsumer:
    """The consumer of one partition (or of a non-partitioned topic)."""
    def __init__(self, consumer, topic: str, partition: int, earliest: bool = False) -> None:
        """``earliest``: start at the partition's first message whatever the consumer's
        initial position (a partition added while the consumer runs)."""
        self.consumer = consumer
        self.core = consumer.core
        self.topic = topic
        self.partition = partition
        self.url = ""
        self.session_id = ""
        self.consumer_id = 0
        self.generation = 0
        # Seeks asked so far (FetchRequest.seeks; a new consumer on the broker adopts the
        # count from the first fetch).  A fetch waits while a seek is under way, so none
        # carries a count the broker has not seen yet.
        self.seeks = 0
        self.not_seeking = asyncio.Event()
        self.not_seeking.set()
        self.returned: tuple[int, int] | None = None  # last message handed to the user
        o = consumer.options
        self.reader = not o["durable"]
        # Readers: where to start when nothing was returned yet (moved by seek).
        self.start_id: MessageId | None = (None if o["durable"]
                                           else MessageId.earliest if earliest else o["start"])
        self.initial_position = (int(InitialPosition.Earliest) if earliest
                                 else int(o["initial_position"]))
        self.start_inclusive: bool = o.get("start_inclusive", False)
        self.seek_time: int | None = None  # a reader's last seek by publish time
        self.acks = AckGroup()
        self.chunks = Assembler(o.get("max_pending_chunks", 10), o.get("chunk_expiry_ms", 60_000),
                                o.get("auto_ack_oldest_chunk", False))
        self.task: asyncio.Task | None = None
        self.end_of_topic = False  # the topic was terminated and everything was fetched

    # ---------------------------------------------------------------- subscribing

    async def connect(self, deadline: float | None = None) -> None:
        """Subscribe (again) on the partition's owner, retrying until ``deadline``."""
        self.consumer_id = 0  # never present an id from an earlier broker
        backoff = Backoff(deadline or deadline_after(self.core.operation_timeout_s))
        what = f"subscribe to {self.topic}"
        while True:
            try:
                self.url = await self.core.lookup(self.topic)
                self.session_id = await self.core.session(self.url)
                reply = await self.core.call(self.url, "/v1/consumers/subscribe",
                                             self._subscribe_request(), pb.SubscribeResponse)
                break
            except SESSION_LOST as exc:
                self.core.drop_session(self.url, self.session_id)
                await backoff.wait(what, exc)
            except TRANSIENT as exc:
                await backoff.wait(what, exc)
        self.consumer_id = reply.consumer_id
        self.generation += 1
        durable = self.consumer.options["durable"]
        if not durable and self.seek_time is not None and self.returned is None:
            # A reader's cursor dies with it: repeat its seek by time on the new one.
            await self.core.call(self.url, "/v1/consumers/seek", pb.SeekRequest(
                consumer_id=self.consumer_id, session_id=self.session_id,
                publish_time=self.seek_time), pb.SeekResponse)

    def _subscribe_request(self) -> pb.SubscribeRequest:
        o = self.consumer.options
        req = pb.SubscribeRequest(
            session_id=self.session_id, topic=self.topic, subscription=o["subscription"],
            sub_type=int(o["consumer_type"]), initial_position=self.initial_position,
            consumer_name=o["consumer_name"], priority_level=o["priority_level"],
            durable=o["durable"], read_compacted=o.get("read_compacted", False))
        policy = o.get("dead_letter_policy")
        if policy is not None:
            req.dead_letter_policy.CopyFrom(pb.DeadLetterPolicy(
                max_redeliver_count=policy.max_redeliver_count,
                dead_letter_topic=policy.dead_letter_topic or "",
                initial_subscription_name=policy.initial_subscription_name or "",
                retry_letter_topic=policy.retry_letter_topic or ""))
        schema = o.get("schema")
        if schema is not None:
            req.schema.CopyFrom(schema._wire())
        if not o["durable"]:
            position, inclusive = start_position(self.start_id or MessageId.earliest,
                                                 self.start_inclusive, self.returned)
            req.start_position.CopyFrom(position)
            req.start_inclusive = inclusive
        return req

    # ---------------------------------------------------------------- fetching

    def start(self) -> None:
        """Start the fetch loop."""
        self.task = asyncio.get_running_loop().create_task(
            self._fetch_loop(), name=f"magnetar-fetch {self.topic}")

    async def _fetch_loop(self) -> None:
        consumer = self.consumer
        queue = consumer.queue
        space = consumer.space
        backoff = Backoff(float("inf"))
        while not consumer.closed:
            room = space.free()
            if room < space.refill:
                await space.wait()
                continue
            await self.not_seeking.wait()
            generation = self.generation
            try:
                reply = await self.core.call(
                    self.url, "/v1/consumers/fetch",
                    pb.FetchRequest(consumer_id=self.consumer_id, session_id=self.session_id,
                                    max_messages=room, wait_ms=FETCH_WAIT_MS, seeks=self.seeks),
                    pb.FetchResponse, timeout=FETCH_WAIT_MS / 1000 + self.core.operation_timeout_s)
            except RETRYABLE as exc:
                await backoff.wait(f"fetch from {self.topic}", exc)
                await self._recover(exc)
                continue
            except MagnetarError as exc:  # e.g. the topic was deleted: keep trying, slowly
                log.warning("fetch from %s failed: %s", self.topic, exc)
                await asyncio.sleep(1.0)
                continue
            backoff.reset()
            if consumer.closed or generation != self.generation:
                continue  # answered for a subscription since replaced (seek, reconnect)
            self.end_of_topic = reply.end_of_topic
            if reply.end_of_topic and not reply.entries:
                # The broker answers at once at the end of a terminated topic: ask again
                # now and then (an operator's reset-cursor may move us back).
                await asyncio.sleep(END_OF_TOPIC_POLL_S)
                continue
            put = queue.put_nowait
            values = consumer.values
            for entry in reply.entries:
                try:
                    messages = expand(entry, self.partition, self.topic, generation, self, values)
                except (DecodeError, RuntimeWarning) as exc:
                    put(self._skip_undecodable(entry, generation, exc))
                    continue
                if values is not None and values.wants_writers:
                    await self._learn_writers(values, messages)
                for msg in messages:
                    if type(msg) is ChunkPiece:
                        self._chunk(msg)
                    else:
                        put(msg)
            if len(self.chunks):
                self._settle_chunks(self.chunks.expire(int(time.time() * 1000)))

    def _chunk(self, piece: ChunkPiece) -> None:
        """One chunk of a large message: the whole message once its last chunk came."""
        outcome = self.chunks.add(piece, int(time.time() * 1000))
        self._settle_chunks(outcome)
        if outcome.message is not None:
            self.consumer.queue.put_nowait(outcome.message)

    def _settle_chunks(self, outcome: Outcome) -> None:
        """Acknowledge chunks the assembler gave up on (expired, or room made with
        auto_ack_oldest_chunked_message_on_queue_full); the others it dropped come
        again when redelivered (a reader's are gone: it never acknowledges)."""
        if outcome.ack and not self.reader:
            for entry_id, index in outcome.ack:
                self.consumer.ack_nowait(MessageId(self.partition, entry_id, index, 0))
        if outcome.ack or outcome.dropped:
            log.info("chunks of incomplete messages on %s dropped (%d acknowledged, %d left for "
                     "redelivery)", self.topic, len(outcome.ack), len(outcome.dropped))

    async def _learn_writers(self, values: ValueReader, messages: list) -> None:
        """Fetch the writers' schemas of versions not seen yet, before their messages are
        queued (``value()`` must not wait).  A version the registry does not have (a
        forced delete) is read with the consumer's own schema."""
        for version in values.missing(messages):
            try:
                reply = await self.core.call(self.url, "/v1/schemas/get",
                                             pb.GetSchemaRequest(topic=self.topic, version=version),
                                             pb.GetSchemaResponse)
                values.learn(version, reply.schema)
            except TopicNotFound:
                values.learn(version, None)
            except MagnetarError as exc:   # not known yet: asked again with the next message
                log.warning("schema version %d of %s not fetched (%s): read with the consumer's schema",
                            version, self.topic, exc)

    def _skip_undecodable(self, entry: pb.DeliveredEntry, generation: int,
                          exc: Exception) -> UndecodableEntry:
        """An entry whose batch does not decode is skipped, counted and logged, and
        acknowledged on a durable subscription so it is not redelivered: what Pulsar's
        consumer does with a batch it cannot deserialize (it acks it with
        ``ValidationError.BatchDeSerializeError``).  Later entries keep coming."""
        self.consumer._undecodable += 1
        size = max(entry.num_messages, 1)
        log.error("skipped undecodable entry %s on %s (subscription %r, %d message(s) lost "
                  "to this consumer): %s", MessageId(self.partition, entry.entry_id, -1, size),
                  self.topic, self.consumer.options["subscription"], size, exc)
        if not self.reader:
            self.consumer.ack_nowait(MessageId(self.partition, entry.entry_id, -1, size))
        info = EntryInfo(self.partition, entry.entry_id, size, self.topic, entry.publish_time,
                         entry.producer_name, self, generation)
        return UndecodableEntry(info, size - 1)

    async def _recover(self, exc: MagnetarError) -> None:
        """After a failed fetch: subscribe again where the consumer is gone."""
        try:
            if isinstance(exc, SessionNotFound):
                self.core.drop_session(self.url, self.session_id)
            if not isinstance(exc, (*SESSION_LOST, NotOwner)):
                # No answer or busy: the consumer may be alive; keep it unless the topic moved.
                if await self.core.lookup(self.topic) == self.url:
                    return
            await self.connect()
        except MagnetarError as again:
            log.info("re-subscribing to %s: %s", self.topic, again)

    # ---------------------------------------------------------------- rewinding

    def drop_queued(self) -> None:
        """Drop what is queued or being fetched and hold the fetch loop (Pulsar's
        clearIncomingMessages): the broker is about to deliver every unacknowledged
        message again, so nothing delivered before may be handed out after.  Then
        ``redeliver_all`` and, whatever happened, ``resume``."""
        self.generation += 1  # queued messages and answers of fetches in flight are stale
        self.seeks += 1
        self.not_seeking.clear()

    async def redeliver_all(self) -> None:
        """Have the broker take back every message this consumer holds (count + 1),
        carrying the new seek count, so a fetch it still waits on answers empty."""
        await self.call("/v1/consumers/redeliver", pb.RedeliverRequest(seeks=self.seeks), pb.RedeliverResponse)

    def resume(self) -> None:
        """Let the fetch loop go on after ``drop_queued``."""
        self.not_seeking.set()
        self.consumer.space.notify()

    # ---------------------------------------------------------------- acks

    async def send_acks(self) -> None:
        """Send the grouped plain acks; transient failures keep them for the next group."""
        individual, cumulative = self.acks.take()
        if not individual and cumulative is None:
            return
        for req in ack_requests(self.consumer_id, self.session_id, individual, cumulative):
            try:
                await self.core.call(self.url, "/v1/consumers/ack", req, pb.AckResponse)
            except RETRYABLE as exc:
                if req.ack_type == pb.ACK_CUMULATIVE:
                    self.acks.put_back([], cumulative)
                else:
                    self.acks.put_back(individual, None)
                log.debug("acknowledgements on %s wait for a reconnect: %s", self.topic, exc)
            except MagnetarError as exc:
                # Plain acks are best effort, as in Pulsar: unacknowledged messages return.
                log.warning("acknowledgements on %s dropped: %s", self.topic, exc)

    async def call(self, path: str, request, response_type, coalesce: bool = False):
        """A consumer request with the current consumer id, retried across reconnects
        (``coalesce``: may share a request with other consumers' calls, see Core)."""
        send = self.core.call_coalesced if coalesce else self.core.call

        async def attempt():
            # The broker refuses ids of another session (docs/security.md).
            request.consumer_id, request.session_id = self.consumer_id, self.session_id
            return await send(self.url, path, request, response_type)
        return await self.core.with_retries(f"{path} on {self.topic}", attempt)

    async def close(self, unsubscribe: bool = False) -> None:
        """Stop fetching, send pending acks, close on the broker."""
        if self.task is not None:
            self.task.cancel()
        await self.send_acks()
        if self.consumer_id:
            await self.core.call(self.url, "/v1/consumers/close",
                                 pb.CloseConsumerRequest(consumer_id=self.consumer_id,
                                                         session_id=self.session_id,
                                                         unsubscribe=unsubscribe),
                                 pb.CloseConsumerResponse)
