"""The storage-lifecycle rules (partition/trimming.py) and policy parsing/resolution
(magnetar_protocol.policies): what may be trimmed, expired and evicted."""

import pytest

from magnetar_broker.partition.trimming import (
    MB,
    EntryMeta,
    evict_through,
    protected_from,
    quota_exceeded,
    trim_before,
    ttl_expire_through,
)
from magnetar_protocol.policies import (
    EVICTION,
    EXCEPTION,
    HOLD,
    BacklogQuota,
    PolicyError,
    Retention,
    Row,
    parse_backlog_quota,
    parse_retention,
    parse_ttl,
    resolve,
)

NOW = 10_000_000_000


def metas(n, age_ms=0, size=100, start=0):
    return [EntryMeta(start + i, NOW - age_ms, size) for i in range(n)]


# ---------------------------------------------------------------- what protects entries

def test_the_newest_entry_is_always_kept():
    assert protected_from(9, [], None) == 9
    assert protected_from(0, [], None) == 0


def test_the_slowest_mark_delete_bounds_trimming():
    # subscriptions at 4 and 7: entries 0..4 are acknowledged by both; 5 is not.
    assert protected_from(9, [7, 4], None) == 5


def test_an_entry_pending_in_a_transaction_ack_is_kept():
    assert protected_from(9, [7], 3) == 3


def test_a_subscription_that_acknowledged_nothing_keeps_everything():
    assert protected_from(9, [-1], None) == 0


# ---------------------------------------------------------------- retention

def test_no_retention_lets_every_acknowledged_entry_go():
    assert trim_before(metas(5), 500, Retention(0, 0), NOW) == 5


def test_infinite_retention_keeps_everything():
    assert trim_before(metas(5, age_ms=10**9), 500, Retention(-1, -1), NOW) is None


def test_retention_time_keeps_entries_younger_than_it():
    old = [EntryMeta(i, NOW - 11 * 60_000, 100) for i in range(3)]
    young = [EntryMeta(i, NOW - 60_000, 100) for i in range(3, 6)]
    assert trim_before(old + young, 600, Retention(10, -1), NOW) == 3


def test_retention_size_keeps_the_newest_bytes():
    # 5 MB stored, 2 MB retained: the oldest 3 entries of 1 MB go, young as they are.
    entries = [EntryMeta(i, NOW, MB) for i in range(5)]
    assert trim_before(entries, 5 * MB, Retention(-1, 2), NOW) == 3


def test_an_entry_goes_once_either_limit_is_exceeded():
    entries = [EntryMeta(i, NOW, MB) for i in range(5)]  # young, but over the size
    assert trim_before(entries, 5 * MB, Retention(60, 2), NOW) == 3
    old = [EntryMeta(i, NOW - 2 * 3600_000, 1) for i in range(5)]  # small, but old
    assert trim_before(old, 5, Retention(60, 2), NOW) == 5


# ---------------------------------------------------------------- the minimum age

TEN_MIN = 10 * 60_000


def test_nothing_younger_than_the_minimum_age_goes_whatever_retention_says():
    young = metas(5, age_ms=TEN_MIN - 1)
    assert trim_before(young, 500, Retention(0, 0), NOW, min_age_ms=TEN_MIN) is None
    # ...not even beyond the retention size, which otherwise removes young entries too.
    big = [EntryMeta(i, NOW - 1000, MB) for i in range(5)]
    assert trim_before(big, 5 * MB, Retention(-1, 2), NOW, min_age_ms=TEN_MIN) is None


def test_entries_older_than_the_minimum_age_go_under_the_usual_rules():
    old = [EntryMeta(i, NOW - TEN_MIN - 1, 100) for i in range(3)]
    exact = [EntryMeta(3, NOW - TEN_MIN, 100)]  # exactly the age: old enough
    young = [EntryMeta(i, NOW - 1000, 100) for i in range(4, 6)]
    assert trim_before(old + exact + young, 600, Retention(0, 0), NOW, min_age_ms=TEN_MIN) == 4
    # Retention still protects what the age alone would let go.
    assert trim_before(old + young, 500, Retention(60, -1), NOW, min_age_ms=TEN_MIN) is None


def test_a_young_entry_keeps_the_ones_after_it_even_if_they_look_older():
    # A clock skewed between two owners: trimming stops at the first young entry.
    skewed = [EntryMeta(0, NOW - TEN_MIN * 2, 1), EntryMeta(1, NOW - 5, 1), EntryMeta(2, NOW - TEN_MIN * 3, 1)]
    assert trim_before(skewed, 3, Retention(0, 0), NOW, min_age_ms=TEN_MIN) == 1


def test_a_minimum_age_of_zero_is_no_floor():
    assert trim_before(metas(5), 500, Retention(0, 0), NOW, min_age_ms=0) == 5


def test_nothing_to_trim_without_candidates():
    assert trim_before([], 0, Retention(0, 0), NOW) is None


# ---------------------------------------------------------------- TTL

def test_ttl_expires_only_entries_older_than_it():
    backlog = [EntryMeta(i, NOW - 120_000, 1) for i in range(4)] + [EntryMeta(i, NOW - 1000, 1) for i in range(4, 6)]
    assert ttl_expire_through(backlog, 60, NOW) == 3
    assert ttl_expire_through(backlog, 600, NOW) is None
    assert ttl_expire_through(backlog, 0, NOW) == 5  # expire-messages -t 0: everything
    assert ttl_expire_through(backlog, -1, NOW) is None


# ---------------------------------------------------------------- backlog quota

def test_quota_by_size_and_by_time():
    q = BacklogQuota(1000, -1, HOLD)
    assert not quota_exceeded(q, 1000, NOW - 10**9, NOW)
    assert quota_exceeded(q, 1001, None, NOW)
    t = BacklogQuota(-1, 60, EXCEPTION)
    assert not quota_exceeded(t, 10**12, NOW - 59_000, NOW)
    assert quota_exceeded(t, 1, NOW - 61_000, NOW)
    assert not quota_exceeded(None, 10**12, 0, NOW)


def test_eviction_moves_the_cursor_just_far_enough():
    backlog = metas(10, size=100)  # 1000 bytes
    assert evict_through(backlog, 1000, BacklogQuota(700, -1, EVICTION), NOW) == 2  # 0..2 go: 700 left
    assert evict_through(backlog, 1000, BacklogQuota(5000, -1, EVICTION), NOW) is None


def test_eviction_by_age():
    backlog = [EntryMeta(i, NOW - (10 - i) * 10_000, 1) for i in range(10)]  # 100 s .. 10 s old
    assert evict_through(backlog, 10, BacklogQuota(-1, 45, EVICTION), NOW) == 5  # 40 s old stays


# ---------------------------------------------------------------- parsing and resolution

def test_retention_bodies():
    assert parse_retention({"retentionTimeInMinutes": -1, "retentionSizeInMB": 100}) == Retention(-1, 100)
    assert parse_retention({"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}) == Retention(0, 0)
    for bad in ({"retentionTimeInMinutes": -2, "retentionSizeInMB": 1}, {"retentionTimeInMinutes": 5},
                {"retentionTimeInMinutes": 5, "retentionSizeInMB": 0}, {"retentionTimeInMinutes": "5",
                                                                         "retentionSizeInMB": 1},
                {"retentionTimeInMinutes": True, "retentionSizeInMB": 1}, [], None,
                {"retentionTimeInMinutes": 1, "retentionSizeInMB": 1, "x": 1},
                {"retentionTimeInMinutes": 2**70, "retentionSizeInMB": 1}):
        with pytest.raises(PolicyError):
            parse_retention(bad)


def test_ttl_and_quota_bodies():
    assert parse_ttl(0) == 0 and parse_ttl(3600) == 3600
    for bad in (-1, "10", 1.5, None, True, 2**70):
        with pytest.raises(PolicyError):
            parse_ttl(bad)
    assert parse_backlog_quota({"limitSize": 10, "policy": EVICTION}) == BacklogQuota(10, -1, EVICTION)
    assert parse_backlog_quota({"limitTime": 5, "policy": HOLD}, "destination_storage") == BacklogQuota(-1, 5, HOLD)
    for bad, qtype in (({"limitSize": 10, "policy": "drop_everything"}, None),
                       ({"limitSize": -2, "policy": HOLD}, None), ({"policy": HOLD}, None),
                       ({"limitSize": 10, "policy": HOLD}, "elsewhere"), ("x", None)):
        with pytest.raises(PolicyError):
            parse_backlog_quota(bad, qtype)


def test_topic_overrides_namespace_overrides_broker_default():
    default = Retention(0, 0)
    ns = Row(retention_time_minutes=60, retention_size_mb=100, message_ttl_seconds=30)
    topic = Row(retention_time_minutes=-1, retention_size_mb=-1, backlog_limit_size=5, backlog_limit_time=-1,
                backlog_policy=HOLD)
    assert resolve(default, 0, None, None).retention == default
    p = resolve(default, 0, ns, None)
    assert p.retention == Retention(60, 100) and p.message_ttl_s == 30 and p.quota is None
    p = resolve(default, 0, ns, topic)
    assert p.retention == Retention(-1, -1) and p.message_ttl_s == 30 and p.quota == BacklogQuota(5, -1, HOLD)
