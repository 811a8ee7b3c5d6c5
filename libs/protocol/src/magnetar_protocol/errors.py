"""The one error hierarchy of Magnetar, keyed by wire error code.  Pure: no I/O.

Services raise these; the service runtime turns one into an HTTP status plus a protobuf
``Error`` (or JSON for the admin API); the client turns the answer back into the same
class.  So a test can assert ``pytest.raises(ProducerBusy)`` whichever side raised it.

    MagnetarError
    ├── ConnectError                      client: no answer from a service
    ├── Timeout                           client: an operation's deadline passed
    ├── TlsError                          client: a TLS handshake failed (not retried)
    ├── BadRequest                        400  malformed body, invalid field
    │   ├── InvalidTopicName              400
    │   └── MessageTooBig                 400
    ├── AuthenticationError               401
    ├── AuthorizationError                403
    ├── NotFound                          404
    │   ├── TopicNotFound
    │   ├── TenantNotFound
    │   ├── NamespaceNotFound
    │   ├── SubscriptionNotFound
    │   ├── ProducerNotFound
    │   ├── ConsumerNotFound
    │   ├── SessionNotFound               the client re-opens its session
    │   ├── TransactionNotFound
    │   ├── TransactionKeyNotFound
    │   └── TransactionCoordinatorNotFoundError
    ├── Conflict                          409
    │   ├── ProducerBusy
    │   ├── ProducerFenced
    │   ├── ConsumerBusy
    │   ├── NotOwner                      the client looks the topic up again
    │   ├── NotAllowedError
    │   ├── TransactionConflict
    │   ├── InvalidTxnStatusError
    │   ├── ExpiredTransactionError
    │   ├── TopicTerminated               a send to a terminated topic
    │   ├── IncompatibleSchema            a schema the topic's strategy refuses, a payload
    │   │                                 that does not match it (schemaValidationEnforced)
    │   └── TransactionHasOperationFailed client: commit of a spoiled transaction
    ├── TooManyRequests                   429
    ├── ServiceNotReady                   503  retryable
    │   └── PersistenceError              503  the database refused or vanished
    └── UnknownError                      500

Retryable errors (the client retries them with the same sequence ids) carry
``retryable = True``.
"""

from __future__ import annotations

from typing import ClassVar

from magnetar_protocol import magnetar_pb2 as pb

Code = pb.ErrorCode


class MagnetarError(Exception):
    """Base of every Magnetar error; ``code`` is the wire error code."""

    code: ClassVar[int] = Code.UNKNOWN_ERROR
    http_status: ClassVar[int] = 500
    retryable: ClassVar[bool] = False

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.__class__.__name__)
        self.message = message or self.__class__.__name__

    def __reduce__(self):  # picklable, so Spark executors can ship it back
        return (self.__class__, (self.message,))


class ConnectError(MagnetarError):
    retryable = True


class Timeout(MagnetarError):
    pass


class TlsError(MagnetarError):
    """The service's certificate was not trusted (another CA, expired, another name) or
    the handshake failed otherwise: retrying cannot help, so it is raised at once."""


class UnknownError(MagnetarError):
    code = Code.UNKNOWN_ERROR


class BadRequest(MagnetarError):
    code = Code.BAD_REQUEST
    http_status = 400


class InvalidTopicName(BadRequest):
    code = Code.INVALID_TOPIC_NAME


class UnsupportedTopicDomain(InvalidTopicName):
    """A non-persistent:// topic: Magnetar stores every message (refused at once; a
    Pulsar client is answered NotAllowedError, which it does not retry)."""


class MessageTooBig(BadRequest):
    code = Code.MESSAGE_TOO_BIG


class AuthenticationError(MagnetarError):
    code = Code.AUTHENTICATION_ERROR
    http_status = 401


class AuthorizationError(MagnetarError):
    code = Code.AUTHORIZATION_ERROR
    http_status = 403


class NotFound(MagnetarError):
    http_status = 404


class TopicNotFound(NotFound):
    code = Code.TOPIC_NOT_FOUND


class TenantNotFound(NotFound):
    code = Code.TENANT_NOT_FOUND


class NamespaceNotFound(NotFound):
    code = Code.NAMESPACE_NOT_FOUND


class SubscriptionNotFound(NotFound):
    code = Code.SUBSCRIPTION_NOT_FOUND


class ProducerNotFound(NotFound):
    code = Code.PRODUCER_NOT_FOUND


class ConsumerNotFound(NotFound):
    code = Code.CONSUMER_NOT_FOUND


class SessionNotFound(NotFound):
    code = Code.SESSION_NOT_FOUND


class TransactionNotFound(NotFound):
    code = Code.TRANSACTION_NOT_FOUND


class TransactionKeyNotFound(NotFound):
    code = Code.TRANSACTION_KEY_NOT_FOUND


class TransactionCoordinatorNotFoundError(NotFound):
    code = Code.TRANSACTION_COORDINATOR_NOT_FOUND
    retryable = True


class Conflict(MagnetarError):
    code = Code.CONFLICT
    http_status = 409


class ProducerBusy(Conflict):
    code = Code.PRODUCER_BUSY


class ProducerFenced(Conflict):
    code = Code.PRODUCER_FENCED


class ConsumerBusy(Conflict):
    code = Code.CONSUMER_BUSY


class NotOwner(Conflict):
    code = Code.NOT_OWNER
    retryable = True


class NotAllowedError(Conflict):
    code = Code.NOT_ALLOWED


class TransactionConflict(Conflict):
    code = Code.TRANSACTION_CONFLICT


class InvalidTxnStatusError(Conflict):
    code = Code.INVALID_TXN_STATUS


class ExpiredTransactionError(Conflict):
    code = Code.EXPIRED_TRANSACTION


class TopicTerminated(Conflict):
    """The topic was terminated (``topics terminate``): it takes no more messages
    (Pulsar's TopicTerminatedError)."""
    code = Code.TOPIC_TERMINATED


class IncompatibleSchema(Conflict):
    """A producer's or consumer's schema that the topic's compatibility strategy refuses
    (Pulsar's IncompatibleSchemaException; 409 as Pulsar's admin answers an upload), or,
    with schemaValidationEnforced, a payload that does not match the topic's schema."""
    code = Code.INCOMPATIBLE_SCHEMA


class TransactionHasOperationFailed(Conflict):
    """Client side: commit() of a transaction one of whose operations failed."""


class ProducerBlockedQuotaExceeded(MagnetarError):
    """A backlog quota refuses the send: policy producer_exception at once, or
    producer_request_hold once the hold outlasted its limit (Pulsar's
    ProducerBlockedQuotaExceededException / ...Error).  Not retried by the client:
    the backlog must shrink first (consumers, TTL, or an operator)."""
    code = Code.PRODUCER_BLOCKED_QUOTA_EXCEEDED
    http_status = 429


class TooManyRequests(MagnetarError):
    code = Code.TOO_MANY_REQUESTS
    http_status = 429
    retryable = True


class ServiceNotReady(MagnetarError):
    code = Code.SERVICE_NOT_READY
    http_status = 503
    retryable = True


class PersistenceError(ServiceNotReady):
    code = Code.PERSISTENCE_ERROR


def _leaf_classes() -> dict[int, type[MagnetarError]]:
    by_code: dict[int, type[MagnetarError]] = {}
    pending: list[type[MagnetarError]] = [MagnetarError]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        # The most specific class that declares a code wins (subclasses override).
        if "code" in cls.__dict__:
            by_code[cls.code] = cls
    return by_code


_BY_CODE = _leaf_classes()


def error_for_code(code: int, message: str) -> MagnetarError:
    """Rebuild the exception a service raised from its wire code and message."""
    return _BY_CODE.get(code, UnknownError)(message)


def to_wire(exc: MagnetarError) -> pb.Error:
    return pb.Error(code=exc.code, message=exc.message)
