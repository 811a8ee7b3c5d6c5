"""The backlog quota on the send path.  Pure: the partition log feeds it appends and the
lifecycle loop's exact measurements, and passes the time in.

The exact check (the slowest durable subscription's backlog, in SQL: lifecycle.py) is
too dear for every send, and the lifecycle pass that runs it comes only every few
seconds.  So each partition keeps an estimate: the last exact backlog plus every byte
appended since.  Acknowledgements are not subtracted (which cursor is slowest is known
only to SQL), so the estimate only errs high: a send that sees it under the limit goes
on with no query; one that sees it over asks for an exact check first, at most once per
``recheck_ms`` so a backlog hovering at the limit costs a few queries a second, not one
a send.  An acknowledgement on a blocked partition asks for a check too, so held sends
are released as soon as the backlog is back under the limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from magnetar_broker.partition.trimming import quota_exceeded
from magnetar_protocol.policies import EXCEPTION, HOLD, BacklogQuota


@dataclass
class BacklogEstimate:
    quota: BacklogQuota | None = None  # the partition's quota, as of the last exact check
    subscribed: bool = False           # any durable subscription (no subscription, no backlog)
    backlog_bytes: int = 0             # last exact backlog + bytes appended since
    oldest_ms: int | None = None       # publish time of the slowest subscription's oldest unacked entry
    checked_ms: int | None = None      # when the send path last asked for an exact check

    def measured(self, quota: BacklogQuota | None, subscribed: bool, backlog_bytes: int,
                 oldest_ms: int | None) -> None:
        """An exact check's figures (``backlog_bytes`` may include appends made while it ran)."""
        self.quota, self.subscribed = quota, subscribed
        self.backlog_bytes, self.oldest_ms = backlog_bytes, oldest_ms

    def appended(self, nbytes: int, publish_ms: int) -> None:
        if self.subscribed:
            self.backlog_bytes += nbytes
            if self.oldest_ms is None:
                self.oldest_ms = publish_ms

    def over(self, now_ms: int) -> bool:
        """Does the estimate pass a quota that refuses or holds sends?"""
        q = self.quota
        return (q is not None and q.policy in (HOLD, EXCEPTION) and self.subscribed
                and quota_exceeded(q, self.backlog_bytes, self.oldest_ms, now_ms))


def check_before_send(est: BacklogEstimate, blocked: str | None, now_ms: int, recheck_ms: int) -> bool:
    """Should a send wait for an exact quota check first?  When the partition is not
    blocked yet, the estimate says over, and no check was asked for within ``recheck_ms``
    (the first crossing is always checked)."""
    if blocked is not None or not est.over(now_ms):
        return False
    return est.checked_ms is None or now_ms - est.checked_ms >= recheck_ms
