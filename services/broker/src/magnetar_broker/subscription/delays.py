"""Delayed delivery's rules.  Pure: no I/O; times are ms since the epoch, passed in.

Pulsar's semantics: a message with a delivery time is not dispatched before it on a
Shared or Key_Shared subscription (Exclusive and Failover deliver at once), and goes out
at most one tick after it.  A subscription that honours delays passes the delayed
messages it reads (its cursor acknowledges them) and keeps them apart, keyed by
(delivery time, entry): ``Delayed`` rows, in memory until the cursor is saved, in
PostgreSQL after (``delayed_deliveries``), found again by time through their key.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar_broker.subscription.cursor import full_mask

Key = tuple[int, int]  # (delivery time, entry id): a delayed row's order and identity


@dataclass(slots=True)
class Delayed:
    """Messages of one entry due at one time."""

    deliver_at: int
    entry_id: int
    mask: int          # the batch indices still to deliver
    num_messages: int  # the entry's size

    @property
    def key(self) -> Key:
        return self.deliver_at, self.entry_id

    def indices(self) -> bytes:
        """The stored form of ``mask``: a little-endian bitset, empty for the whole entry."""
        if self.mask == full_mask(self.num_messages):
            return b""
        return self.mask.to_bytes((self.mask.bit_length() + 7) // 8 or 1, "little")


def stored_mask(indices: bytes, num_messages: int) -> int:
    return int.from_bytes(indices, "little") if indices else full_mask(num_messages)


def split_by_time(times: list[int], mask: int, now_ms: int) -> tuple[int, dict[int, int]]:
    """Of the messages ``mask`` of a batch whose delivery times are ``times`` (0: none),
    the mask of those due now and {delivery time: mask} of the later ones."""
    later: dict[int, int] = {}
    for index, at in enumerate(times):
        bit = 1 << index
        if at > now_ms and mask & bit:
            later[at] = later.get(at, 0) | bit
    due = mask
    for bits in later.values():
        due &= ~bits
    return due, later


def wake_at(deliver_at: int, tick_ms: int) -> int:
    """When to look for what is due at ``deliver_at``: the next tick boundary at or after
    it, so messages due within one tick go out together (Pulsar's tickTime)."""
    tick = max(tick_ms, 1)
    return -(-deliver_at // tick) * tick
