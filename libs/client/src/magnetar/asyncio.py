"""``magnetar.asyncio``: the client API as coroutines, with the sync API's names.

    import magnetar.asyncio as magnetar_aio

    client = magnetar_aio.Client("http://localhost:8080")
    producer = await client.create_producer("orders")
    await producer.send(b"hello")
    consumer = await client.subscribe("orders", "audit")
    msg = await consumer.receive()
    await consumer.acknowledge(msg)
    await client.close()

A client belongs to the event loop that first uses it.  ``Producer.send_async`` and
``Consumer.negative_acknowledge`` are plain methods (they never wait).
"""

from __future__ import annotations

from typing import Any, TypeVar

from magnetar import _errors
from magnetar._consumer import Consumer, chunk_options
from magnetar._core import ONE_REQUEST_MAX_BYTES, Core, check_listener_name
from magnetar._errors import *  # noqa: F403 (every error class; _errors.__all__)
from magnetar._errors import AlreadyClosed, TransactionCoordinatorNotFoundError
from magnetar._keys import KeyConnection
from magnetar._message import Message
from magnetar._producer import Producer, producer_options
from magnetar._reader import Reader
from magnetar._retryletter import RetryLetters
from magnetar._transaction import Transaction, check_timeout, open_transaction
from magnetar._transport import Transport
from magnetar._types import (
    ConsumerDeadLetterPolicy,
    ConsumerType,
    InitialPosition,
    MessageId,
    MultiplierRedeliveryBackoff,
    PartitionsRoutingMode,
    ProducerAccessMode,
    Result,
    TransactionState,
    TxnID,
)
from magnetar._values import check_schema
from magnetar.schema import Schema
from magnetar_protocol.tlsctx import client_context
from magnetar_protocol.topics import TopicName

Tracked = TypeVar("Tracked", Producer, Consumer)  # what a client closes with itself

__all__ = ["Client", "Producer", "Consumer", "Reader", "Message", "MessageId", "Transaction",
           "TxnID", "ConsumerType", "InitialPosition", "ProducerAccessMode",
           "MultiplierRedeliveryBackoff", "ConsumerDeadLetterPolicy",
           "PartitionsRoutingMode", "Result", "TransactionState", "Transport"]

__all__ += _errors.__all__  # the one hierarchy of magnetar_protocol.errors, plus two


def check_ack_timeout(timeout_ms: int | None, tick_ms: int) -> int:
    """The ack timeout in ms (0: off), or ValueError.  At least a second, as Pulsar's Java
    client requires (the C++ one, under the Python wheel, 10 s); the tick at least 100 ms."""
    if timeout_ms is None or timeout_ms == 0:
        return 0
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int) or timeout_ms < 1000:
        raise ValueError(f"unacked_messages_timeout_ms must be at least 1000 (or None/0: off), got {timeout_ms!r}")
    if isinstance(tick_ms, bool) or not isinstance(tick_ms, int) or tick_ms < 100:
        raise ValueError(f"tick_duration_ms must be at least 100, got {tick_ms!r}")
    return timeout_ms


class Client:
    """Connects to a Magnetar cluster through any of its brokers; ``service_url`` may
    list several, comma-separated, tried in turn for discovery.

    ``connection_timeout_ms`` bounds each TCP connect (pulsar-client's option): an address
    that no longer answers (a deleted pod's) is given up and looked up again after it,
    not after the operation timeout.  ``listener_name`` picks which of the services'
    advertised listeners lookups answer with (pulsar-client's option; e.g. "external"
    from outside a Kubernetes cluster; docs/client.md)."""

    def __init__(self, service_url: str, transaction_key: str | None = None,
                 auth_token: str | None = None, operation_timeout_seconds: float = 30,
                 connection_pool_size: int = 64, transport: Transport | None = None, *,
                 connection_timeout_ms: int = 5000, listener_name: str | None = None,
                 partitions_update_interval_seconds: float = 60,
                 tls_trust_certs_file_path: str | None = None, tls_validate_hostname: bool = True,
                 tls_certificate_file_path: str | None = None,
                 tls_private_key_file_path: str | None = None,
                 tls_allow_insecure_connection: bool = False,
                 one_request_txn_max_bytes: int = ONE_REQUEST_MAX_BYTES) -> None:
        if operation_timeout_seconds <= 0:
            raise ValueError("operation_timeout_seconds must be > 0")
        if isinstance(partitions_update_interval_seconds, bool) \
                or not isinstance(partitions_update_interval_seconds, (int, float)) \
                or not 0 <= partitions_update_interval_seconds < float("inf"):
            raise ValueError(f"partitions_update_interval_seconds must be a number of seconds >= 0 "
                             f"(0: never look for added partitions), got "
                             f"{partitions_update_interval_seconds!r}")
        if isinstance(connection_timeout_ms, bool) or not isinstance(connection_timeout_ms, int) \
                or connection_timeout_ms <= 0:
            raise ValueError(f"connection_timeout_ms must be a positive number of milliseconds, "
                             f"got {connection_timeout_ms!r}")
        self.transaction_key = transaction_key
        # https:// service URLs: verified against tls_trust_certs_file_path (else the
        # system's CAs) and by name; a client certificate for mutual TLS (pulsar-client's
        # names; unlike its default, the name is checked unless told not to).
        tls_given = (tls_trust_certs_file_path or tls_certificate_file_path
                     or tls_allow_insecure_connection or not tls_validate_hostname)
        ssl = client_context(tls_trust_certs_file_path, tls_certificate_file_path,
                             tls_private_key_file_path, tls_validate_hostname,
                             tls_allow_insecure_connection) if tls_given else None
        transport = transport or Transport(auth_token, connection_pool_size,
                                           connection_timeout_ms / 1000, ssl=ssl)
        if isinstance(one_request_txn_max_bytes, bool) or not isinstance(one_request_txn_max_bytes, int) \
                or one_request_txn_max_bytes < 0:
            raise ValueError(f"one_request_txn_max_bytes must be a number of bytes >= 0 (0: every "
                             f"transaction the classic way), got {one_request_txn_max_bytes!r}")
        self.core = Core(service_url, transport, operation_timeout_seconds,
                         listener_name=check_listener_name(listener_name),
                         partitions_update_interval_s=partitions_update_interval_seconds,
                         one_request_max_bytes=one_request_txn_max_bytes)
        # A keyed client (seed 000): its transactions fence an older holder of the key.
        self._key = KeyConnection(self.core, transaction_key) if transaction_key is not None else None
        self._open: set[Any] = set()  # producers, consumers and readers to close with the client

    def _check_open(self) -> None:
        if self.core.closed:
            raise AlreadyClosed("the client is closed")

    def _track(self, obj: Tracked) -> Tracked:
        self._open.add(obj)
        obj.on_close = self._open.discard  # forgotten once its owner closes it
        return obj

    async def create_producer(self, topic: str, producer_name: str | None = None,
                              initial_sequence_id: int | None = None,
                              access_mode: ProducerAccessMode = ProducerAccessMode.Shared,
                              batching_enabled: bool = True, send_timeout_millis: int = 30000,
                              batching_max_messages: int = 1000,
                              batching_max_allowed_size_in_bytes: int = 128 * 1024,
                              batching_max_publish_delay_ms: float = 1,
                              max_pending_messages: int = 1000, block_if_queue_full: bool = True,
                              message_routing_mode: PartitionsRoutingMode =
                              PartitionsRoutingMode.RoundRobinDistribution,
                              chunking_enabled: bool = False,
                              schema: Schema | None = None) -> Producer:
        """A producer on ``topic`` (every partition of a partitioned topic).  Options and
        defaults as pulsar-client's; ``send_timeout_millis=0`` means no timeout.
        ``chunking_enabled`` (with ``batching_enabled=False``, as Pulsar requires): a
        message larger than the broker's limit goes in chunks, Pulsar's format.
        ``schema``: what ``send`` takes (a ``magnetar.schema`` schema; default bytes),
        registered with the topic (IncompatibleSchema when its strategy refuses it)."""
        self._check_open()
        options = producer_options(
            producer_name, initial_sequence_id, access_mode, batching_enabled, send_timeout_millis,
            batching_max_messages, batching_max_allowed_size_in_bytes,
            batching_max_publish_delay_ms, max_pending_messages, block_if_queue_full,
            message_routing_mode, chunking_enabled, schema)
        full, partitions = await self.core.partitions(topic)
        producer = await Producer(self.core, full, partitions, options).start()
        return self._track(producer)

    async def subscribe(self, topic: str, subscription_name: str,
                        consumer_type: ConsumerType = ConsumerType.Exclusive,
                        initial_position: InitialPosition = InitialPosition.Latest,
                        consumer_name: str | None = None, receiver_queue_size: int = 1000,
                        negative_ack_redelivery_delay_ms: int = 60000, priority_level: int = 0,
                        unacked_messages_timeout_ms: int | None = None, tick_duration_ms: int = 1000,
                        negative_ack_redelivery_backoff: MultiplierRedeliveryBackoff | None = None,
                        dead_letter_policy: ConsumerDeadLetterPolicy | None = None,
                        enable_retry: bool = False,
                        max_pending_chunked_message: int = 10,
                        auto_ack_oldest_chunked_message_on_queue_full: bool = False,
                        expire_time_of_incomplete_chunked_message_ms: int = 60000,
                        is_read_compacted: bool = False, schema: Schema | None = None,
                        _threaded: bool = False) -> Consumer:
        """A consumer of ``subscription_name`` on ``topic`` (merging every partition).

        ``unacked_messages_timeout_ms``: received messages not acknowledged within it are
        redelivered (None or 0: never; at least 1000), checked every ``tick_duration_ms``
        (Pulsar's ack-timeout tick).  ``negative_ack_redelivery_backoff``: a
        ``MultiplierRedeliveryBackoff`` whose delay grows with the redelivery count, in
        place of the fixed ``negative_ack_redelivery_delay_ms``.  ``dead_letter_policy``:
        a ``ConsumerDeadLetterPolicy``; the broker moves a message redelivered more often
        than it allows to the dead-letter topic (docs/client.md).  ``enable_retry``
        (needs ``dead_letter_policy``): also consume the retry topic, for
        ``reconsume_later``.
        Chunked messages (pulsar-client's options): at most ``max_pending_chunked_message``
        incomplete at once, each for ``expire_time_of_incomplete_chunked_message_ms``.
        ``is_read_compacted``: the topic's compacted view, then what came after it
        (Exclusive and Failover only, as Pulsar: else NotAllowedError).  ``schema``: what
        ``msg.value()`` returns (a ``magnetar.schema`` schema; default bytes), checked
        against the topic's (IncompatibleSchema)."""
        self._check_open()
        if not subscription_name or not isinstance(subscription_name, str):
            raise ValueError("subscription_name is required")
        ack_timeout = check_ack_timeout(unacked_messages_timeout_ms, tick_duration_ms)
        if negative_ack_redelivery_backoff is not None \
                and not isinstance(negative_ack_redelivery_backoff, MultiplierRedeliveryBackoff):
            raise TypeError("negative_ack_redelivery_backoff must be a magnetar.MultiplierRedeliveryBackoff")
        if dead_letter_policy is not None and not isinstance(dead_letter_policy, ConsumerDeadLetterPolicy):
            raise TypeError("dead_letter_policy must be a magnetar.ConsumerDeadLetterPolicy")
        if enable_retry and dead_letter_policy is None:
            raise ValueError("enable_retry needs a dead_letter_policy (its max_redeliver_count "
                             "bounds reconsume_later)")
        full, partitions = await self.core.partitions(topic)
        options = {"subscription": subscription_name, "consumer_type": ConsumerType(consumer_type),
                   "initial_position": InitialPosition(initial_position), "durable": True,
                   "consumer_name": consumer_name or "",
                   "receiver_queue_size": max(receiver_queue_size, 1),
                   "priority_level": priority_level,
                   "nack_delay_ms": max(negative_ack_redelivery_delay_ms, 0),
                   "nack_backoff": negative_ack_redelivery_backoff,
                   "ack_timeout_ms": ack_timeout, "tick_ms": tick_duration_ms,
                   "dead_letter_policy": dead_letter_policy}
        options |= chunk_options(max_pending_chunked_message, auto_ack_oldest_chunked_message_on_queue_full,
                                 expire_time_of_incomplete_chunked_message_ms)
        options["read_compacted"] = bool(is_read_compacted)
        options["schema"] = check_schema(schema)
        consumer = await Consumer(self.core, full, partitions, options, _threaded).start()
        if enable_retry:
            assert dead_letter_policy is not None
            letters = RetryLetters(self.core, full, subscription_name, dead_letter_policy,
                                   lambda t, n, o: Consumer(self.core, t, n, o).start())
            try:
                retry_full, retry_partitions = await self.core.partitions(letters.retry_topic)
                await consumer.start_retry(retry_full, retry_partitions, letters)
            except BaseException:
                await consumer.close()
                raise
        return self._track(consumer)

    async def create_reader(self, topic: str, start_message_id: MessageId,
                            reader_name: str | None = None, receiver_queue_size: int = 1000,
                            start_message_id_inclusive: bool = False,
                            max_pending_chunked_message: int = 10,
                            expire_time_of_incomplete_chunked_message_ms: int = 60000,
                            is_read_compacted: bool = False, schema: Schema | None = None,
                            _threaded: bool = False) -> Reader:
        """A reader of ``topic`` from ``start_message_id`` (``MessageId.earliest``,
        ``MessageId.latest`` or a message's id), on a subscription that leaves no trace;
        ``schema`` as ``subscribe``'s."""
        self._check_open()
        if not isinstance(start_message_id, MessageId):
            raise TypeError("start_message_id must be a MessageId, e.g. MessageId.earliest")
        full, partitions = await self.core.partitions(topic)
        special = start_message_id in (MessageId.earliest, MessageId.latest)
        if partitions and not special:
            raise ValueError("a reader of a partitioned topic starts at MessageId.earliest or "
                             "MessageId.latest; read one partition to start at a message id")
        options = {"subscription": reader_name or "", "consumer_type": ConsumerType.Exclusive,
                   "initial_position": InitialPosition.Earliest, "durable": False,
                   "consumer_name": reader_name or "", "start": start_message_id,
                   "start_inclusive": bool(start_message_id_inclusive),
                   "receiver_queue_size": max(receiver_queue_size, 1), "priority_level": 0,
                   "nack_delay_ms": 0}
        options |= chunk_options(max_pending_chunked_message, False,
                                 expire_time_of_incomplete_chunked_message_ms)
        options["read_compacted"] = bool(is_read_compacted)
        options["schema"] = check_schema(schema)
        consumer = await Consumer(self.core, full, partitions, options, _threaded).start()
        return Reader(self._track(consumer))

    async def new_transaction(self, timeout_ms: int = 60000) -> Transaction:
        """Open a transaction on one of the coordinators.  A keyed client's first call
        connects its key (fencing the key's previous holder); a keyed client has at most
        one open transaction (NotAllowedError)."""
        self._check_open()
        if self._key is not None:
            return await self._key.open_transaction(timeout_ms)
        return await open_transaction(self.core, timeout_ms)

    async def transaction_from_id(self, txn_id: TxnID, timeout_ms: int = 60000) -> Transaction:
        """The open transaction ``txn_id`` that another client (another process) began,
        to send and acknowledge in it, or to commit or abort it (a Spark job's driver
        opens one transaction, its executors send into it).  Nothing is asked of the
        coordinator here: an operation on a transaction that ended raises then.
        ``timeout_ms`` is informational: the opener's timeout is the one that counts."""
        self._check_open()
        check_timeout(timeout_ms)
        if not (isinstance(txn_id, tuple) and len(txn_id) == 2
                and all(isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in txn_id)):
            raise TypeError(f"txn_id must be a TxnID(most_bits, least_bits), got {txn_id!r}")
        txn_id = TxnID(*txn_id)
        # The TxnID's most bits are the id of the coordinator that owns it.
        url = ((await self.core.coordinators()).get(txn_id.most_bits)
               or (await self.core.coordinators(fresh=True)).get(txn_id.most_bits))
        if url is None:
            raise TransactionCoordinatorNotFoundError(
                f"coordinator {txn_id.most_bits}, which owns transaction {txn_id}, is not running")
        # Another process's transaction: its sends go the classic way (one-request
        # commits carry the sends of the one client that commits).
        return Transaction(self.core, txn_id, url, timeout_ms, one_request=False)

    async def connect_transaction_key(self) -> int:
        """Connect this client's transaction key now (``new_transaction`` does it on
        first use) and return the epoch it holds; the key's previous holder is fenced
        when this returns."""
        self._check_open()
        if self._key is None:
            raise ValueError("this client has no transaction_key")
        return await self._key.connect(-1 if self._key.epoch < 0 else None)

    async def get_topic_partitions(self, topic: str) -> list[str]:
        """The partitions of ``topic`` (the topic itself when it is not partitioned)."""
        full, partitions = await self.core.partitions(topic)
        if not partitions:
            return [full]
        return [TopicName.parse(full).partition(i).full for i in range(partitions)]

    async def close(self) -> None:
        """Close every producer (flushing it), consumer (flushing acks) and reader, then
        the sessions."""
        if self.core.closed:
            return
        for obj in list(self._open):
            try:
                await obj.close()
            except Exception:  # closing must reach every object
                pass
        self._open.clear()
        await self.core.close()

    async def __aenter__(self) -> "Client":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
