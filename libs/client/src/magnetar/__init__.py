"""Magnetar's Python client, mirroring the ``pulsar-client`` package.

    import magnetar
    client = magnetar.Client("http://localhost:8080")
    producer = client.create_producer("orders")
    producer.send(b"hello")

Each ``Client`` runs one asyncio event loop in a background thread (the
``magnetar.asyncio`` API does the work there), so a client and its objects are safe to
share between threads.  Every error is a ``magnetar.MagnetarError`` subclass carrying the
service's error code.
"""

from __future__ import annotations

import asyncio as _asyncio
import importlib
import threading
from collections import deque

from magnetar_protocol.errors import *  # noqa: F401,F403 - the one error hierarchy
from magnetar_protocol.errors import MagnetarError  # noqa: F401 - named for readers

from magnetar._message import Message
from magnetar._types import (
    ConsumerType,
    InitialPosition,
    MessageId,
    ProducerAccessMode,
    Result,
    TransactionState,
    TxnID,
)

# The submodule, not the stdlib module of the same name.
_aio = importlib.import_module("magnetar.asyncio")

__all__ = ["Client", "Producer", "Consumer", "Reader", "Transaction", "Message", "MessageId", "TxnID",
           "ConsumerType", "InitialPosition", "ProducerAccessMode", "Result", "TransactionState",
           "MagnetarError"]


class _Loop:
    """The client's event loop thread."""

    def __init__(self) -> None:
        self.loop = _asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="magnetar-client", daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float | None = None):
        return _asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


class Client:
    """Connects to a Magnetar cluster through any of its brokers (a comma-separated list
    of URLs is tried in turn)."""

    def __init__(self, service_url: str, transaction_key: str | None = None, auth_token: str | None = None,
                 operation_timeout_seconds: float = 30):
        self._io = _Loop()
        self._client = self._io.run(_make_client(service_url, transaction_key, auth_token,
                                                 operation_timeout_seconds))

    def create_producer(self, topic: str, **options) -> "Producer":
        return Producer(self._io, self._io.run(self._client.create_producer(topic, **options)))

    def subscribe(self, topic: str, subscription_name: str, **options) -> "Consumer":
        return Consumer(self._io, self._io.run(self._client.subscribe(topic, subscription_name, _threaded=True,
                                                                      **options)))

    def create_reader(self, topic: str, start_message_id: MessageId, **options) -> "Reader":
        return Reader(self._io, self._io.run(self._client.create_reader(topic, start_message_id, _threaded=True,
                                                                        **options)))

    def new_transaction(self, timeout_ms: int = 60000) -> "Transaction":
        if not isinstance(timeout_ms, int) or timeout_ms <= 0:
            raise ValueError(f"transaction timeout must be a positive number of milliseconds, got {timeout_ms!r}")
        return Transaction(self._io, self._io.run(self._client.new_transaction(timeout_ms)))

    def close(self) -> None:
        if self._io.loop.is_running():
            self._io.run(self._client.close())
            self._io.stop()


async def _make_client(*args) -> _aio.Client:
    return _aio.Client(*args)


class Producer:
    def __init__(self, io: _Loop, inner: _aio.Producer):
        self._io = io
        self._p = inner
        self._inbox: deque = deque()
        self._scheduled = False
        self._space = threading.Semaphore(inner.options["max_pending"])
        inner.on_released = self._space.release

    def send(self, data: bytes, properties=None, partition_key=None, sequence_id=None, event_timestamp=None,
             txn: "Transaction | None" = None) -> MessageId:
        return self._io.run(self._p.send(data, properties, partition_key, sequence_id, event_timestamp,
                                         txn._t if txn else None))

    def send_async(self, data: bytes, callback, properties=None, partition_key=None, sequence_id=None,
                   event_timestamp=None, txn: "Transaction | None" = None) -> None:
        """Queue a message; ``callback(result, msg_id)`` runs on the client's thread with
        ``magnetar.Result.Ok`` or the exception.  Blocks while max_pending_messages wait."""
        msg = self._p.build(data, properties, partition_key, sequence_id, event_timestamp)
        self._space.acquire()  # released in bulk when a batch settles
        self._inbox.append((msg, callback, txn._t if txn else None, sequence_id is not None))
        if not self._scheduled:  # one loop wake-up for any number of messages
            self._scheduled = True
            self._io.loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        self._scheduled = False
        inbox = self._inbox
        enqueue = self._p.enqueue
        while inbox:
            msg, callback, txn, explicit = inbox.popleft()
            try:
                enqueue(msg, callback, txn, explicit)
            except Exception as exc:
                self._space.release()
                callback(exc, None)

    def flush(self) -> None:
        self._io.run(self._flush())

    async def _flush(self) -> None:
        self._drain()
        await self._p.flush()

    def last_sequence_id(self) -> int:
        return self._p.last_sequence_id()

    def producer_name(self) -> str:
        return self._p.producer_name()

    def topic(self) -> str:
        return self._p.topic()

    def close(self) -> None:
        self.flush()
        self._io.run(self._p.close())


class Consumer:
    def __init__(self, io: _Loop, inner: _aio.Consumer):
        self._io = io
        self._c = inner

    def receive(self, timeout_millis: int | None = None) -> Message:
        return self._c.receive_from_thread(timeout_millis)

    def acknowledge(self, msg, txn: "Transaction | None" = None) -> None:
        if txn is None:
            self._c.ack_from_thread(msg)  # grouped, as Pulsar's ack grouping tracker
        else:
            self._io.run(self._c.acknowledge(msg, txn._t))  # waits: conflicts raise here

    def acknowledge_cumulative(self, msg, txn: "Transaction | None" = None) -> None:
        if txn is None:
            self._c.ack_from_thread(msg, cumulative=True)
        else:
            self._io.run(self._c.acknowledge(msg, txn._t, cumulative=True))

    def negative_acknowledge(self, msg) -> None:
        self._io.loop.call_soon_threadsafe(self._c.negative_acknowledge, msg)

    def redeliver_unacknowledged_messages(self) -> None:
        self._io.run(self._c.redeliver_unacknowledged_messages())

    def seek(self, message_id_or_timestamp) -> None:
        self._io.run(self._c.seek(message_id_or_timestamp))

    def unsubscribe(self) -> None:
        self._io.run(self._c.close(unsubscribe=True))

    def topic(self) -> str:
        return self._c.topic()

    def subscription_name(self) -> str:
        return self._c.subscription_name()

    def close(self) -> None:
        self._io.run(self._c.close())


class Reader:
    def __init__(self, io: _Loop, inner: _aio.Consumer):
        self._io = io
        self._r = inner

    def read_next(self, timeout_millis: int | None = None) -> Message:
        return self._r.receive_from_thread(timeout_millis)

    def has_message_available(self) -> bool:
        return self._io.run(self._r.has_message_available())

    def seek(self, message_id_or_timestamp) -> None:
        self._io.run(self._r.seek(message_id_or_timestamp))

    def topic(self) -> str:
        return self._r.topic()

    def close(self) -> None:
        self._io.run(self._r.close())


class Transaction:
    """A transaction; ``with client.new_transaction() as txn:`` commits, or aborts on error."""

    def __init__(self, io: _Loop, inner: _aio.Transaction):
        self._io = io
        self._t = inner

    @property
    def txn_id(self) -> TxnID:
        return self._t.txn_id

    @property
    def state(self) -> TransactionState:
        return self._t.state

    def commit(self) -> None:
        self._io.run(self._t.commit())

    def abort(self) -> None:
        self._io.run(self._t.abort())

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        elif self._t.state is TransactionState.OPEN:
            self.abort()

    def __repr__(self) -> str:
        return repr(self._t)
