"""The retry topic: ``reconsume_later(msg, delay)`` (Pulsar's ``reconsumeLater``).

A consumer subscribed with ``enable_retry=True`` also consumes its retry topic (default
``<topic>-<subscription>-RETRY``), merged into the same receiver queue.
``reconsume_later`` sends a copy of the message there, due after ``delay``, with
Pulsar's properties (``REAL_TOPIC``, ``ORIGIN_MESSAGE_ID``, ``RECONSUMETIMES`` raised,
``DELAY_TIME``), or, once ``RECONSUMETIMES`` passes the dead-letter policy's
``max_redeliver_count``, to the dead-letter topic; and acknowledges the original.
Unlike Pulsar's client (send, then ack: a crash in between duplicates the message), the
copy and the acknowledgement are one Magnetar transaction: both or neither.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta

from magnetar._message import Message
from magnetar._producer import Producer, producer_options
from magnetar._transaction import open_transaction
from magnetar._types import ConsumerDeadLetterPolicy, ConsumerType, InitialPosition

# Pulsar's property names (RetryMessageUtil).
REAL_TOPIC = "REAL_TOPIC"
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RECONSUMETIMES = "RECONSUMETIMES"
DELAY_TIME = "DELAY_TIME"
# The move's transaction: long enough for a send and an ack under load.
TXN_TIMEOUT_MS = 60_000


def retry_topic(topic: str, subscription: str, policy: ConsumerDeadLetterPolicy) -> str:
    return policy.retry_letter_topic or f"{topic}-{subscription}-RETRY"


def dlq_topic(topic: str, subscription: str, policy: ConsumerDeadLetterPolicy) -> str:
    return policy.dead_letter_topic or f"{topic}-{subscription}-DLQ"


def delay_ms(delay: timedelta | int) -> int:
    """``delay`` as ms (an int is ms already); negative is a ValueError."""
    if isinstance(delay, timedelta):
        ms = int(delay.total_seconds() * 1000)
    elif isinstance(delay, int) and not isinstance(delay, bool):
        ms = delay
    else:
        raise TypeError(f"delay must be a datetime.timedelta or ms as an int, not {type(delay).__name__}")
    if ms < 0:
        raise ValueError(f"delay must not be negative, got {ms} ms")
    return ms


def letter_properties(msg: Message, delay: int) -> tuple[dict[str, str], int]:
    """The copy's properties and its reconsume count.  ``REAL_TOPIC`` and
    ``ORIGIN_MESSAGE_ID`` name the first topic, kept through later retries (Pulsar's)."""
    props = dict(msg.properties())
    times = int(props.get(RECONSUMETIMES, "0")) + 1
    if REAL_TOPIC not in props:
        info = msg._info
        props[REAL_TOPIC] = info.topic
        origin = f"0:{info.entry_id}:{info.partition}"
        props[ORIGIN_MESSAGE_ID] = f"{origin}:{msg._index}" if info.size > 1 else origin
    props[RECONSUMETIMES] = str(times)
    props[DELAY_TIME] = str(delay)
    return props, times


class RetryLetters:
    """A consumer's retry and dead-letter producers (made on first use)."""

    def __init__(self, core, topic: str, subscription: str, policy: ConsumerDeadLetterPolicy,
                 open_consumer: Callable[[str, int, dict], Awaitable]) -> None:
        self.core = core
        self._open_consumer = open_consumer  # (topic, partitions, options) -> a started consumer
        self.policy = policy
        self.subscription = subscription
        self.retry_topic = retry_topic(topic, subscription, policy)
        self.dlq_topic = dlq_topic(topic, subscription, policy)
        self._producers: dict[str, Producer] = {}
        self._lock = asyncio.Lock()

    async def _producer(self, topic: str) -> Producer:
        async with self._lock:
            if topic not in self._producers:
                if topic == self.dlq_topic and self.policy.initial_subscription_name:
                    await self._initial_subscription()
                full, partitions = await self.core.partitions(topic)
                self._producers[topic] = await Producer(
                    self.core, full, partitions, producer_options(batching_enabled=False)).start()
            return self._producers[topic]

    async def _initial_subscription(self) -> None:
        """Created before the first dead letter, so it reads every one (Pulsar's)."""
        full, partitions = await self.core.partitions(self.dlq_topic)
        options = {"subscription": self.policy.initial_subscription_name,
                   "consumer_type": ConsumerType.Shared, "initial_position": InitialPosition.Earliest,
                   "durable": True, "consumer_name": "", "receiver_queue_size": 1,
                   "priority_level": 0, "nack_delay_ms": 0}
        consumer = await self._open_consumer(full, partitions, options)
        await consumer.close()

    async def reconsume_later(self, consumer, msg: Message, delay: timedelta | int) -> None:
        if type(msg) is not Message:
            raise TypeError(f"reconsume_later takes a received Message, not {type(msg).__name__}")
        ms = delay_ms(delay)
        props, times = letter_properties(msg, ms)
        dead = times > self.policy.max_redeliver_count
        producer = await self._producer(self.dlq_topic if dead else self.retry_topic)
        txn = await open_transaction(self.core, TXN_TIMEOUT_MS)
        try:
            raw = msg._msg
            await producer.send(
                msg.data(), props, partition_key=raw.partition_key if raw.HasField("partition_key") else None,
                event_timestamp=raw.event_time or None, txn=txn,
                ordering_key=raw.ordering_key if raw.HasField("ordering_key") else None,
                deliver_after=None if dead or not ms else timedelta(milliseconds=ms))
            await consumer.acknowledge(msg, txn=txn)
        except BaseException:
            await asyncio.shield(txn.abort())
            raise
        await txn.commit()

    async def close(self) -> None:
        await asyncio.gather(*(p.close() for p in self._producers.values()), return_exceptions=True)
