"""``magnetar.asyncio``: the client API with coroutines, same names as the sync API.

    client = magnetar.asyncio.Client("http://localhost:8080")
    producer = await client.create_producer("orders")
    await producer.send(b"hello")
"""

from __future__ import annotations

from magnetar_protocol.errors import *  # noqa: F401,F403 - the one error hierarchy

from magnetar._consumer import Consumer
from magnetar._core import Core
from magnetar._message import Message
from magnetar._partitioned import Producer
from magnetar._transaction import Transaction, open_transaction
from magnetar._transport import Transport
from magnetar._types import (
    ConsumerType,
    InitialPosition,
    MessageId,
    ProducerAccessMode,
    Result,
    TransactionState,
    TxnID,
)

__all__ = ["Client", "Producer", "Consumer", "Reader", "Message", "MessageId", "Transaction", "TxnID",
           "ConsumerType", "InitialPosition", "ProducerAccessMode", "Result", "TransactionState"]

Reader = Consumer


class Client:
    def __init__(self, service_url: str, transaction_key: str | None = None, auth_token: str | None = None,
                 operation_timeout_seconds: float = 30, transport: Transport | None = None):
        self.transaction_key = transaction_key
        self.core = Core(service_url, transport or Transport(auth_token), operation_timeout_seconds)
        self._closeables: list = []

    async def create_producer(self, topic: str, producer_name: str | None = None,
                              initial_sequence_id: int | None = None,
                              access_mode: ProducerAccessMode = ProducerAccessMode.Shared,
                              batching_enabled: bool = True, send_timeout_millis: int = 30000,
                              batching_max_messages: int = 1000,
                              batching_max_allowed_size_in_bytes: int = 128 * 1024,
                              batching_max_publish_delay_ms: float = 1, max_pending_messages: int = 1000,
                              block_if_queue_full: bool = True) -> Producer:
        full, partitions = await self.core.partitions(topic)
        producer = Producer(self.core, full, partitions, {
            "producer_name": producer_name, "initial_sequence_id": initial_sequence_id,
            "access_mode": ProducerAccessMode(access_mode), "batching": batching_enabled,
            "send_timeout_s": send_timeout_millis / 1000, "max_messages": batching_max_messages,
            "max_bytes": batching_max_allowed_size_in_bytes, "delay_s": batching_max_publish_delay_ms / 1000,
            "max_pending": max_pending_messages,
        })
        await producer.start()
        self._closeables.append(producer)
        return producer

    async def subscribe(self, topic: str, subscription_name: str,
                        consumer_type: ConsumerType = ConsumerType.Exclusive,
                        initial_position: InitialPosition = InitialPosition.Latest,
                        consumer_name: str | None = None, receiver_queue_size: int = 1000,
                        negative_ack_redelivery_delay_ms: int = 60000, priority_level: int = 0,
                        _threaded: bool = False) -> Consumer:
        if not subscription_name:
            raise ValueError("subscription_name is required")
        full, partitions = await self.core.partitions(topic)
        options = {"subscription": subscription_name, "consumer_type": ConsumerType(consumer_type),
                   "initial_position": InitialPosition(initial_position), "durable": True,
                   "receiver_queue_size": max(receiver_queue_size, 1), "priority_level": priority_level,
                   "nack_delay_ms": negative_ack_redelivery_delay_ms}
        if consumer_name:
            options["consumer_name"] = consumer_name
        consumer = await Consumer(self.core, full, partitions, options, _threaded).start()
        self._closeables.append(consumer)
        return consumer

    async def create_reader(self, topic: str, start_message_id: MessageId, reader_name: str | None = None,
                            receiver_queue_size: int = 1000, start_message_id_inclusive: bool = False,
                            _threaded: bool = False) -> Consumer:
        full, partitions = await self.core.partitions(topic)
        options = {"subscription": reader_name or "", "consumer_type": ConsumerType.Exclusive,
                   "initial_position": InitialPosition.Earliest, "durable": False, "start": start_message_id,
                   "start_inclusive": start_message_id_inclusive, "receiver_queue_size": max(receiver_queue_size, 1),
                   "priority_level": 0, "nack_delay_ms": 0}
        reader = await Consumer(self.core, full, partitions, options, _threaded).start()
        self._closeables.append(reader)
        return reader

    async def new_transaction(self, timeout_ms: int = 60000) -> Transaction:
        return await open_transaction(self.core, timeout_ms)

    async def close(self) -> None:
        for obj in reversed(self._closeables):
            try:
                await obj.close()
            except Exception:  # closing must reach every object
                pass
        await self.core.close()
