"""The sync API: each Client runs one asyncio event loop in a daemon thread, where the
``magnetar.asyncio`` objects do the work; calls hop there with
``run_coroutine_threadsafe``.  So a Client and its objects may be shared by threads.

Two paths skip the hop because they run per message: ``send_async`` queues into an
inbox drained by the loop in bulk (one wake-up for any number of messages), and
``receive``/``acknowledge`` use thread-safe queues directly.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections import deque
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any, TypeVar

from magnetar import asyncio as aio
from magnetar._batch import delivery_time, message_fields
from magnetar._core import ONE_REQUEST_MAX_BYTES
from magnetar._errors import AlreadyClosed
from magnetar._message import Message
from magnetar._producer import check_sequence_id
from magnetar._transport import Transport
from magnetar._types import MessageId, ProducerAccessMode, Result, TransactionState, TxnID

T = TypeVar("T")


class _Loop:
    """The client's event loop thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="magnetar-client",
                                       daemon=True)
        self.thread.start()
        self.closed = False

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result, here."""
        if self.closed:
            coro.close()
            raise AlreadyClosed("the client is closed")
        try:
            self.check_thread()
        except RuntimeError:
            coro.close()
            raise
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def check_thread(self) -> None:
        """Refuse to block the loop's own thread (a callback): it would deadlock."""
        if threading.current_thread() is self.thread:
            raise RuntimeError("a blocking magnetar call from a callback would deadlock the "
                               "client; use send_async or the magnetar.asyncio API there")

    def stop(self) -> None:
        self.closed = True
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class Client:
    """Connects to a Magnetar cluster through any of its brokers (``service_url`` may
    list several, comma-separated, tried in turn for discovery)."""

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
        # ``transport``: a stand-in for magnetar._transport.Transport (unit tests).
        self._client = aio.Client(service_url, transaction_key, auth_token,
                                  operation_timeout_seconds, connection_pool_size, transport,
                                  connection_timeout_ms=connection_timeout_ms,
                                  listener_name=listener_name,
                                  partitions_update_interval_seconds=partitions_update_interval_seconds,
                                  tls_trust_certs_file_path=tls_trust_certs_file_path,
                                  tls_validate_hostname=tls_validate_hostname,
                                  tls_certificate_file_path=tls_certificate_file_path,
                                  tls_private_key_file_path=tls_private_key_file_path,
                                  tls_allow_insecure_connection=tls_allow_insecure_connection,
                                  one_request_txn_max_bytes=one_request_txn_max_bytes)
        self._io = _Loop()

    @property
    def transaction_key(self) -> str | None:
        """The transaction key this client was made with, if any."""
        return self._client.transaction_key

    def create_producer(self, topic: str, producer_name: str | None = None,
                        initial_sequence_id: int | None = None,
                        access_mode: ProducerAccessMode = ProducerAccessMode.Shared,
                        batching_enabled: bool = True, send_timeout_millis: int = 30000,
                        **options: Any) -> "Producer":
        """A producer on ``topic``; every option of ``magnetar.asyncio.Client.create_producer``
        (batching_max_messages, max_pending_messages, block_if_queue_full, ...)."""
        return Producer(self._io, self._io.run(self._client.create_producer(
            topic, producer_name, initial_sequence_id, access_mode, batching_enabled,
            send_timeout_millis, **options)))

    def subscribe(self, topic: str, subscription_name: str, **options: Any) -> "Consumer":
        """A consumer; options as ``magnetar.asyncio.Client.subscribe`` (consumer_type,
        initial_position, consumer_name, receiver_queue_size, negative_ack_redelivery_delay_ms,
        negative_ack_redelivery_backoff, unacked_messages_timeout_ms, tick_duration_ms,
        dead_letter_policy, enable_retry)."""
        return Consumer(self._io, self._io.run(
            self._client.subscribe(topic, subscription_name, _threaded=True, **options)))

    def create_reader(self, topic: str, start_message_id: MessageId, **options: Any) -> "Reader":
        """A reader from ``start_message_id``; options as
        ``magnetar.asyncio.Client.create_reader``."""
        reader = self._io.run(self._client.create_reader(topic, start_message_id, _threaded=True,
                                                         **options))
        return Reader(self._io, reader._consumer)

    def new_transaction(self, timeout_ms: int = 60000) -> "Transaction":
        """Open a transaction; ``with client.new_transaction() as txn:`` commits it, or
        aborts it when the block raises."""
        if not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool) or timeout_ms <= 0:
            raise ValueError(f"transaction timeout must be a positive number of milliseconds, "
                             f"got {timeout_ms!r}")
        return Transaction(self._io, self._io.run(self._client.new_transaction(timeout_ms)))

    def transaction_from_id(self, txn_id: TxnID, timeout_ms: int = 60000) -> "Transaction":
        """The open transaction ``txn_id`` begun by another client (another process): send
        and acknowledge in it, commit or abort it.  An operation on a transaction that
        already ended raises then (InvalidTxnStatusError, ExpiredTransactionError)."""
        return Transaction(self._io, self._io.run(
            self._client.transaction_from_id(txn_id, timeout_ms)))

    def connect_transaction_key(self) -> int:
        """Connect this client's ``transaction_key`` now and return its epoch (the first
        ``new_transaction()`` does it otherwise); the key's previous holder is fenced,
        and its open transaction aborted, when this returns."""
        return self._io.run(self._client.connect_transaction_key())

    def get_topic_partitions(self, topic: str) -> list[str]:
        """The partitions of ``topic`` (the topic itself when not partitioned)."""
        return self._io.run(self._client.get_topic_partitions(topic))

    def close(self) -> None:
        """Flush and close every producer, consumer and reader, then the sessions."""
        if not self._io.closed:
            try:
                self._io.run(self._client.close())
            finally:
                self._io.stop()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Waiter(concurrent.futures.Future[MessageId]):
    """A send callback that a blocked ``send()`` waits on."""

    def __call__(self, result: Any, msg_id: MessageId | None) -> None:
        if result is Result.Ok and msg_id is not None:
            self.set_result(msg_id)
        else:
            self.set_exception(result)


class Producer:
    """A producer (``client.create_producer``); safe to share between threads."""
    def __init__(self, io: _Loop, inner: aio.Producer) -> None:
        self._io = io
        self._p = inner
        self._inbox: deque[Any] = deque()
        self._scheduled = False

    def send(self, data: Any, properties: dict[Any, Any] | None = None, partition_key: str | None = None,
             sequence_id: int | None = None, event_timestamp: int | None = None,
             txn: "Transaction | None" = None, ordering_key: bytes | str | None = None,
             deliver_at: int | None = None, deliver_after: timedelta | None = None) -> MessageId:
        """Send and wait for the broker's receipt; the message's MessageId (entry id -1
        for a dropped duplicate or a transactional send).  ``data``: bytes, or a value of
        the producer's ``schema=`` (encoded by it; TypeError for another type).
        ``deliver_at`` (ms since the epoch) or ``deliver_after`` (a timedelta): delayed
        delivery (Shared and Key_Shared subscriptions; docs/client.md)."""
        self._io.check_thread()
        waiter = _Waiter()
        self._queue(data, waiter, properties, partition_key, sequence_id, event_timestamp,
                    txn, True, ordering_key, delivery_time(deliver_at, deliver_after))
        return waiter.result()

    def send_async(self, data: Any, callback: Callable[[Any, MessageId | None], None],
                   properties: dict[Any, Any] | None = None,
                   partition_key: str | None = None, sequence_id: int | None = None,
                   event_timestamp: int | None = None, txn: "Transaction | None" = None,
                   ordering_key: bytes | str | None = None, deliver_at: int | None = None,
                   deliver_after: timedelta | None = None) -> None:
        """Queue a message; ``callback(result, msg_id)`` runs on the client's thread with
        ``magnetar.Result.Ok`` and the MessageId, or the exception and None.  Blocks
        while ``max_pending_messages`` are pending (``block_if_queue_full=False``: raises
        ProducerQueueIsFull).  Payload errors (TypeError, MessageTooBig) raise here."""
        self._queue(data, callback, properties, partition_key, sequence_id, event_timestamp,
                    txn, False, ordering_key, delivery_time(deliver_at, deliver_after))

    def _queue(self, data: Any, callback: Callable[[Any, MessageId | None], None],
               properties: dict[Any, Any] | None, partition_key: str | None, sequence_id: int | None,
               event_timestamp: int | None, txn: Transaction | None, seal: bool,
               ordering_key: bytes | str | None = None, deliver_at: int | None = None) -> None:
        p = self._p
        if type(data) is not bytes or p.schema is not None or p.closed or len(data) > p.max_message_size:
            data = p.check(data)
        fields = None
        if properties is not None or partition_key is not None or event_timestamp or ordering_key is not None \
                or deliver_at:
            fields = message_fields(properties, partition_key, event_timestamp, ordering_key, deliver_at)
        if sequence_id is not None:
            check_sequence_id(sequence_id)
        inner_txn = None
        if txn is not None:
            inner_txn = txn._t
            inner_txn.check_usable()
        p.slots.take()
        self._inbox.append((data, callback, fields, sequence_id, inner_txn, seal))
        if not self._scheduled:  # one loop wake-up for any number of messages
            self._scheduled = True
            self._io.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        self._scheduled = False
        inbox = self._inbox
        enqueue = self._p.enqueue
        while inbox:
            data, callback, fields, seq, txn, seal = inbox.popleft()
            try:
                enqueue(data, callback, fields, seq, txn, seal)
            except Exception as exc:
                self._p.slots.release(1)
                try:
                    callback(exc, None)
                except Exception:
                    pass

    def flush(self) -> None:
        """Send everything queued and wait for the answers."""
        self._io.run(self._flush())

    async def _flush(self) -> None:
        self._drain()
        await self._p.flush()

    def last_sequence_id(self) -> int:
        """The highest sequence id the broker acknowledged (-1 when none)."""
        return self._p.last_sequence_id()

    def producer_name(self) -> str:
        """The producer's name (the broker's choice when none was given)."""
        return self._p.producer_name()

    def topic(self) -> str:
        """The topic's full name."""
        return self._p.topic()

    def is_connected(self) -> bool:
        """Whether every partition has a live producer."""
        return self._p.is_connected()

    def close(self) -> None:
        """Flush, then close."""
        if not self._p.closed:
            self._io.run(self._close())

    async def _close(self) -> None:
        self._drain()
        await self._p.close()


class Consumer:
    """A consumer (``client.subscribe``); safe to share between threads."""
    def __init__(self, io: _Loop, inner: aio.Consumer) -> None:
        self._io = io
        self._c = inner

    def receive(self, timeout_millis: int | None = None) -> Message:
        """The next message; raises magnetar.Timeout when none arrives in time."""
        self._io.check_thread()
        return self._c.receive_from_thread(timeout_millis)

    def acknowledge(self, message: Message | MessageId, txn: "Transaction | None" = None) -> None:
        """A plain ack is grouped and returns at once; with ``txn`` it waits for the
        broker, so TransactionConflict raises here."""
        if txn is None:
            self._check_open()
            self._c.ack_nowait(message)
        else:
            self._io.run(self._c.acknowledge(message, txn._t))

    def acknowledge_cumulative(self, message: Message | MessageId,
                               txn: "Transaction | None" = None) -> None:
        """Acknowledge everything up to and including the message (Exclusive and Failover
        only); with ``txn`` it waits for the broker."""
        if txn is None:
            self._check_open()
            self._c.ack_nowait(message, cumulative=True)
        else:
            self._io.run(self._c.acknowledge(message, txn._t, cumulative=True))

    def negative_acknowledge(self, message: Message | MessageId) -> None:
        """Redeliver the message after ``negative_ack_redelivery_delay_ms``."""
        self._check_open()
        self._c._position(message)  # a TypeError raises here, not on the client's thread
        self._io.loop.call_soon_threadsafe(self._c.negative_acknowledge, message)

    def reconsume_later(self, message: Message, delay: timedelta | int) -> None:
        """Send the message to the retry topic, due after ``delay`` (a timedelta or ms;
        to the dead-letter topic past the policy's ``max_redeliver_count``), and
        acknowledge it, in one transaction (needs ``enable_retry=True``)."""
        self._io.run(self._c.reconsume_later(message, delay))

    def redeliver_unacknowledged_messages(self) -> None:
        """Have every unacknowledged message of this consumer redelivered now."""
        self._io.run(self._c.redeliver_unacknowledged_messages())

    def seek(self, message_id_or_timestamp: MessageId | int) -> None:
        """Reset to a message id (delivered next) or a publish time in ms."""
        self._io.run(self._c.seek(message_id_or_timestamp))

    def has_reached_end_of_topic(self) -> bool:
        """True once the topic was terminated (``topics terminate``) and every message
        of it was received: nothing more will come."""
        return self._c.has_reached_end_of_topic()

    def unsubscribe(self) -> None:
        """Delete the subscription (and close this consumer)."""
        self._io.run(self._c.close(unsubscribe=True))

    def undecodable_entries(self) -> int:
        """How many entries were skipped because their batch did not decode (each
        logged as an error naming its message id; docs/security.md)."""
        return self._c.undecodable_entries()

    def topic(self) -> str:
        """The topic's full name."""
        return self._c.topic()

    def subscription_name(self) -> str:
        """The subscription's name."""
        return self._c.subscription_name()

    def consumer_name(self) -> str:
        """This consumer's name."""
        return self._c.consumer_name()

    def is_connected(self) -> bool:
        """Whether every partition has a live consumer."""
        return self._c.is_connected()

    def _check_open(self) -> None:
        if self._c.closed:
            raise AlreadyClosed(f"consumer on {self._c.topic()} is closed")

    def close(self) -> None:
        """Flush pending acks and close."""
        if not self._c.closed:
            self._io.run(self._c.close())


class Reader:
    """A reader (``client.create_reader``); safe to share between threads."""
    def __init__(self, io: _Loop, inner: aio.Consumer) -> None:
        self._io = io
        self._r = inner

    def read_next(self, timeout_millis: int | None = None) -> Message:
        """The next message; raises magnetar.Timeout when none arrives in time."""
        self._io.check_thread()
        return self._r.receive_from_thread(timeout_millis)

    def has_message_available(self) -> bool:
        """Whether a message after the last one read exists (asks the broker when unsure)."""
        return self._io.run(self._r.has_message_available())

    def seek(self, message_id_or_timestamp: MessageId | int) -> None:
        """Move to a message id (read next) or a publish time in ms."""
        self._io.run(self._r.seek(message_id_or_timestamp))

    def undecodable_entries(self) -> int:
        """How many entries were skipped because their batch did not decode (each
        logged as an error naming its message id; docs/security.md)."""
        return self._r.undecodable_entries()

    def topic(self) -> str:
        """The topic's full name."""
        return self._r.topic()

    def is_connected(self) -> bool:
        """Whether every partition has a live reader."""
        return self._r.is_connected()

    def close(self) -> None:
        """Close the reader."""
        if not self._r.closed:
            self._io.run(self._r.close())


class Transaction:
    """A transaction; ``with client.new_transaction() as txn:`` commits, or aborts on error."""

    def __init__(self, io: _Loop, inner: aio.Transaction) -> None:
        self._io = io
        self._t = inner

    @property
    def txn_id(self) -> TxnID:
        """The transaction's id: ``TxnID(most_bits, least_bits)``, printed ``(m,l)``."""
        return self._t.txn_id

    @property
    def state(self) -> TransactionState:
        """The transaction's TransactionState as this client knows it."""
        return self._t.state

    def commit(self) -> None:
        """Wait for the transaction's sends, then commit (a spoiled transaction is
        aborted and TransactionHasOperationFailed raised)."""
        self._io.run(self._t.commit())

    def abort(self) -> None:
        """Abort: none of its sends becomes visible and its acks are undone."""
        self._io.run(self._t.abort())

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc_type is None:
            self.commit()
        elif self._t.state is TransactionState.OPEN:
            self.abort()

    def __repr__(self) -> str:
        return repr(self._t)
