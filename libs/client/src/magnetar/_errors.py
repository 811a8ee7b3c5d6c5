"""Every error the client raises: the one hierarchy of ``magnetar_protocol.errors``
(keyed by wire error code; its tree is drawn there), re-exported here once for
``magnetar`` and ``magnetar.asyncio``, plus the client-side failures that never cross
the wire (as ConnectError and Timeout are).  A unit test checks that no class of the
hierarchy is missing."""

from __future__ import annotations

from magnetar_protocol.errors import (
    AuthenticationError,
    AuthorizationError,
    BadRequest,
    Conflict,
    ConnectError,
    ConsumerBusy,
    ConsumerNotFound,
    ExpiredTransactionError,
    IncompatibleSchema,
    InvalidTopicName,
    InvalidTxnStatusError,
    MagnetarError,
    MessageTooBig,
    NamespaceNotFound,
    NotAllowedError,
    NotFound,
    NotOwner,
    PersistenceError,
    ProducerBlockedQuotaExceeded,
    ProducerBusy,
    ProducerFenced,
    ProducerNotFound,
    ServiceNotReady,
    SessionNotFound,
    SubscriptionNotFound,
    TenantNotFound,
    Timeout,
    TlsError,
    TooManyRequests,
    TopicNotFound,
    TopicTerminated,
    TransactionConflict,
    TransactionCoordinatorNotFoundError,
    TransactionHasOperationFailed,
    TransactionKeyNotFound,
    TransactionNotFound,
    UnknownError,
    UnsupportedTopicDomain,
)

__all__ = [
    "AuthenticationError", "AuthorizationError", "BadRequest", "Conflict",
    "ConnectError", "ConsumerBusy", "ConsumerNotFound", "ExpiredTransactionError", "IncompatibleSchema",
    "InvalidTopicName", "InvalidTxnStatusError", "MagnetarError", "MessageTooBig",
    "NamespaceNotFound", "NotAllowedError", "NotFound", "NotOwner", "PersistenceError",
    "ProducerBlockedQuotaExceeded", "ProducerBusy", "ProducerFenced", "ProducerNotFound", "ServiceNotReady",
    "SessionNotFound", "SubscriptionNotFound", "TenantNotFound", "Timeout", "TlsError",
    "TooManyRequests", "TopicNotFound", "TopicTerminated", "TransactionConflict",
    "TransactionCoordinatorNotFoundError", "TransactionHasOperationFailed",
    "TransactionKeyNotFound", "TransactionNotFound", "UnknownError", "UnsupportedTopicDomain", "AlreadyClosed",
    "ProducerQueueIsFull",
]


class ProducerQueueIsFull(MagnetarError):
    """``max_pending_messages`` are pending and the producer was made with
    ``block_if_queue_full=False`` (or blocking would deadlock the client's own thread)."""


class AlreadyClosed(MagnetarError):
    """The producer, consumer, reader or client was closed."""
