"""Component tests: the broker's core built in this process against the real PostgreSQL
of the ``database_url`` fixture (a fresh migrated database per test), no HTTP, no other
process, no stand-ins.  A partition, its subscriptions and a hosted coordinator are the
production classes; a test drives them through the service's own entry points, so most
broker behaviour is checked in a second instead of through a cluster of processes."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from magnetar_broker.commands import (
    Ack,
    CloseConsumer,
    CreateProducer,
    Fetch,
    Position,
    Redeliver,
    Seek,
    Subscribe,
)
from magnetar_broker.partition.log import PartitionLog
from magnetar_broker.partition.sends import Batch, Sent
from magnetar_broker.producers import ProducerCreated
from magnetar_broker.service import BrokerService
from magnetar_broker.settings import BrokerSettings
from magnetar_broker.store import BrokerStore
from magnetar_broker.txnend import LocalEnds
from magnetar_coordinator.service import CoordinatorService
from magnetar_coordinator.settings import CoordinatorSettings
from magnetar_coordinator.store import CoordinatorStore
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.topics import TopicName
from magnetar_protocol.txnid import TxnID
from magnetar_storage.db import create_pool

BROKER_URL = "http://broker.component:8080"
WHOLE = -1  # a position's batch index: the whole entry


def batch(*payloads: bytes, first_seq: int = 0) -> tuple[bytes, int, int, int]:
    """A serialized MessageBatch of ``payloads`` numbered from ``first_seq``:
    (bytes, messages, lowest sequence id, highest sequence id)."""
    return messages_batch([pb.SingleMessage(payload=p) for p in payloads], first_seq)


def messages_batch(messages: list[pb.SingleMessage], first_seq: int = 0) -> tuple[bytes, int, int, int]:
    """``batch`` of whole messages (keys, properties), numbered from ``first_seq``."""
    for i, m in enumerate(messages):
        m.sequence_id = first_seq + i
    return (pb.MessageBatch(messages=messages).SerializeToString(), len(messages), first_seq,
            first_seq + len(messages) - 1)


def payloads(entries: list[pb.DeliveredEntry]) -> list[bytes]:
    """The messages delivered, in order: a whole entry's, or its listed indices'."""
    out = []
    for e in entries:
        messages = pb.MessageBatch.FromString(e.batch).messages
        out += [messages[i].payload for i in (e.indices or range(e.num_messages))]
    return out


def counts(entries: list[pb.DeliveredEntry]) -> list[int]:
    """The redelivery count of each message delivered, in ``payloads``' order."""
    out = []
    for e in entries:
        n = len(e.indices) or e.num_messages
        out += list(e.redelivery_counts) or [0] * n
    return out


def at(entry_id: int, batch_index: int = WHOLE) -> Position:
    return Position(entry_id, batch_index)


@dataclass
class Broker:
    """A BrokerService in this process (its background loops not started: a test calls
    what it needs), with helpers that speak its domain commands as one client session."""

    service: BrokerService
    session: str = ""
    _seq: itertools.count = field(default_factory=itertools.count)

    async def another_session(self, client_name: str = "component-2") -> Broker:
        """The same broker as another client (a session of its own)."""
        return Broker(self.service, (await self.service.open_session(client_name)).session_id)

    async def partition(self, topic: str) -> PartitionLog:
        """The partition, owned and loaded by this broker."""
        name = TopicName.parse(topic)
        broker_id, _ = await self.service.ownership.lookup(name)
        assert broker_id == self.service.broker_id
        return await self.service.ownership.get_log(name)

    async def _look_up(self, topic: str) -> None:
        """What a client does before it talks to a partition: a lookup, which assigns an
        unowned partition (to this broker, the only live one unless a test made more)."""
        await self.service.ownership.lookup(TopicName.parse(topic))

    async def take_over(self, topic: str) -> PartitionLog:
        """Take the partition's lease from its owner, as a lookup takes a dead owner's
        (the compare-and-set on the lease epoch), and load it here.  The former owner is
        not told: it learns from its next write, or its heartbeat."""
        name = TopicName.parse(topic)
        store = self.service.store
        topic_id = await self.service.ownership.topic_id(name, create=True)
        owner = await store.lookup_owner(topic_id, self.service.ownership.ttl_s)
        assert owner is not None
        assert await store.assign_owner(topic_id, self.service.broker_id, owner.epoch) == owner.epoch + 1
        return await self.partition(topic)

    async def create_producer(self, topic: str, name: str = "", access_mode: int = pb.ACCESS_SHARED,
                              topic_epoch: int | None = None, wait_ms: int = 0,
                              client_producer_id: int = 0) -> ProducerCreated:
        await self._look_up(topic)
        return await self.service.create_producer(CreateProducer(
            session_id=self.session, topic=topic, name=name, access_mode=access_mode, topic_epoch=topic_epoch,
            wait_ms=wait_ms, client_producer_id=client_producer_id))

    async def producer(self, topic: str, name: str = "", access_mode: int = pb.ACCESS_SHARED) -> int:
        created = await self.create_producer(topic, name, access_mode)
        assert created.producer is not None
        return created.producer.producer_id

    async def send(self, producer_id: int, *payloads: bytes, first_seq: int = 0,
                   txn: pb.TxnId | None = None) -> Sent:
        return await self.send_batch(producer_id, batch(*payloads, first_seq=first_seq), txn=txn)

    async def send_messages(self, producer_id: int, messages: list[pb.SingleMessage], first_seq: int = 0) -> Sent:
        """A batch of whole messages (keys, ordering keys)."""
        return await self.send_batch(producer_id, messages_batch(messages, first_seq))

    async def send_batch(self, producer_id: int, built: tuple[bytes, int, int, int],
                         txn: pb.TxnId | None = None) -> Sent:
        data, n, lowest, highest = built
        [result] = await self.service.publish(self.session, [Batch(
            producer_id=producer_id, payload=data, num_messages=n, sequence_id=lowest, highest_sequence_id=highest,
            txn=None if txn is None else TxnID.from_wire(txn))])
        if isinstance(result, Exception):
            raise result
        return result

    async def subscribe(self, topic: str, subscription: str, sub_type: int = pb.SUB_EXCLUSIVE,
                        earliest: bool = True, consumer_name: str = "", priority: int = 0) -> int:
        await self._look_up(topic)
        consumer = await self.service.subscribe(Subscribe(
            session_id=self.session, topic=topic, subscription=subscription, sub_type=sub_type,
            durable=True, earliest=earliest, consumer_name=consumer_name, priority=priority))
        return consumer.consumer_id

    async def reader(self, topic: str, start: Position | None = None, inclusive: bool = False) -> int:
        """A reader (a non-durable subscription) from ``start`` (None: after the last entry)."""
        await self._look_up(topic)
        consumer = await self.service.subscribe(Subscribe(
            session_id=self.session, topic=topic, subscription="", sub_type=pb.SUB_EXCLUSIVE, durable=False,
            start=start, start_inclusive=inclusive))
        return consumer.consumer_id

    async def fetch(self, consumer_id: int, max_messages: int = 100, wait_ms: int = 0) -> list[pb.DeliveredEntry]:
        fetched = await self.service.fetch(Fetch(consumer_id=consumer_id, session_id=self.session,
                                                 max_messages=max_messages, wait_ms=wait_ms))
        return list(fetched.entries)

    async def receive(self, consumer_id: int, max_messages: int = 100) -> list[bytes]:
        """One fetch: the messages' payloads."""
        return payloads(await self.fetch(consumer_id, max_messages))

    async def ack(self, consumer_id: int, *positions: int | Position, txn: pb.TxnId | None = None,
                  cumulative: bool = False) -> None:
        """Acknowledge entries (an int: the whole entry) or positions (``at(entry, index)``)."""
        await self.service.ack(Ack(consumer_id=consumer_id, session_id=self.session,
                                   positions=tuple(p if isinstance(p, Position) else Position(p) for p in positions),
                                   cumulative=cumulative, txn=None if txn is None else TxnID.from_wire(txn)))

    async def nack(self, consumer_id: int, *positions: int | Position) -> None:
        """A negative ack (none listed: everything the consumer holds unacknowledged)."""
        await self.service.redeliver(Redeliver(
            consumer_id=consumer_id, session_id=self.session,
            positions=tuple(p if isinstance(p, Position) else Position(p) for p in positions)))

    async def seek(self, consumer_id: int, position: Position | None = None,
                   publish_time: int | None = None) -> None:
        await self.service.seek(Seek(consumer_id=consumer_id, session_id=self.session, position=position,
                                     publish_time=publish_time))

    async def close(self, consumer_id: int, unsubscribe: bool = False) -> None:
        await self.service.close_consumer(CloseConsumer(consumer_id=consumer_id, session_id=self.session,
                                                        unsubscribe=unsubscribe))


@pytest.fixture
async def pool(database_url):
    pool = await create_pool(database_url, max_size=8)
    yield pool
    await pool.close()


MakeBroker = Callable[..., Awaitable[Broker]]


@pytest.fixture
async def make_broker(pool, database_url) -> AsyncIterator[MakeBroker]:
    """``await make_broker(broker_id=..., **settings)``: a broker of its own id and
    settings (BrokerSettings' field names) on the test's database, e.g. a second broker
    that takes a partition over, or one with a lifecycle setting shortened."""
    made: list[Broker] = []

    async def make(broker_id: str = "b-component", **settings: Any) -> Broker:
        url = BROKER_URL if broker_id == "b-component" else f"http://{broker_id}.component:8080"
        resolved = BrokerSettings(database_url=database_url, broker_id=broker_id, advertised_url=url, **settings)
        service = BrokerService(BrokerStore(pool, resolved.resolved_broker_id), resolved)
        await service.store.register(url)
        made.append(Broker(service, (await service.open_session("component")).session_id))
        return made[-1]

    yield make
    for made_broker in made:
        for plog in list(made_broker.service.ownership.logs.values()):
            plog.lose("test over")


@pytest.fixture
async def broker(make_broker) -> Broker:
    return await make_broker()


@pytest.fixture
async def coordinator(broker, pool, database_url) -> AsyncIterator[CoordinatorService]:
    """A coordinator (TCID 0) hosted by ``broker``: the broker's LocalEnds behind its
    LocalParticipants protocol, so a transaction of the broker's partitions ends in one phase."""
    settings = CoordinatorSettings(database_url=database_url, coordinator_id=0)
    store = CoordinatorStore(pool, 0, "component")
    service = CoordinatorService(store, settings, local=LocalEnds(broker.service.ownership))
    await service.claim_or_heartbeat()
    assert service.ready
    yield service
    await service.stop()


async def new_txn(coordinator: CoordinatorService, timeout_ms: int = 60000) -> pb.TxnId:
    return (await coordinator.new_txn(pb.NewTxnRequest(timeout_ms=timeout_ms))).txn
