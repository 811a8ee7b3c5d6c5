"""What trimming, TTL and backlog-quota eviction may do to a partition's log.  Pure: no
I/O, no clock (``now_ms`` comes in); the broker's lifecycle loop feeds it rows.

The safety rules (docs/design.md §7) are all here, so a reviewer checks them in one place:
- nothing a durable subscription has not acknowledged goes: the bound is the slowest
  durable cursor's mark-delete position (entries acknowledged individually beyond a
  hole stay until the hole is acknowledged: the cursor folds contiguous acks into
  mark-delete, and that is the only range that is safe whatever the cursor's bitsets);
- nothing pending in a transaction's acknowledgement goes (its abort makes it
  unacknowledged again);
- nothing retention still protects goes: an acknowledged entry may go once it is older
  than the retention time OR beyond the retention size (Pulsar's rule; -1 = that limit
  never passes);
- the newest entry always stays, so the log's next entry id survives a restart (it is
  read back as max(entry_id) + 1);
- nothing younger than the minimum age goes, whatever the cursors and retention say
  (Pulsar never deletes the ledger being written, which rolls over after at least
  managedLedgerMinLedgerRolloverTimeMinutes, 10): a subscriber or reader arriving
  within that age from Earliest gets everything written.  TTL and backlog-quota
  eviction move cursors only, as Pulsar's do, so the age does not hold them back.
"""

from __future__ import annotations

from magnetar_broker.entry import EntryMeta
from magnetar_protocol.policies import BacklogQuota, Retention

MB = 1024 * 1024


def protected_from(last_entry_id: int, mark_deletes: list[int], pending_ack_min: int | None) -> int:
    """The lowest entry id nothing may trim: entries below it are acknowledged by every
    durable subscription (``mark_deletes``), pending in no transaction, and not the newest.
    With no subscriptions only the newest entry is protected here (retention decides)."""
    bound = last_entry_id  # keep the newest entry: it carries the next entry id
    if mark_deletes:
        bound = min(bound, min(mark_deletes) + 1)
    if pending_ack_min is not None:
        bound = min(bound, pending_ack_min)
    return max(bound, 0)


def trim_before(candidates: list[EntryMeta], total_size: int, retention: Retention, now_ms: int,
                min_age_ms: int = 0) -> int | None:
    """Of ``candidates`` (the oldest entries, in order, all below ``protected_from``),
    the entry id before which everything may go under ``retention``; None for nothing.
    ``total_size``: the bytes of the whole partition log (for the size limit);
    ``min_age_ms``: entries published less than this long ago stay (0: no floor)."""
    upto = None
    removed = 0
    for e in candidates:
        if min_age_ms > 0 and e.publish_time_ms > now_ms - min_age_ms:
            break  # too young: it and everything after it stay (trimming goes oldest first)
        expired = retention.time_minutes >= 0 and e.publish_time_ms < now_ms - retention.time_minutes * 60_000
        over_size = retention.size_mb >= 0 and total_size - removed > retention.size_mb * MB
        if not (expired or over_size):
            break
        removed += e.size
        upto = e.entry_id + 1
    return upto


def ttl_expire_through(candidates: list[EntryMeta], ttl_s: int, now_ms: int) -> int | None:
    """The last entry of ``candidates`` (a subscription's backlog, oldest first) older
    than ``ttl_s``: everything up to it is expired (acknowledged).  None: nothing.
    (expire-messages passes 0 for "everything published so far"; a messageTTL of 0
    means off, and the loop does not call this then.)"""
    if ttl_s < 0:
        return None
    last = None
    for e in candidates:
        if e.publish_time_ms >= now_ms - ttl_s * 1000:
            break
        last = e.entry_id
    return last


def quota_exceeded(quota: BacklogQuota | None, backlog_bytes: int, oldest_unacked_ms: int | None,
                   now_ms: int) -> bool:
    """Is the slowest subscription's backlog beyond the quota (size in bytes, or age of
    its oldest unacknowledged entry in seconds)?"""
    if quota is None:
        return False
    if quota.limit_size >= 0 and backlog_bytes > quota.limit_size:
        return True
    return (quota.limit_time >= 0 and oldest_unacked_ms is not None
            and now_ms - oldest_unacked_ms > quota.limit_time * 1000)


def evict_through(backlog: list[EntryMeta], backlog_bytes: int, quota: BacklogQuota, now_ms: int) -> int | None:
    """consumer_backlog_eviction: the entry through which the slowest subscription's
    cursor moves so its backlog is within the quota again (oldest entries first, as
    Pulsar evicts); ``backlog`` is that subscription's unacknowledged entries, oldest
    first.  None: nothing to evict."""
    through = None
    left = backlog_bytes
    for e in backlog:
        if not quota_exceeded(quota, left, e.publish_time_ms, now_ms):
            break
        left -= e.size
        through = e.entry_id
    return through
