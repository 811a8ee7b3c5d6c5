"""The broker's domain commands: what a client asks of the broker, whatever the wire it
came over.  Both front ends, HTTP/protobuf (api.py) and Pulsar's binary protocol
(pulsar/), translate their requests into these, and the rules a request must satisfy
are checked here, once, when a command is built, so the front ends cannot diverge.
Pure: plain values and their rules, no I/O."""

from __future__ import annotations

from dataclasses import dataclass

from magnetar_broker.partition.batchcheck import WHOLE
from magnetar_broker.subscription.deadrules import DeadLetterPolicy
from magnetar_broker.subscription.dispatch import SUB_NAMES
from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import BadRequest, NotAllowedError
from magnetar_protocol.schemainfo import Schema
from magnetar_protocol.txnid import TxnID

# A position past every entry: a seek there (Pulsar's "latest") lands after the last one.
LATEST_ENTRY = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class Position:
    entry_id: int
    batch_index: int = WHOLE  # WHOLE: the whole entry


@dataclass(frozen=True, slots=True)
class CreateProducer:
    """A producer on a partition, with its PIP-68 access mode.  A WaitForExclusive one
    that must wait is answered ``waiting`` after ``wait_ms``; the client asks again with
    the same name to keep its place."""

    session_id: str
    topic: str
    name: str = ""  # "": the broker chooses a unique one
    access_mode: int = 0  # magnetar.proto's ProducerAccessMode (0: Shared)
    topic_epoch: int | None = None  # an exclusive producer's epoch, on a reconnect
    wait_ms: int = 0
    client_producer_id: int = 0  # the client's id: tells a retried create from another producer
    # Created on the topic (at its end) unless it exists: Pulsar's initialSubscriptionName,
    # which its clients' dead-letter producers use so the first dead letter has a reader.
    initial_subscription: str = ""
    schema: Schema | None = None  # the producer's schema (None: bytes, no schema)


@dataclass(frozen=True, slots=True)
class Subscribe:
    """A consumer on a subscription (durable), or a reader (not durable: a cursor gone
    with its consumer, starting at ``start``)."""

    session_id: str
    topic: str
    subscription: str  # "": a reader's generated name
    sub_type: int      # magnetar.proto's SubscriptionType
    durable: bool
    earliest: bool = False  # a new durable subscription starts at the first stored entry
    consumer_name: str = ""
    priority: int = 0
    start: Position | None = None  # a reader's first position; None: after the last entry
    start_inclusive: bool = False
    dead_letter: DeadLetterPolicy | None = None  # the consumer's (its client's) policy
    read_compacted: bool = False  # the compacted view below its horizon, then the log
    schema: Schema | None = None  # the consumer's schema (None: bytes, not checked)

    def __post_init__(self) -> None:
        if self.sub_type not in SUB_NAMES:
            raise BadRequest(f"unknown subscription type {self.sub_type}")
        if self.dead_letter is not None and not self.durable:
            raise BadRequest("a reader has no dead-letter policy (it acknowledges nothing)")
        if self.read_compacted and self.durable and self.sub_type not in (pb.SUB_EXCLUSIVE, pb.SUB_FAILOVER):
            # Pulsar's rule: one consumer reads at a time, so the view is read in order.
            raise NotAllowedError("read_compacted is allowed only on Exclusive and Failover subscriptions "
                                  f"and readers, not on a {SUB_NAMES[self.sub_type]} subscription")


@dataclass(frozen=True, slots=True)
class Seek:
    """Move a consumer's subscription to a position, or to the first entry published at or
    after a time (the position when both are given)."""

    consumer_id: int
    session_id: str
    position: Position | None = None
    publish_time: int | None = None  # ms since the epoch
    seeks: int = 0  # the client's count of its seeks (fetches sent before this one are stale)

    def __post_init__(self) -> None:
        if self.position is None and self.publish_time is None:
            raise BadRequest("seek needs a position or a publish_time")


@dataclass(frozen=True, slots=True)
class Fetch:
    """Messages for a consumer: up to ``max_messages`` (its permits), waiting up to
    ``wait_ms`` (bounded by the broker's setting) for some to arrive."""

    consumer_id: int
    session_id: str
    max_messages: int
    wait_ms: int = 0
    seeks: int = 0  # the client's seek count when it asked: an earlier one's fetch is stale


@dataclass(frozen=True, slots=True)
class Fetched:
    entries: list[pb.DeliveredEntry]  # whole entries, or the listed messages of one
    partition: int
    end_of_topic: bool  # terminated, and every message up to its end delivered


@dataclass(frozen=True, slots=True)
class Ack:
    consumer_id: int
    session_id: str
    positions: tuple[Position, ...]
    cumulative: bool = False
    txn: TxnID | None = None  # pending in the transaction until it ends
    # A one-request transaction's ack (with txn): held in memory this long, written by
    # its commit (docs/transactions.md); 0: the classic pending ack, durable at once.
    hold_ms: int = 0


@dataclass(frozen=True, slots=True)
class Redeliver:
    """A negative ack: the listed messages go out again (none listed: every message the
    consumer holds unacknowledged)."""

    consumer_id: int
    session_id: str
    positions: tuple[Position, ...] = ()
    # The client's seek count when it dropped its queue for this redelivery (all of it):
    # a fetch sent before it is stale, as after a seek.  0: it kept its queue.
    seeks: int = 0


@dataclass(frozen=True, slots=True)
class LastMessage:
    """The last message stored on a consumer's partition, and its subscription's
    mark-delete position."""

    partition: int
    mark_delete: int
    last_entry_id: int | None  # None: nothing stored
    last_batch_size: int = 0
    # The last message's batch index when it is not the entry's last (a compacted
    # view's last message); None: the entry's last.
    last_index: int | None = None

    @property
    def index(self) -> int:
        """The last message's batch index in its entry."""
        return self.last_batch_size - 1 if self.last_index is None else self.last_index


@dataclass(frozen=True, slots=True)
class CloseConsumer:
    consumer_id: int
    session_id: str
    unsubscribe: bool = False  # also delete its (durable) subscription
    # A Pulsar seek's disconnect: a reader's subscription stays, at the position sought,
    # for the reader to come back to (forgotten if it does not within the session timeout).
    keep_reader: bool = False


@dataclass(frozen=True, slots=True)
class Located:
    """Who serves a topic: the broker, at the URL of the listener the client named."""

    topic: str  # its full name
    broker_id: str
    url: str
