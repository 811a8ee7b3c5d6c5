"""Component tests: the broker's core built in this process against the real PostgreSQL
of the ``database_url`` fixture (a fresh migrated database per test), no HTTP, no other
process, no stand-ins.  A partition, its subscriptions and a hosted coordinator are the
production classes; a test drives them through the service's own entry points, so most
broker behaviour is checked in a second instead of through a cluster of processes."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from magnetar_broker.commands import Ack, CreateProducer, Fetch, Position, Subscribe
from magnetar_broker.partition.log import PartitionLog
from magnetar_broker.partition.sends import Batch, Sent
from magnetar_broker.service import BrokerService
from magnetar_broker.settings import BrokerSettings
from magnetar_broker.store import BrokerStore
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.topics import TopicName
from magnetar_protocol.txnid import TxnID
from magnetar_storage.db import create_pool

BROKER_URL = "http://broker.component:8080"


def batch(*payloads: bytes, first_seq: int = 0) -> tuple[bytes, int, int, int]:
    """A serialized MessageBatch of ``payloads`` numbered from ``first_seq``:
    (bytes, messages, lowest sequence id, highest sequence id)."""
    messages = [pb.SingleMessage(payload=p, sequence_id=first_seq + i) for i, p in enumerate(payloads)]
    return (pb.MessageBatch(messages=messages).SerializeToString(), len(messages), first_seq,
            first_seq + len(messages) - 1)


@dataclass
class Broker:
    """A BrokerService in this process (its background loops not started: a test calls
    what it needs), with helpers that speak its protobuf API."""

    service: BrokerService
    session: str = ""
    _seq: itertools.count = field(default_factory=itertools.count)

    async def partition(self, topic: str) -> PartitionLog:
        """The partition, owned and loaded by this broker."""
        name = TopicName.parse(topic)
        broker_id, _ = await self.service.ownership.lookup(name)
        assert broker_id == self.service.broker_id
        return await self.service.ownership.get_log(name)

    async def producer(self, topic: str, name: str = "") -> int:
        await self.partition(topic)
        created = await self.service.create_producer(CreateProducer(session_id=self.session, topic=topic, name=name))
        assert created.producer is not None
        return created.producer.producer_id

    async def send(self, producer_id: int, *payloads: bytes, first_seq: int = 0,
                   txn: pb.TxnId | None = None) -> Sent:
        data, n, lowest, highest = batch(*payloads, first_seq=first_seq)
        [result] = await self.service.publish(self.session, [Batch(
            producer_id=producer_id, payload=data, num_messages=n, sequence_id=lowest, highest_sequence_id=highest,
            txn=None if txn is None else TxnID.from_wire(txn))])
        if isinstance(result, Exception):
            raise result
        return result

    async def subscribe(self, topic: str, subscription: str, sub_type: int = pb.SUB_EXCLUSIVE,
                        earliest: bool = True) -> int:
        await self.partition(topic)
        consumer = await self.service.subscribe(Subscribe(
            session_id=self.session, topic=topic, subscription=subscription, sub_type=sub_type,
            durable=True, earliest=earliest))
        return consumer.consumer_id

    async def fetch(self, consumer_id: int, max_messages: int = 100) -> list[pb.DeliveredEntry]:
        fetched = await self.service.fetch(Fetch(consumer_id=consumer_id, session_id=self.session,
                                                 max_messages=max_messages))
        return list(fetched.entries)

    async def ack(self, consumer_id: int, *entry_ids: int, txn: pb.TxnId | None = None,
                  cumulative: bool = False) -> None:
        await self.service.ack(Ack(consumer_id=consumer_id, session_id=self.session,
                                   positions=tuple(Position(e) for e in entry_ids), cumulative=cumulative,
                                   txn=None if txn is None else TxnID.from_wire(txn)))


@pytest.fixture
async def pool(database_url):
    pool = await create_pool(database_url, max_size=8)
    yield pool
    await pool.close()


@pytest.fixture
async def broker(pool, database_url) -> AsyncIterator[Broker]:
    settings = BrokerSettings(database_url=database_url, broker_id="b-component", advertised_url=BROKER_URL)
    service = BrokerService(BrokerStore(pool, settings.resolved_broker_id), settings)
    await service.store.register(BROKER_URL)
    session = await service.open_session("component")
    yield Broker(service, session.session_id)
    for plog in list(service.ownership.logs.values()):
        plog.lose("test over")
