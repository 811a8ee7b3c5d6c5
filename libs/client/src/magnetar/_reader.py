"""Readers: consumers on a non-durable subscription that start at a message id.

The position rules are pure functions, so they are tested without a broker:
- ``MessageId.earliest`` is entry 0, inclusive; ``MessageId.latest`` is entry 2^63-1;
- after a reconnect a reader starts just after the last message it returned;
- ``has_message_available`` compares the broker's last visible message with the last
  message returned (or the start position when none was returned yet).
"""

from __future__ import annotations

import asyncio

from magnetar._types import LATEST_ENTRY, MessageId
from magnetar_protocol import magnetar_pb2 as pb

Pos = tuple[int, int]


def start_position(start: MessageId, inclusive: bool,
                   returned: Pos | None) -> tuple[pb.Position, bool]:
    """(start_position, start_inclusive) of a reader's subscribe request."""
    if returned is not None:
        return pb.Position(entry_id=returned[0], batch_index=returned[1]), False
    if start.entry_id() >= LATEST_ENTRY:
        return pb.Position(entry_id=LATEST_ENTRY, batch_index=-1), False
    if start == MessageId.earliest or start.entry_id() < 0:
        return pb.Position(entry_id=0, batch_index=-1), True
    return pb.Position(entry_id=start.entry_id(), batch_index=start.batch_index()), inclusive


def has_more(last: Pos | None, returned: Pos | None, start: tuple[int, int, bool] | None,
             mark_delete: int) -> bool:
    """Whether the partition holds a message after what the reader returned.

    ``last`` is the last visible (entry, batch index), None when the partition is empty;
    ``start`` is (entry, batch index, inclusive) or None when unknown (after a seek by
    time, or for a latest reader), in which case the cursor's mark-delete entry decides.
    """
    if last is None:
        return False
    if returned is not None:
        return last > returned
    if start is None:
        return last[0] > mark_delete
    entry, index, inclusive = start
    if index < 0:  # the whole entry
        return last[0] >= entry if inclusive else last[0] > entry
    return last >= (entry, index) if inclusive else last > (entry, index)


def initial_start(start: MessageId, inclusive: bool) -> tuple[int, int, bool] | None:
    """The ``start`` of ``has_more`` for a reader that returned nothing yet."""
    if start.entry_id() >= LATEST_ENTRY:
        return None  # the cursor began at the end: mark-delete says what came since
    position, incl = start_position(start, inclusive, None)
    return (position.entry_id, position.batch_index, incl)


class Reader:
    """``magnetar.asyncio`` reader (create it with ``await client.create_reader``)."""

    def __init__(self, consumer) -> None:
        self._consumer = consumer

    async def read_next(self, timeout_millis: int | None = None):
        """The next message; raises magnetar.Timeout when none arrives in time."""
        return await self._consumer.receive(timeout_millis)

    async def has_message_available(self) -> bool:
        """Whether a message after the last one read exists."""
        return await self._consumer.has_message_available()

    async def seek(self, message_id_or_timestamp) -> None:
        """Move to a message id (that message is read next) or a publish time (ms)."""
        await self._consumer.seek(message_id_or_timestamp)

    def undecodable_entries(self) -> int:
        """How many entries were skipped because their batch did not decode."""
        return self._consumer.undecodable_entries()

    def topic(self) -> str:
        """The topic's full name."""
        return self._consumer.topic()

    def is_connected(self) -> bool:
        """Whether every partition has a live reader."""
        return self._consumer.is_connected()

    async def close(self) -> None:
        """Close the reader (its subscription goes with it)."""
        await self._consumer.close()

    async def __aenter__(self) -> "Reader":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()


async def gather_last(parts, core) -> list:
    """The last-message-id answer of every partition, asked concurrently."""
    async def one(part):
        return await core.with_retries("last message id", lambda: core.call(
            part.url, "/v1/consumers/last-message-id",
            pb.LastMessageIdRequest(consumer_id=part.consumer_id, session_id=part.session_id),
            pb.LastMessageIdResponse))
    return await asyncio.gather(*(one(p) for p in parts))
