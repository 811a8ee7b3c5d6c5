"""Which path ends a transaction (issue 18): one SQL transaction on the broker hosting
its coordinator, or the two-phase fan-out.  Pure: plain values in, a plan out."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class OnePhasePlan:
    """The participants a one-phase end writes, in the order their writers are held
    (partitions by topic name, then subscriptions by (topic, name)): every one-phase end
    takes them in this order, so two of them never wait on each other."""
    partitions: tuple[str, ...]
    subscriptions: tuple[tuple[str, str], ...]

    def same_participants(self, partitions: Iterable[str],
                          subscriptions: Iterable[tuple[str, str]]) -> bool:
        """Whether a later read of the registrations found exactly these participants
        (a registration that raced the hold makes the plan stale)."""
        return (tuple(sorted(set(partitions))) == self.partitions
                and tuple(sorted(set(subscriptions))) == self.subscriptions)


def plan_one_phase(enabled: bool, partitions: Iterable[str],
                   subscriptions: Iterable[tuple[str, str]],
                   served_here: Collection[str]) -> OnePhasePlan | None:
    """The one-phase plan, or None for the two-phase path: the setting is off, or some
    participant's partition is not served by this broker right now (owned elsewhere,
    not loaded, or its ownership is moving).  A transaction with no participant at all
    ends in one phase too (its status alone)."""
    if not enabled:
        return None
    parts = tuple(sorted(set(partitions)))
    subs = tuple(sorted(set(subscriptions)))
    if any(p not in served_here for p in parts) or any(t not in served_here for t, _ in subs):
        return None
    return OnePhasePlan(parts, subs)


def union(plans: Iterable[OnePhasePlan]) -> OnePhasePlan:
    """The participants of a group of one-phase ends written together (group commit),
    in the same holding order."""
    parts: set[str] = set()
    subs: set[tuple[str, str]] = set()
    for plan in plans:
        parts.update(plan.partitions)
        subs.update(plan.subscriptions)
    return OnePhasePlan(tuple(sorted(parts)), tuple(sorted(subs)))
