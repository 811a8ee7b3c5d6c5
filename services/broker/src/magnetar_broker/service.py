"""The broker's request handling: sessions, producers, consumers, on top of Ownership."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Sequence

from magnetar_broker import metrics
from magnetar_broker.authorization import Authorizer
from magnetar_broker.backlog_ops import BacklogOps, stored_acked_beyond
from magnetar_broker.commands import (
    LATEST_ENTRY,
    Ack,
    CloseConsumer,
    CreateProducer,
    Fetch,
    Fetched,
    LastMessage,
    Located,
    Redeliver,
    Seek,
    Subscribe,
)
from magnetar_broker.compactor import Compactor
from magnetar_broker.deadletter_ops import DeadLetterMoves
from magnetar_broker.lifecycle import StorageLifecycle
from magnetar_broker.ownership import Ownership
from magnetar_broker.partition.access import MODE_NAMES as ACCESS_MODES
from magnetar_broker.partition.log import PartitionLog, Producer
from magnetar_broker.partition.sends import Batch, Sent
from magnetar_broker.producers import ProducerCreated, ProducerHandlers
from magnetar_broker.schemas import SchemaRegistry
from magnetar_broker.sessions import Session, SessionRegistry, new_object_id
from magnetar_broker.settings import BrokerSettings
from magnetar_broker.store import BrokerStore
from magnetar_broker.subscription.cursor import Cursor
from magnetar_broker.subscription.deadrules import DeadLetterPolicy
from magnetar_broker.subscription.subscription import FROM_EARLIEST, FROM_LATEST, Consumer, Subscription, durable
from magnetar_broker.topic_metrics import PartitionSample, export
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.cursorstate import decode_acks
from magnetar_protocol.errors import (
    AuthorizationError,
    BadRequest,
    ConsumerNotFound,
    MagnetarError,
    NotAllowedError,
    NotOwner,
    ProducerNotFound,
)
from magnetar_protocol.listeners import choose_pulsar_url, choose_url, listener_name_problem
from magnetar_protocol.topics import TopicName, validate_name_part
from magnetar_runtime.auth import Authenticator, current_role
from magnetar_runtime.loops import BackgroundLoop
from magnetar_runtime.permissions import CONSUME, LOOKUP, PRODUCE
from magnetar_runtime.rpc import RpcClient

log = logging.getLogger("magnetar.broker")


def _mine(obj: Producer | Consumer, sessions) -> bool:
    """Is the producer or consumer the caller's: created by its role, and in the session
    the request names (if it names one)?"""
    return obj.role == current_role() and all(s in ("", obj.session_id) for s in sessions)


def check_listener(name: str) -> None:
    """BadRequest for a malformed listener name, before any database work."""
    if name and (problem := listener_name_problem(name)):
        raise BadRequest(problem)


class BrokerService:
    def __init__(self, store: BrokerStore, settings: BrokerSettings, auth: Authenticator | None = None):
        self.store = store
        self.settings = settings
        self.auth = auth or Authenticator(settings)
        self.broker_id = store.broker_id
        self.ownership = Ownership(store, settings, self._topic_lost, self.auth.roles)
        self.authz = Authorizer(store, self.auth.roles, settings.auth_policy_cache_ms / 1000)
        self.sessions = SessionRegistry(settings.session_timeout_ms / 1000)
        self.producers: dict[int, Producer] = {}
        self.consumers: dict[int, Consumer] = {}
        # Readers' subscriptions a seek disconnected, kept until this (monotonic) deadline.
        self.kept_readers: dict[Subscription, float] = {}
        self.heartbeat_loop = BackgroundLoop(
            "broker-heartbeat", settings.heartbeat_interval_ms / 1000, self.ownership.heartbeat_once)
        self.session_loop = BackgroundLoop("session-expiry", 0.5, self.expire_sessions)
        idle_s = settings.deduplication_producer_inactivity_timeout_s
        self.dedup_expiry_loop = BackgroundLoop("dedup-expiry", min(max(idle_s / 4, 0.2), 60),
                                                self.expire_idle_producers)
        self.compactor = Compactor(settings)
        self.lifecycle = StorageLifecycle(store, settings, lambda: list(self.ownership.logs.values()),
                                          self.ownership.get_log, self._compact_if_idle)
        self.lifecycle_loop = BackgroundLoop("storage-lifecycle", settings.lifecycle_interval_ms / 1000,
                                             self.lifecycle.run_once)
        self.topic_metrics_loop = BackgroundLoop("topic-metrics", settings.topic_metrics_interval_ms / 1000,
                                                 self.export_topic_metrics)
        self.ready = False
        # Whether a transactional ack may be held in memory for a one-request commit
        # (AckRequest.hold_ms): only on a broker whose hosted coordinator commits those
        # (hosted_coordinator sets it); elsewhere such an ack is written the classic way.
        self.holds_acks = False
        self._released = False
        # Other protocols' listeners on this service (the Pulsar listener): started
        # before the broker registers live, stopped first on the way out.
        self.front_ends: list = []
        self.backlog_ops = BacklogOps(self.ownership, store, self.broker_id, self._drop_consumer,
                                      settings.terminate_txn_wait_ms / 1000)
        self.schemas = SchemaRegistry(store, settings, self.authz)
        self.producer_handlers = ProducerHandlers(self.sessions, self.authz, self.ownership,
                                                  self.producers, self.broker_id, settings, self.schemas)
        # Broker-to-broker calls (a dead-letter move to a partition another broker owns),
        # made with this broker's own credentials.
        self.rpc = RpcClient(headers=self.auth.headers())
        self.dead_letters = DeadLetterMoves(self.ownership, store, self.broker_id, self.rpc)
        self.ownership.dead_letter_sink = self.dead_letters

    # ---------------------------------------------------------------- compaction

    def _compact_if_idle(self, plog: PartitionLog) -> bool:
        """The lifecycle's compactionThreshold trigger: a run unless one is under way."""
        if self.compactor.running(plog):
            return False
        self.compactor.trigger(plog)
        return True

    async def compact(self, topic: TopicName) -> None:
        """Start compacting a partition this broker owns (the admin's PUT .../compaction);
        Conflict while a run is under way."""
        self.compactor.trigger(await self.ownership.get_log(topic))

    async def compaction_status(self, topic: TopicName) -> dict:
        """Pulsar's LongRunningProcessStatus of a partition's compaction."""
        return self.compactor.status(await self.ownership.get_log(topic))

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        for front_end in self.front_ends:
            await front_end.start()
        await self.store.register(self.settings.url)
        self.heartbeat_loop.start()
        self.session_loop.start()
        self.dedup_expiry_loop.start()
        self.lifecycle_loop.start()
        self.topic_metrics_loop.start()
        self.ready = True
        log.info("broker %s serving at %s", self.broker_id, self.settings.url)

    async def release_leases(self) -> None:
        """Give every lease back so other brokers take over at once (their next lookup):
        serving stops, queued writes and open fetches end with NotOwner.  Idempotent."""
        if self._released:
            return
        self._released = True
        self.ready = False
        for front_end in self.front_ends:
            await front_end.stop()
        await self.heartbeat_loop.stop()
        await self.lifecycle_loop.stop()
        for plog in list(self.ownership.logs.values()):
            plog.lose("broker shutting down")
        await self.store.deregister()
        log.info("broker %s released its topics", self.broker_id)

    async def stop(self) -> None:
        """Graceful stop (the lifespan's end): release the leases if not yet done."""
        await self.release_leases()
        await self.session_loop.stop()
        await self.dedup_expiry_loop.stop()
        await self.topic_metrics_loop.stop()
        await self.rpc.close()
        log.info("broker %s stopped", self.broker_id)

    def _topic_lost(self, plog: PartitionLog) -> None:
        for producer in list(plog.producers.values()):
            self._drop_producer(producer)
        for sub in plog.subscriptions.clear():
            for consumer in list(sub.consumers.values()):
                consumer.closed = True
                self.consumers.pop(consumer.consumer_id, None)

    async def expire_idle_producers(self) -> None:
        """Forget the dedup state of idle, disconnected producer names of the partitions
        served here, in the database and in memory."""
        idle_s = self.settings.deduplication_producer_inactivity_timeout_s
        for plog in list(self.ownership.logs.values()):
            if plog.closed:
                continue
            connected = sorted({p.name for p in plog.producers.values()})
            names = await self.store.expire_idle_producers(plog.topic_id, plog.epoch, idle_s, connected)
            # One that connected meanwhile keeps its state in memory; its next write
            # stores the row again.
            now_connected = {p.name for p in plog.producers.values()}
            plog.dedup_state.forget(name for name in names if name not in now_connected)
            if names:
                metrics.DEDUP_EXPIRED.inc(len(names))
                log.info("forgot the dedup state of %d producer name(s) idle for %d s on %s",
                         len(names), idle_s, plog.name.full)

    async def export_topic_metrics(self) -> None:
        """Recompute the topic gauges (pulsar_storage_size, pulsar_msg_backlog, ...) of the
        partitions served here; scrapes serve the latest result."""
        now = time.monotonic()
        samples = []
        for plog in list(self.ownership.logs.values()):
            if plog.closed:
                continue
            stored_bytes, _ = await self.store.storage_stats(plog.topic_id)
            # Messages after each stored mark-delete position less those acknowledged
            # individually past it (Pulsar's msgBacklog), as the admin's stats count them.
            # Delayed messages are past their cursor (kept apart until their time) and in
            # the backlog all the same, as Pulsar counts them.
            delayed = {name: sub.delays.pending for name, sub in plog.subscriptions.items() if sub.durable}
            backlogs = {name: (b.messages - await stored_acked_beyond(plog, b.mark_delete, decode_acks(b.acked_state))
                               + delayed.get(name, 0), b.nbytes)
                        for name, b in (await self.store.subscription_backlogs(plog.topic_id)).items()}
            rate_in, throughput_in = plog.rate_in.rates(now)
            rate_out, throughput_out = plog.rate_out.rates(now)  # gone readers' too, as the stats
            samples.append(PartitionSample(plog.name.namespace_name, plog.name.base.full, {
                "pulsar_storage_size": stored_bytes,
                "pulsar_msg_backlog": sum(b[0] for b in backlogs.values()),
                "pulsar_storage_backlog_size": sum(b[1] for b in backlogs.values()),
                "pulsar_rate_in": rate_in, "pulsar_throughput_in": throughput_in,
                "pulsar_rate_out": rate_out, "pulsar_throughput_out": throughput_out,
                "pulsar_subscriptions_count": len(backlogs),
                "pulsar_producers_count": len(plog.producers),
                "pulsar_consumers_count": sum(len(s.consumers) for s in plog.subscriptions.values()),
                "pulsar_subscription_delayed": sum(delayed.values()),
            }, {name: b[0] for name, b in backlogs.items()}))
        metrics.TOPIC_GAUGES_COLLECTOR.latest = export(
            samples, self.settings.cluster_name, self.settings.metrics_per_topic, self.settings.metrics_max_topics)

    async def expire_sessions(self) -> None:
        now = time.monotonic()
        for session in self.sessions.expired(now):
            log.info("session %s (%s) expired", session.session_id, session.client_name)
            self._close_session_objects(session)
        for sub, deadline in list(self.kept_readers.items()):
            # A reader kept through a seek: forgotten unless it came back in time.
            if sub.consumers or now >= deadline:
                del self.kept_readers[sub]
                if not sub.consumers:
                    sub.log.subscriptions.remove(sub.name, sub)
        metrics.SESSIONS.set(len(self.sessions.sessions))

    def _close_session_objects(self, session) -> None:
        for topic, name in session.waiting:
            if plog := self.ownership.logs.get(topic):
                plog.access.leave_queue(name)
                plog.wake()
        for pid in list(session.producers):
            if producer := self.producers.get(pid):
                self._drop_producer(producer)
        for cid in list(session.consumers):
            if consumer := self.consumers.get(cid):
                self._drop_consumer(consumer)

    # ---------------------------------------------------------------- discovery

    async def metadata(self, topic: str) -> tuple[TopicName, int]:
        """The topic's full name and its partitions (0: not partitioned), created if
        auto-creation allows it."""
        name = TopicName.parse(topic)
        await self.authz.require(name, LOOKUP)  # before auto-creation: it obeys permissions
        return name, await self.ownership.partitions(name)

    async def lookup(self, topic: str, listener_name: str = "") -> Located:
        name = TopicName.parse(topic)
        check_listener(listener_name)
        await self.authz.require(name, LOOKUP)
        broker_id, url = await self.ownership.lookup(name)
        if listener_name:
            [url] = await self.advertised(listener_name, [(url, f"broker {broker_id}")])
        return Located(name.full, broker_id, url)

    async def topics_of_namespace(self, tenant: str, namespace: str) -> list[str]:
        """The namespace's topics the caller may look up."""
        visible = []
        for topic in await self.store.namespace_topics(tenant, namespace):
            try:
                await self.authz.require(TopicName.parse(topic), LOOKUP)
            except AuthorizationError:
                continue
            visible.append(topic)
        return visible

    async def live_coordinators(self) -> dict[int, str]:
        """TCID -> internal URL of each coordinator holding its TCID right now."""
        return dict(await self.store.live_coordinators(self.settings.lease_ttl_ms / 1000))

    async def advertised(self, listener: str, internal: list[tuple[str, str]],
                         protocol: str = "http") -> list[str]:
        """The URLs of ``protocol``'s listener ``listener`` of the processes at the
        ``internal`` URLs ((URL, what it is) pairs; "what" names it in the error), in that
        order; BadRequest when one of them does not advertise it."""
        found = await self.store.listeners_of([url for url, _ in internal])
        return [choose_url(url, found[url], listener, what, protocol) for url, what in internal]

    async def pulsar_url(self, broker_id: str, internal_url: str, listener: str = "") -> str:
        """The pulsar:// URL of the broker at ``internal_url`` for a client naming Pulsar
        listener ``listener`` (BadRequest when that broker has none by that name)."""
        what = f"broker {broker_id}"
        if broker_id == self.broker_id:
            return choose_pulsar_url(self.settings.listeners, listener, what)
        found = await self.store.listeners_of([internal_url])
        return choose_pulsar_url(found[internal_url], listener, what)

    # ---------------------------------------------------------------- sessions

    async def open_session(self, client_name: str) -> Session:
        session = self.sessions.open(client_name, time.monotonic(), current_role())
        metrics.SESSIONS.set(len(self.sessions.sessions))
        return session

    async def keepalive(self, session_id: str) -> None:
        self.sessions.get(session_id, time.monotonic(), current_role())

    async def close_session(self, session_id: str) -> None:
        if session := self.sessions.close(session_id, current_role()):
            self._close_session_objects(session)

    # ---------------------------------------------------------------- producers

    async def create_producer(self, cmd: CreateProducer) -> ProducerCreated:
        return await self.producer_handlers.create(cmd)

    def producer(self, producer_id: int, session_id: str) -> Producer:
        """The caller's producer connected here (a one-request commit's sender)."""
        return self._producer(producer_id, session_id)

    def _producer(self, producer_id: int, *sessions: str) -> Producer:
        """The caller's producer.  Another role's id, or one named with another session
        than its creator's (``sessions``: the ones the request names, "" for none), is
        answered as an unknown one, so ids are no oracle (and they are random 63 bits:
        nothing to enumerate)."""
        producer = self.producers.get(producer_id)
        if producer is None or not _mine(producer, sessions):
            raise ProducerNotFound(f"producer {producer_id} is not connected to this broker; create it again")
        producer.check_not_fenced()
        if producer.closed:
            raise ProducerNotFound(f"producer {producer_id} is not connected to this broker; create it again")
        return producer

    async def publish(self, session_id: str,
                      batches: Sequence[Batch]) -> list[Sent | MagnetarError]:
        """Batches of one producer, in order: what became of each (Sent) or its error
        (both front ends answer from these; nothing is encoded and decoded in between)."""
        if not batches:
            raise BadRequest("send-batches: no batches")
        if len({b.producer_id for b in batches}) != 1:
            raise BadRequest("send-batches: every batch must belong to one producer")
        producer = self._producer(batches[0].producer_id, session_id, *{b.session_id for b in batches})
        self.sessions.get(producer.session_id, time.monotonic())
        return await producer.log.publish_many(producer, batches)

    async def close_producer(self, producer_id: int, session_id: str) -> None:
        producer = self.producers.get(producer_id)
        if producer is not None and _mine(producer, (session_id,)):
            self._drop_producer(producer)

    def _drop_producer(self, producer: Producer) -> None:
        producer.closed = True
        self.producers.pop(producer.producer_id, None)
        producer.log.producers.pop(producer.producer_id, None)
        producer.log.access.detach(producer.producer_id)
        producer.log.wake()  # a WaitForExclusive producer may be next
        if session := self.sessions.sessions.get(producer.session_id):
            session.producers.discard(producer.producer_id)
        producer.detached("closed")

    # ---------------------------------------------------------------- consumers

    async def subscribe(self, cmd: Subscribe) -> Consumer:
        """A consumer (both front ends translate their subscribe into ``cmd``)."""
        role = current_role()
        session = self.sessions.get(cmd.session_id, time.monotonic(), role)
        sub_name = cmd.subscription or (f"reader-{uuid.uuid4().hex[:10]}" if not cmd.durable else "")
        validate_name_part("subscription", sub_name)
        name = TopicName.parse(cmd.topic)
        await self.authz.require(name, CONSUME, sub_name)
        plog = await self.ownership.get_log(name)
        # Pulsar's addSchemaIfIdleOrCheckCompatible: checked against the topic's schemas,
        # or registered when the partition has none and nothing uses it yet.
        idle = not plog.producers and plog.next_entry_id <= plog.first_entry_id and \
            not any(sub.consumers for sub in plog.subscriptions.values())
        await self.schemas.for_consumer(name, cmd.schema, idle)
        if cmd.durable:
            # Earliest: the first entry still stored (older ones were trimmed); for a
            # consumer of the compacted view, the view's start (it outlives the log).
            start: int | str = FROM_EARLIEST if cmd.earliest else FROM_LATEST
            if cmd.earliest and cmd.read_compacted and plog.compaction_horizon:
                start = -1
            sub = await durable(plog, sub_name, start)
        else:
            sub = await plog.subscriptions.get_or_open(sub_name, lambda: self._open_reader(plog, sub_name, cmd))
        if cmd.dead_letter is not None:
            await self._check_dead_letter_topic(name, sub_name, cmd.dead_letter)
        consumer = Consumer(new_object_id(), cmd.consumer_name or f"consumer-{uuid.uuid4().hex[:6]}",
                            cmd.session_id, cmd.priority, sub, role=role, read_compacted=cmd.read_compacted)
        sub.add_consumer(consumer, cmd.sub_type)
        if cmd.dead_letter is not None:
            sub.dead.client_policy = cmd.dead_letter  # the latest subscriber's (the admin's wins)
        self.consumers[consumer.consumer_id] = consumer
        session.consumers.add(consumer.consumer_id)
        return consumer

    async def _check_dead_letter_topic(self, name: TopicName, subscription: str, policy: DeadLetterPolicy) -> None:
        """Refuse, before anything is moved, a dead-letter topic the caller could not
        produce to itself: a malformed name (400), no such namespace (404), no produce
        permission (403).  The topic is created now when auto-creation allows it."""
        for topic in {policy.dlq_topic(name.base.full, subscription)}:
            target = TopicName.parse(topic)
            await self.authz.require(target, PRODUCE)
            await self.ownership.partitions(target)

    async def _open_reader(self, plog: PartitionLog, name: str, cmd: Subscribe) -> Subscription:
        """A reader's subscription (not durable), at its start position."""
        cursor = Cursor(plog.next_entry_id - 1)
        if cmd.start is not None and cmd.start.entry_id != LATEST_ENTRY:
            pos = pb.Position(entry_id=cmd.start.entry_id, batch_index=cmd.start.batch_index)
            await plog.check_batch_indexes("reader start", [pos])
            cursor = Cursor(pos.entry_id - 1)
            upto = pos.batch_index if cmd.start_inclusive else pos.batch_index + 1
            if pos.batch_index < 0 and not cmd.start_inclusive:
                cursor = Cursor(pos.entry_id)
            cursor.ack_first(pos.entry_id, upto)
        if cursor.mark_delete < plog.first_entry_id - 1 and not (
                cmd.read_compacted and plog.compaction_horizon > cursor.mark_delete + 1):
            # A start that was trimmed (unless the compacted view, which outlives the
            # log, holds it for a reader of the view).
            cursor = Cursor(plog.first_entry_id - 1)
        return Subscription(plog, name, cursor, durable=False)

    async def expire_messages(self, name: TopicName, subscription: str | None, seconds: int) -> int:
        """The admin's expire-messages on a partition this broker serves (loaded on demand)."""
        if seconds < 0:
            raise BadRequest(f"expire-messages: {seconds} seconds is negative")
        broker_id, url = await self.ownership.lookup(name)  # takes an unowned partition
        if broker_id != self.broker_id:
            raise NotOwner(f"{name.full} is served by broker {broker_id} at {url}")
        plog = await self.ownership.get_log(name)
        return await self.lifecycle.expire(plog, subscription, seconds)

    def _consumer(self, consumer_id: int, session_id: str) -> Consumer:
        """The caller's consumer; another role's id, or one named with another session,
        is answered as an unknown one (see _producer)."""
        consumer = self.consumers.get(consumer_id)
        if consumer is None or consumer.closed or not _mine(consumer, (session_id,)):
            raise ConsumerNotFound(f"consumer {consumer_id} is not connected to this broker; subscribe again")
        return consumer

    async def fetch(self, cmd: Fetch) -> Fetched:
        consumer = self._consumer(cmd.consumer_id, cmd.session_id)
        session = self.sessions.get(consumer.session_id, time.monotonic())
        sub = consumer.subscription
        wait_s = min(cmd.wait_ms, self.settings.max_fetch_wait_ms) / 1000

        consumer.seeks = max(consumer.seeks, cmd.seeks)  # a seek whose answer was lost

        async def attempt() -> list[pb.DeliveredEntry] | None:
            if cmd.seeks < consumer.seeks:
                return []  # sent before a seek: its client drops whatever it brings
            entries = await sub.fetch(consumer, cmd.max_messages, cmd.seeks)
            return entries if entries or consumer.closed or sub.at_end_of_topic() else None

        session.inflight += 1
        try:
            entries = await sub.log.long_poll(wait_s, attempt)
        finally:
            session.inflight -= 1
            session.last_seen = time.monotonic()
        return Fetched(entries or [], sub.log.partition_index, not entries and sub.at_end_of_topic())

    async def ack(self, cmd: Ack) -> None:
        consumer = self._consumer(cmd.consumer_id, cmd.session_id)
        consumer.subscription.log.check_open()
        if cmd.txn is not None and cmd.hold_ms and self.holds_acks:
            await consumer.subscription.txn.hold(cmd.positions, cmd.cumulative, cmd.txn, cmd.hold_ms / 1000)
        elif cmd.txn is not None:
            await consumer.subscription.txn.ack(cmd.positions, cmd.cumulative, cmd.txn)
        else:
            await consumer.subscription.ack(consumer, cmd.positions, cmd.cumulative)

    async def redeliver(self, cmd: Redeliver) -> None:
        consumer = self._consumer(cmd.consumer_id, cmd.session_id)
        await consumer.subscription.check_positions("redeliver", cmd.positions)
        # Before the release wakes this consumer's waiting fetch, so that fetch answers
        # empty: its client dropped its queue, and what the fetch took would be lost.
        consumer.seeks = max(consumer.seeks, cmd.seeks)
        consumer.subscription.redeliver(consumer, cmd.positions)

    async def seek(self, cmd: Seek) -> None:
        consumer = self._consumer(cmd.consumer_id, cmd.session_id)
        sub = consumer.subscription
        # Before the seek wakes this consumer's waiting fetch, so that fetch answers empty.
        consumer.seeks = max(consumer.seeks, cmd.seeks)
        if cmd.position is not None:
            await sub.seek(min(cmd.position.entry_id, sub.log.next_entry_id), cmd.position.batch_index)
        else:
            assert cmd.publish_time is not None  # the command holds one of the two
            first = await self.store.first_entry_since(sub.log.topic_id, cmd.publish_time)
            await sub.seek(sub.log.next_entry_id if first is None else first)

    async def last_message_id(self, consumer_id: int, session_id: str) -> LastMessage:
        consumer = self._consumer(consumer_id, session_id)
        plog = consumer.subscription.log
        mark_delete = max(consumer.subscription.cursor.mark_delete, 0)
        if consumer.read_compacted and plog.next_entry_id <= plog.compaction_horizon:
            # Everything stored is below the horizon: the last message such a consumer
            # gets is the view's (the log's may have been compacted away), as Pulsar
            # answers a readCompacted consumer.
            found = await plog.last_compacted()
            if found is None:
                return LastMessage(plog.partition_index, mark_delete, None)
            entry = await plog.read_one_compacted(found[0])
            return LastMessage(plog.partition_index, mark_delete, found[0],
                               entry.num_messages if entry is not None else found[1] + 1, found[1])
        last = await plog.last_entry()
        return LastMessage(plog.partition_index, mark_delete,
                           None if last is None else last.entry_id, 0 if last is None else last.num_messages)

    async def close_consumer(self, cmd: CloseConsumer) -> None:
        consumer = self.consumers.get(cmd.consumer_id)
        if consumer is None or not _mine(consumer, (cmd.session_id,)):
            return
        sub = consumer.subscription
        if cmd.unsubscribe:  # a revoke since it subscribed counts (after the cache delay)
            await self.authz.require(sub.log.name, CONSUME, sub.name)
        if cmd.unsubscribe and len(sub.consumers) > 1:
            raise NotAllowedError(f"subscription {sub.name!r} has other consumers; close them first")
        self._drop_consumer(consumer, keep_reader=cmd.keep_reader and not cmd.unsubscribe)
        if cmd.unsubscribe and sub.durable:
            await sub.log.lease_checked("unsubscribing", self.store.delete_subscription(
                sub.log.topic_id, sub.log.epoch, sub.name))
            sub.log.subscriptions.remove(sub.name, sub)

    def _drop_consumer(self, consumer: Consumer, keep_reader: bool = False) -> None:
        consumer.closed = True
        self.consumers.pop(consumer.consumer_id, None)
        sub = consumer.subscription
        sub.remove_consumer(consumer)
        if not sub.durable and not sub.consumers:
            if keep_reader:
                self.kept_readers[sub] = time.monotonic() + self.settings.session_timeout_ms / 1000
            else:
                sub.log.subscriptions.remove(sub.name, sub)
        if session := self.sessions.sessions.get(consumer.session_id):
            session.consumers.discard(consumer.consumer_id)

    # ---------------------------------------------------------------- admin views

    def topic_stats(self, plog: PartitionLog) -> dict:
        subscriptions = {name: sub.stats() for name, sub in plog.subscriptions.items()}
        now = time.monotonic()
        rate_in, throughput_in = plog.rate_in.rates(now)
        rate_out, throughput_out = plog.rate_out.rates(now)
        return {
            "msgRateIn": rate_in,
            "msgThroughputIn": throughput_in,
            "msgRateOut": rate_out,
            "msgThroughputOut": throughput_out,
            "bytesOutCounter": plog.bytes_out,
            "terminatedAtEntry": plog.terminated_entry,
            "topic": plog.name.full,
            "ownerBroker": self.broker_id,
            "ownerEpoch": plog.epoch,
            "msgInCounter": plog.msg_in,
            "bytesInCounter": plog.bytes_in,
            "msgOutCounter": plog.msg_out,
            "lastEntryId": plog.next_entry_id - 1,
            "firstEntryId": plog.first_entry_id,
            "backlogQuotaExceeded": plog.quota.blocked,
            "deduplicationEnabled": plog.dedup,
            "accessMode": plog.access.access_mode,
            "exclusiveProducer": (plog.access.producers[plog.access.exclusive][1]
                                  if plog.access.exclusive is not None else None),
            "topicEpoch": plog.access.topic_epoch,
            "waitingProducers": list(plog.access.waiters),
            "publishers": [
                {"producerName": p.name, "producerId": p.producer_id,
                 "accessMode": ACCESS_MODES.get(p.access_mode, "Shared"),
                 "msgInCounter": p.msg_in, "bytesInCounter": p.bytes_in, "connectedSince": p.created_at}
                for p in plog.producers.values()
            ],
            "subscriptions": subscriptions,
        }
