"""Magnetar's Python client, mirroring the ``pulsar-client`` package.

    import magnetar

    client = magnetar.Client("http://localhost:8080")
    producer = client.create_producer("orders")
    producer.send(b"hello")
    consumer = client.subscribe("orders", "audit",
                                initial_position=magnetar.InitialPosition.Earliest)
    msg = consumer.receive(timeout_millis=5000)
    consumer.acknowledge(msg)
    client.close()

Each ``Client`` runs one asyncio event loop in a background thread (the
``magnetar.asyncio`` API does the work there), so a client and its objects are safe to
share between threads.  Every error is a ``magnetar.MagnetarError`` subclass carrying the
service's error code (the hierarchy of ``magnetar_protocol.errors``).  See docs/client.md.
"""

from __future__ import annotations

from magnetar import _errors
from magnetar._errors import *  # noqa: F403 (every error class; _errors.__all__)
from magnetar._message import Message
from magnetar._sync import Client, Consumer, Producer, Reader, Transaction
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

__all__ = ["Client", "Producer", "Consumer", "Reader", "Transaction", "Message", "MessageId",
           "TxnID", "ConsumerType", "InitialPosition", "ProducerAccessMode",
           "PartitionsRoutingMode", "Result", "TransactionState", "MultiplierRedeliveryBackoff",
           "ConsumerDeadLetterPolicy"]

__all__ += _errors.__all__  # the one hierarchy of magnetar_protocol.errors, plus two
