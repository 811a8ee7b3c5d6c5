"""Magnetar errors as Pulsar ``ServerError`` codes (what an ERROR, SEND_ERROR or a failed
LOOKUP carries).  The code decides what a Pulsar client does next: ServiceNotReady and
TooManyRequests are retried (after a new lookup), the rest end the operation with the
matching exception of that client.  Pure."""

from __future__ import annotations

from magnetar_protocol import errors
from magnetar_protocol import pulsar_api_pb2 as pb

# Most specific class first: the first isinstance match wins.
_CODES: tuple[tuple[type[errors.MagnetarError], int], ...] = (
    (errors.AuthenticationError, pb.AuthenticationError),
    (errors.AuthorizationError, pb.AuthorizationError),
    # The wheel retries InvalidTopicName until its operation timeout: a domain Magnetar
    # does not serve is refused with a code it gives up on at once.
    (errors.UnsupportedTopicDomain, pb.NotAllowedError),
    (errors.InvalidTopicName, pb.InvalidTopicName),
    (errors.MessageTooBig, pb.NotAllowedError),
    (errors.TopicNotFound, pb.TopicNotFound),
    (errors.SubscriptionNotFound, pb.SubscriptionNotFound),
    (errors.ConsumerNotFound, pb.ConsumerNotFound),
    (errors.TransactionNotFound, pb.TransactionNotFound),
    (errors.TransactionCoordinatorNotFoundError, pb.TransactionCoordinatorNotFound),
    (errors.TenantNotFound, pb.TopicNotFound),
    (errors.NamespaceNotFound, pb.TopicNotFound),
    (errors.ProducerBusy, pb.ProducerBusy),
    (errors.ProducerFenced, pb.ProducerFenced),
    (errors.ConsumerBusy, pb.ConsumerBusy),
    # The partition moved: the client looks it up again and reconnects to its owner.
    (errors.NotOwner, pb.ServiceNotReady),
    (errors.TransactionConflict, pb.TransactionConflict),
    (errors.InvalidTxnStatusError, pb.InvalidTxnStatus),
    (errors.ExpiredTransactionError, pb.InvalidTxnStatus),
    (errors.IncompatibleSchema, pb.IncompatibleSchema),
    (errors.NotAllowedError, pb.NotAllowedError),
    (errors.TooManyRequests, pb.TooManyRequests),
    (errors.PersistenceError, pb.PersistenceError),
    (errors.ServiceNotReady, pb.ServiceNotReady),
    (errors.ProducerNotFound, pb.NotAllowedError),
    (errors.SessionNotFound, pb.NotAllowedError),
    # A request the broker refuses as malformed: no retry can help.
    (errors.BadRequest, pb.NotAllowedError),
)


def server_error(exc: BaseException) -> int:
    """The ServerError to answer ``exc`` with (UnknownError for anything unexpected)."""
    for cls, code in _CODES:
        if isinstance(exc, cls):
            return code
    return pb.UnknownError
