"""Where an operator's backlog operation lands on a cursor (skip, peek, reset, create at a
position, the message id a request names).  Pure: no I/O.

The unit of skip and peek is a *message*, not an entry: an entry is a producer batch, so
skipping 3 messages of an entry of 5 acknowledges its indexes 0-2 and leaves 3-4 due, and
messages already acknowledged individually (or held by a transaction's pending ack) are
stepped over, not counted, as Pulsar's cursor does (``skipEntries`` with
``IndividualDeletedEntries.Exclude``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from magnetar_broker.subscription.cursor import Cursor

WHOLE = -1

# A skip or peek reads the log in chunks of this many entries.
READ_CHUNK = 256
# Peek answers at most this many messages per request (pulsar-admin peeks one per request).
MAX_PEEK = 1000


@dataclass
class SkipPlan:
    """What a skip acknowledges: ``whole`` entries and, for the last one reached part
    way, ``partial`` {entry id: mask of batch indexes}.  ``skipped`` messages in all."""
    whole: list[int] = field(default_factory=list)
    partial: dict[int, int] = field(default_factory=dict)
    skipped: int = 0

    def apply(self, cursor: Cursor, sizes: dict[int, int]) -> None:
        for entry_id in self.whole:
            cursor.ack(entry_id, WHOLE, sizes.get(entry_id))
        for entry_id, mask in self.partial.items():
            for index in range(mask.bit_length()):
                if mask >> index & 1:
                    cursor.ack(entry_id, index, sizes.get(entry_id))


def _due_mask(cursor: Cursor, entry_id: int, num_messages: int,
              held: Callable[[int, int], int]) -> int:
    return cursor.unacked_mask(entry_id, num_messages) & ~held(entry_id, num_messages)


def plan_skip(cursor: Cursor, entries: Iterable[tuple[int, int]], count: int, plan: SkipPlan | None = None,
              held: Callable[[int, int], int] = lambda e, n: 0) -> SkipPlan:
    """Skip the next ``count - plan.skipped`` due messages of ``entries`` ((entry id,
    number of messages), ascending).  Call again with the same plan and the next chunk
    of entries until ``plan.skipped == count`` or the log ends.  ``held``: the mask of an
    entry's messages a transaction holds (never skipped: its commit decides)."""
    plan = plan or SkipPlan()
    for entry_id, num_messages in entries:
        if plan.skipped >= count:
            break
        due = _due_mask(cursor, entry_id, num_messages, held)
        if not due:
            continue
        left = count - plan.skipped
        if due.bit_count() <= left:
            if due == cursor.unacked_mask(entry_id, num_messages):
                plan.whole.append(entry_id)
            else:
                plan.partial[entry_id] = due
            plan.skipped += due.bit_count()
        else:
            plan.partial[entry_id] = lowest_bits(due, left)
            plan.skipped += left
    return plan


def due_positions(cursor: Cursor, entries: Iterable[tuple[int, int]], limit: int,
                  held: Callable[[int, int], int] = lambda e, n: 0) -> list[tuple[int, int]]:
    """The first ``limit`` unacknowledged messages of ``entries`` as (entry id, batch
    index): what peek shows, in delivery order."""
    out: list[tuple[int, int]] = []
    for entry_id, num_messages in entries:
        due = _due_mask(cursor, entry_id, num_messages, held)
        for index in range(num_messages):
            if len(out) >= limit:
                return out
            if due >> index & 1:
                out.append((entry_id, index))
    return out


def lowest_bits(mask: int, count: int) -> int:
    """The lowest ``count`` set bits of ``mask``."""
    out = 0
    while mask and count > 0:
        low = mask & -mask
        out |= low
        mask ^= low
        count -= 1
    return out


def message_id_problem(entry_id: int, batch_index: int, next_entry_id: int,
                       first_entry_id: int | None) -> str | None:
    """Why (entry_id, batch_index) names no message of the log (a 404's reason), else None.
    ``first_entry_id``: the oldest entry still stored (None: the log is empty)."""
    if entry_id < 0:
        return f"entry id {entry_id} is negative"
    if batch_index < WHOLE:
        return f"batch index {batch_index} is below -1 (-1: the whole entry)"
    if entry_id >= next_entry_id:
        last = next_entry_id - 1
        return (f"entry {entry_id} is past the end of the log (last entry {last})" if last >= 0
                else f"entry {entry_id} does not exist: the log is empty")
    if first_entry_id is None or entry_id < first_entry_id:
        return f"entry {entry_id} is no longer stored (the oldest stored entry is {first_entry_id})"
    return None


def reset_time_problem(timestamp_ms: int, now_ms: int, tolerance_ms: int = 1000) -> str | None:
    """A reset by publish time must name the past (Pulsar: "reset to a future time").
    ``tolerance_ms`` allows for clocks a little apart between the admin and the broker."""
    if timestamp_ms < 0:
        return f"timestamp {timestamp_ms} is negative"
    if timestamp_ms > now_ms + tolerance_ms:
        return (f"timestamp {timestamp_ms} is {timestamp_ms - now_ms} ms in the future; a cursor can "
                "be reset only to a time that has passed")
    return None
