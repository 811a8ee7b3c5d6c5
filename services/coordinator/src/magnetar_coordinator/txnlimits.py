"""Per-role limits on transactions (issue 24): how many a role may hold OPEN on one
coordinator, and how many it may open per second.  Pure: the clock comes in as an
argument, the OPEN counts from the database (``reset_open``).

A role that opened 197,004 OPEN transactions with 3-hour timeouts in 2.9 s held 26 MB
of rows for hours; Pulsar has no such limit.  Superusers are exempt (the service checks
that), as are all callers when authentication is off (everyone is one superuser role).

OPEN counts are the database's as of the last ``reset_open`` plus what this process
opened since, so a transaction ended since then still counts until the next reset (a
few seconds): the count errs towards refusing, never towards letting a role past."""

from __future__ import annotations

from dataclasses import dataclass, field


class LimitExceeded(Exception):
    """The reason names the limit and its setting."""


class TooManyOpen(LimitExceeded):
    """Refused until the role ends some: retrying at once cannot help."""


class TooFast(LimitExceeded):
    """Refused for now: a retry after a pause passes."""


@dataclass
class _Bucket:
    tokens: float
    at: float


@dataclass
class RoleTxnLimits:
    max_open: int          # 0: no limit
    max_per_s: float       # 0: no limit; the burst is one second's worth
    _open: dict[str, int] = field(default_factory=dict)
    _buckets: dict[str, _Bucket] = field(default_factory=dict)

    def admit(self, role: str, count: int, now: float) -> None:
        """Count ``count`` new OPEN transactions of ``role``, or raise LimitExceeded
        (nothing counted)."""
        held = self._open.get(role, 0)
        if self.max_open and held + count > self.max_open:
            raise TooManyOpen(
                f"role {role!r} holds {held} open transactions on this coordinator; "
                f"{count} more would pass the limit of {self.max_open} "
                "(setting MAGNETAR_MAX_OPEN_TXNS_PER_ROLE): end some first")
        bucket = None
        if self.max_per_s:
            bucket = self._buckets.get(role)
            if bucket is None:
                bucket = self._buckets[role] = _Bucket(self.max_per_s, now)
            bucket.tokens = min(self.max_per_s, bucket.tokens + (now - bucket.at) * self.max_per_s)
            bucket.at = now
            if bucket.tokens < count:
                raise TooFast(
                    f"role {role!r} opens transactions faster than the limit of "
                    f"{self.max_per_s:g} per second on this coordinator "
                    "(setting MAGNETAR_MAX_NEW_TXNS_PER_ROLE_PER_S): retry later")
            bucket.tokens -= count
        self._open[role] = held + count

    def reset_open(self, counts: dict[str, int], opened_since: dict[str, int]) -> None:
        """The database's OPEN counts by role, plus what was opened while it was read."""
        merged = dict(counts)
        for role, n in opened_since.items():
            merged[role] = merged.get(role, 0) + n
        self._open = merged

    def open_count(self, role: str) -> int:
        return self._open.get(role, 0)

    def forget_idle(self, now: float) -> None:
        """Drop full buckets (roles idle for a second or more): bounded memory."""
        self._buckets = {r: b for r, b in self._buckets.items()
                         if b.tokens + (now - b.at) * self.max_per_s < self.max_per_s}
