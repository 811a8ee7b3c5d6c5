"""Public value types: message ids, transaction ids, enums (as ``pulsar-client`` names them)."""

from __future__ import annotations

import enum
import functools
from typing import NamedTuple

from magnetar_protocol import magnetar_pb2 as pb

LATEST_ENTRY = (1 << 63) - 1


class ProducerAccessMode(enum.IntEnum):
    Shared = pb.ACCESS_SHARED
    Exclusive = pb.ACCESS_EXCLUSIVE
    WaitForExclusive = pb.ACCESS_WAIT_FOR_EXCLUSIVE
    ExclusiveWithFencing = pb.ACCESS_EXCLUSIVE_WITH_FENCING


class ConsumerType(enum.IntEnum):
    Exclusive = pb.SUB_EXCLUSIVE
    Shared = pb.SUB_SHARED
    Failover = pb.SUB_FAILOVER
    KeyShared = pb.SUB_KEY_SHARED


class InitialPosition(enum.IntEnum):
    Latest = pb.INITIAL_LATEST
    Earliest = pb.INITIAL_EARLIEST


class Result(enum.Enum):
    """The first argument of a ``send_async`` callback on success."""

    Ok = "Ok"


class TransactionState(enum.Enum):
    OPEN = "OPEN"
    COMMITTING = "COMMITTING"
    COMMITTED = "COMMITTED"
    ABORTING = "ABORTING"
    ABORTED = "ABORTED"
    ERROR = "ERROR"


class TxnID(NamedTuple):
    most_bits: int
    least_bits: int

    def __str__(self) -> str:
        return f"({self.most_bits},{self.least_bits})"

    def to_wire(self) -> pb.TxnId:
        return pb.TxnId(most_bits=self.most_bits, least_bits=self.least_bits)


@functools.total_ordering
class MessageId:
    """Where a message sits: (partition, entry id, index in the batch, batch size)."""

    __slots__ = ("_partition", "_entry_id", "_batch_index", "_batch_size")
    earliest: "MessageId"
    latest: "MessageId"

    def __init__(self, partition: int = -1, entry_id: int = -1, batch_index: int = -1, batch_size: int = 0):
        self._partition = partition
        self._entry_id = entry_id
        self._batch_index = batch_index
        self._batch_size = batch_size

    def partition(self) -> int:
        return self._partition

    def entry_id(self) -> int:
        return self._entry_id

    def batch_index(self) -> int:
        return self._batch_index

    def batch_size(self) -> int:
        return self._batch_size

    def ledger_id(self) -> int:  # pulsar-client compatibility: one "ledger" per partition
        return 0

    def _key(self) -> tuple[int, int, int]:
        return (self._partition, self._entry_id, self._batch_index)

    def __eq__(self, other) -> bool:
        return isinstance(other, MessageId) and self._key() == other._key()

    def __lt__(self, other: "MessageId") -> bool:
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"MessageId({self._partition}, {self._entry_id}, {self._batch_index})"

    def __str__(self) -> str:
        return f"({self._partition},{self._entry_id},{self._batch_index})"

    def serialize(self) -> bytes:
        return pb.MessageIdData(partition=self._partition, entry_id=max(self._entry_id, 0),
                                batch_index=self._batch_index, batch_size=self._batch_size
                                ).SerializeToString() + (b"" if self._entry_id >= 0 else b"\x00")

    @staticmethod
    def deserialize(data: bytes) -> "MessageId":
        negative = data.endswith(b"\x00") and len(data) > 0
        wire = pb.MessageIdData.FromString(data[:-1] if negative else data)
        return MessageId(wire.partition, -1 if negative else wire.entry_id, wire.batch_index, wire.batch_size)

    def to_position(self, inclusive: bool = True) -> pb.Position:
        return pb.Position(entry_id=self._entry_id, batch_index=self._batch_index)


MessageId.earliest = MessageId(-1, 0, -1)
MessageId.latest = MessageId(-1, LATEST_ENTRY, -1)
