"""Public value types: message ids, transaction ids and enums, as ``pulsar-client``
names them."""

from __future__ import annotations

import enum

from google.protobuf.message import DecodeError

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.txnid import TxnID as TxnID  # re-exported: the public type

LATEST_ENTRY = (1 << 63) - 1  # the wire's "latest" entry id (docs/protocol.md)
_U64 = 1 << 64


class ProducerAccessMode(enum.IntEnum):
    """PIP-68 access modes (see docs/producers.md)."""

    Shared = pb.ACCESS_SHARED
    Exclusive = pb.ACCESS_EXCLUSIVE
    WaitForExclusive = pb.ACCESS_WAIT_FOR_EXCLUSIVE
    ExclusiveWithFencing = pb.ACCESS_EXCLUSIVE_WITH_FENCING


class ConsumerType(enum.IntEnum):
    """Subscription types."""

    Exclusive = pb.SUB_EXCLUSIVE
    Shared = pb.SUB_SHARED
    Failover = pb.SUB_FAILOVER
    KeyShared = pb.SUB_KEY_SHARED


class InitialPosition(enum.IntEnum):
    """Where a new durable subscription starts."""

    Latest = pb.INITIAL_LATEST
    Earliest = pb.INITIAL_EARLIEST


class PartitionsRoutingMode(enum.IntEnum):
    """Where a message without a partition key goes on a partitioned topic (a message
    with a key always goes to ``crc32(key) % partitions``)."""

    RoundRobinDistribution = 0  # the next partition for each batch
    UseSinglePartition = 1      # one partition, chosen at random when the producer starts


class Result(enum.Enum):
    """The first argument of a ``send_async`` callback on success (on failure it is the
    exception)."""

    Ok = "Ok"


class TransactionState(enum.Enum):
    """A transaction's state as the client knows it."""
    OPEN = "OPEN"
    COMMITTING = "COMMITTING"
    COMMITTED = "COMMITTED"
    ABORTING = "ABORTING"
    ABORTED = "ABORTED"
    ERROR = "ERROR"


class MessageId:
    """Where a message sits: (partition, entry id, index in its batch, batch size).

    Ordered as Pulsar orders ids (entry, then partition, then batch index), so
    ``MessageId.earliest`` sorts before and ``MessageId.latest`` after every message.
    A message dropped as a duplicate, or sent in a transaction, has entry id -1.
    """

    __slots__ = ("_partition", "_entry_id", "_batch_index", "_batch_size")
    earliest: "MessageId"
    latest: "MessageId"

    def __init__(self, partition: int = -1, entry_id: int = -1, batch_index: int = -1,
                 batch_size: int = 0) -> None:
        self._partition = partition
        self._entry_id = entry_id
        self._batch_index = batch_index
        self._batch_size = batch_size

    def partition(self) -> int:
        """The partition index, -1 for a non-partitioned topic."""
        return self._partition

    def entry_id(self) -> int:
        """The entry (stored batch) id; -1 for a dropped duplicate or a transactional send."""
        return self._entry_id

    def batch_index(self) -> int:
        """Position in the batch; -1 means the whole entry."""
        return self._batch_index

    def batch_size(self) -> int:
        """How many messages the entry holds (0 when unknown)."""
        return self._batch_size

    def ledger_id(self) -> int:
        """pulsar-client compatibility: Magnetar has one "ledger" per partition."""
        return 0

    def _key(self) -> tuple[int, int, int]:
        return (self._entry_id, self._partition, self._batch_index)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._key() == other._key()

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._key() < other._key()

    def __le__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._key() <= other._key()

    def __gt__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._key() > other._key()

    def __ge__(self, other: object) -> bool:
        if not isinstance(other, MessageId):
            return NotImplemented
        return self._key() >= other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"MessageId(partition={self._partition}, entry_id={self._entry_id}, "
                f"batch_index={self._batch_index}, batch_size={self._batch_size})")

    def __str__(self) -> str:
        return f"({self._partition},{self._entry_id},{self._batch_index})"

    def serialize(self) -> bytes:
        """Bytes for ``MessageId.deserialize`` (a ``magnetar.v1.MessageIdData``)."""
        return pb.MessageIdData(partition=self._partition, entry_id=self._entry_id % _U64,
                                batch_index=self._batch_index, batch_size=self._batch_size
                                ).SerializeToString()

    @staticmethod
    def deserialize(data: bytes) -> "MessageId":
        """The MessageId ``serialize()`` wrote."""
        try:
            wire = pb.MessageIdData.FromString(data)
            entry = wire.entry_id
        except DecodeError:
            # The first client release appended a zero byte for entry id -1.
            if not data.endswith(b"\x00"):
                raise
            wire, entry = pb.MessageIdData.FromString(data[:-1]), -1
        if entry > LATEST_ENTRY:  # negative ids travel as two's complement
            entry -= _U64
        return MessageId(wire.partition, entry, wire.batch_index, wire.batch_size)

    def to_position(self) -> pb.Position:
        """As a ``magnetar.v1.Position``."""
        return pb.Position(entry_id=self._entry_id, batch_index=self._batch_index)


MessageId.earliest = MessageId(-1, 0, -1)
MessageId.latest = MessageId(-1, LATEST_ENTRY, -1)


class MultiplierRedeliveryBackoff:
    """Pulsar's ``MultiplierRedeliveryBackoff``: a negatively acknowledged message goes
    out again after ``min_delay_ms * multiplier ** redelivery_count``, at most
    ``max_delay_ms`` (``min_delay_ms`` on its first delivery).  Defaults as Pulsar's
    builder: 10 s, 10 min, 2."""

    __slots__ = ("min_delay_ms", "max_delay_ms", "multiplier")

    def __init__(self, min_delay_ms: int = 10_000, max_delay_ms: int = 600_000,
                 multiplier: float = 2.0) -> None:
        for name, value in (("min_delay_ms", min_delay_ms), ("max_delay_ms", max_delay_ms)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be a number of milliseconds >= 0, got {value!r}")
        if max_delay_ms < min_delay_ms:
            raise ValueError(f"max_delay_ms ({max_delay_ms}) must be >= min_delay_ms ({min_delay_ms})")
        if isinstance(multiplier, bool) or not isinstance(multiplier, (int, float)) or not multiplier > 1:
            raise ValueError(f"multiplier must be > 1, got {multiplier!r}")
        self.min_delay_ms = min_delay_ms
        self.max_delay_ms = max_delay_ms
        self.multiplier = float(multiplier)

    def next(self, redelivery_count: int) -> int:
        """The delay in ms before a message delivered ``redelivery_count`` times before
        goes out again."""
        if redelivery_count <= 0 or self.min_delay_ms <= 0:
            return self.min_delay_ms
        # Past this power the product passes max_delay_ms (and a float could overflow).
        if redelivery_count > 64 or self.min_delay_ms * self.multiplier ** redelivery_count >= self.max_delay_ms:
            return self.max_delay_ms
        return int(self.min_delay_ms * self.multiplier ** redelivery_count)

    def __repr__(self) -> str:
        return (f"MultiplierRedeliveryBackoff(min_delay_ms={self.min_delay_ms}, "
                f"max_delay_ms={self.max_delay_ms}, multiplier={self.multiplier})")


class ConsumerDeadLetterPolicy:
    """A subscription's dead-letter policy, as ``pulsar.ConsumerDeadLetterPolicy``: a
    message redelivered more than ``max_redeliver_count`` times is moved to
    ``dead_letter_topic`` (default ``<topic>-<subscription>-DLQ``) instead of going out
    again, on which ``initial_subscription_name`` (if given) is created first.  Magnetar
    moves it on the broker, the copy and the acknowledgement of the original in one
    database transaction (docs/client.md).  ``retry_letter_topic``: where
    ``reconsume_later`` sends (default ``<topic>-<subscription>-RETRY``; Java's field)."""

    __slots__ = ("_max", "_dlq", "_initial", "_retry")

    def __init__(self, max_redeliver_count: int, dead_letter_topic: str | None = None,
                 initial_subscription_name: str | None = None,
                 retry_letter_topic: str | None = None) -> None:
        if isinstance(max_redeliver_count, bool) or not isinstance(max_redeliver_count, int) \
                or max_redeliver_count < 1:
            raise ValueError(f"max_redeliver_count must be greater than 0, got {max_redeliver_count!r}")
        for name, value in (("dead_letter_topic", dead_letter_topic),
                            ("initial_subscription_name", initial_subscription_name),
                            ("retry_letter_topic", retry_letter_topic)):
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"{name} must be a non-empty str or None, got {value!r}")
        self._max = max_redeliver_count
        self._dlq = dead_letter_topic
        self._initial = initial_subscription_name
        self._retry = retry_letter_topic

    @property
    def max_redeliver_count(self) -> int:
        return self._max

    @property
    def dead_letter_topic(self) -> str | None:
        """The topic given, or None for the default ``<topic>-<subscription>-DLQ``."""
        return self._dlq

    @property
    def initial_subscription_name(self) -> str | None:
        return self._initial

    @property
    def retry_letter_topic(self) -> str | None:
        return self._retry

    def __repr__(self) -> str:
        return (f"ConsumerDeadLetterPolicy(max_redeliver_count={self._max}, "
                f"dead_letter_topic={self._dlq!r}, initial_subscription_name={self._initial!r})")
