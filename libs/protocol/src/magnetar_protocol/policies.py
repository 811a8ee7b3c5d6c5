"""Storage-lifecycle policies (Pulsar's retention, messageTTL, backlogQuota and
compactionThreshold), the delayed_delivery policy and a subscription's dead-letter
policy: their JSON shapes, validation and how a topic's effective policy is resolved.
Pure: no I/O; the admin validates bodies with it and brokers resolve what they read with it.

Semantics follow Apache Pulsar (docs/operations.md):
- retention ``{"retentionTimeInMinutes", "retentionSizeInMB"}``: how long / how much
  *acknowledged* data is kept; -1 is infinite; an acknowledged entry goes once either
  limit is exceeded (Pulsar's ManagedLedger trims a ledger when it is expired OR over
  the size quota); both 0 (the default) keeps nothing acknowledged.
- messageTTL (seconds, 0 = off): unacknowledged messages older than it are acknowledged
  (expired) for every subscription.
- backlogQuota ``{"limitSize" (bytes), "limitTime" (seconds), "policy"}``: -1 = no limit
  of that kind.
- compactionThreshold (bytes, 0 = off): a topic whose log past its compaction horizon
  holds more is compacted by its broker's lifecycle loop.
"""

from __future__ import annotations

from dataclasses import dataclass

HOLD = "producer_request_hold"
EXCEPTION = "producer_exception"
EVICTION = "consumer_backlog_eviction"
QUOTA_POLICIES = (HOLD, EXCEPTION, EVICTION)
# Pulsar's BacklogQuotaType values; Magnetar measures one backlog (bytes and age), so
# message_age is accepted as an alias of the same quota for clients that send it.
QUOTA_TYPES = ("destination_storage", "message_age")
MAX_VALUE = 2**62  # a bigint column, and far beyond any sane limit


class PolicyError(ValueError):
    """A policy body that is malformed or out of range (the admin answers 400)."""


@dataclass(frozen=True, slots=True)
class Retention:
    time_minutes: int = 0
    size_mb: int = 0

    def as_json(self) -> dict:
        return {"retentionTimeInMinutes": self.time_minutes, "retentionSizeInMB": self.size_mb}


@dataclass(frozen=True, slots=True)
class BacklogQuota:
    limit_size: int = -1
    limit_time: int = -1
    policy: str = HOLD

    def as_json(self) -> dict:
        return {"limitSize": self.limit_size, "limitTime": self.limit_time, "policy": self.policy}


@dataclass(frozen=True, slots=True)
class Policies:
    """A topic's effective lifecycle policies."""
    retention: Retention = Retention()
    message_ttl_s: int = 0
    quota: BacklogQuota | None = None
    compaction_threshold: int = 0   # bytes past the compaction horizon that start one; 0 = off


def _int(body: dict, key: str, low: int, what: str, default: int | None = None) -> int:
    value = body.get(key, default)
    if value is None:
        raise PolicyError(f"{what}: {key} is missing")
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(f"{what}: {key} must be an integer, not {value!r}")
    if value < low or value > MAX_VALUE:
        raise PolicyError(f"{what}: {key} must be {low} or more (-1 = infinite/no limit), not {value}"
                          if low == -1 else f"{what}: {key} must be between {low} and {MAX_VALUE}, not {value}")
    return value


def parse_retention(body) -> Retention:
    if not isinstance(body, dict):
        raise PolicyError('retention: the body must be {"retentionTimeInMinutes": N, "retentionSizeInMB": N}')
    unknown = set(body) - {"retentionTimeInMinutes", "retentionSizeInMB"}
    if unknown:
        raise PolicyError(f"retention: unknown field(s) {sorted(unknown)}")
    time_m = _int(body, "retentionTimeInMinutes", -1, "retention")
    size = _int(body, "retentionSizeInMB", -1, "retention")
    # Pulsar refuses a retention whose one limit is 0 and the other not: size 0 would
    # delete everything acknowledged at once whatever the time says (and vice versa).
    if (time_m == 0) != (size == 0):
        raise PolicyError(f"retention: time {time_m} min and size {size} MB must be both 0 (keep nothing "
                          "acknowledged) or both non-zero (use -1 for 'no limit of this kind')")
    return Retention(time_m, size)


def parse_ttl(body) -> int:
    if isinstance(body, bool) or not isinstance(body, int):
        raise PolicyError(f"messageTTL: the body must be a number of seconds, not {body!r}")
    if body < 0 or body > MAX_VALUE:
        raise PolicyError(f"messageTTL: {body} is out of range (0 = off, else seconds)")
    return body


def parse_compaction_threshold(body) -> int:
    """Pulsar's compactionThreshold: bytes of the topic not yet compacted that start a
    compaction (0 = off)."""
    if isinstance(body, bool) or not isinstance(body, int):
        raise PolicyError(f"compactionThreshold: the body must be a number of bytes, not {body!r}")
    if body < 0 or body > MAX_VALUE:
        raise PolicyError(f"compactionThreshold: {body} is out of range (0 = off, else bytes)")
    return body


def parse_backlog_quota(body, quota_type: str | None = None) -> BacklogQuota:
    if quota_type is not None and quota_type not in QUOTA_TYPES:
        raise PolicyError(f"backlogQuota: unknown backlogQuotaType {quota_type!r} (one of {list(QUOTA_TYPES)})")
    if not isinstance(body, dict):
        raise PolicyError('backlogQuota: the body must be {"limitSize": bytes, "limitTime": seconds, '
                          f'"policy": one of {list(QUOTA_POLICIES)}}}')
    unknown = set(body) - {"limitSize", "limitTime", "policy", "limit"}
    if unknown:
        raise PolicyError(f"backlogQuota: unknown field(s) {sorted(unknown)}")
    # "limit" is the deprecated name of limitSize in Pulsar's BacklogQuota.
    size = _int(body, "limitSize", -1, "backlogQuota", body.get("limit", -1))
    time_s = _int(body, "limitTime", -1, "backlogQuota", -1)
    policy = body.get("policy")
    if policy not in QUOTA_POLICIES:
        raise PolicyError(f"backlogQuota: policy must be one of {list(QUOTA_POLICIES)}, not {policy!r}")
    if size == -1 and time_s == -1:
        raise PolicyError("backlogQuota: set limitSize (bytes) or limitTime (seconds); both are -1")
    return BacklogQuota(size, time_s, policy)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A subscription's dead-letter policy as an operator sets it (Pulsar's
    DeadLetterPolicy fields): a message redelivered more than ``max_redeliver_count``
    times moves to ``dead_letter_topic`` ("" = ``<topic>-<subscription>-DLQ``), on which
    ``initial_subscription_name`` is created first ("" = none)."""
    max_redeliver_count: int
    dead_letter_topic: str = ""
    initial_subscription_name: str = ""
    retry_letter_topic: str = ""

    def as_json(self) -> dict:
        return {"maxRedeliverCount": self.max_redeliver_count,
                "deadLetterTopic": self.dead_letter_topic or None,
                "initialSubscriptionName": self.initial_subscription_name or None,
                "retryLetterTopic": self.retry_letter_topic or None}


def parse_dead_letter(body) -> DeadLetter:
    fields = ("maxRedeliverCount", "deadLetterTopic", "initialSubscriptionName", "retryLetterTopic")
    if not isinstance(body, dict):
        raise PolicyError('deadLetterPolicy: the body must be {"maxRedeliverCount": N, "deadLetterTopic": '
                          '"...", "initialSubscriptionName": "..."} (the last two optional)')
    unknown = set(body) - set(fields)
    if unknown:
        raise PolicyError(f"deadLetterPolicy: unknown field(s) {sorted(unknown)}")
    count = _int(body, "maxRedeliverCount", 1, "deadLetterPolicy")
    if count > 2**31 - 1:
        raise PolicyError(f"deadLetterPolicy: maxRedeliverCount {count} is out of range")
    texts = []
    for key in fields[1:]:
        value = body.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            raise PolicyError(f"deadLetterPolicy: {key} must be a non-empty string or null, not {value!r}")
        texts.append(value or "")
    return DeadLetter(count, *texts)


@dataclass(frozen=True, slots=True)
class DelayedDelivery:
    """Pulsar's delayed_delivery policy (DelayedDeliveryPolicies): ``active`` false delivers
    delayed messages at once; a delayed message goes out at most ``tick_ms`` after its
    time; a producer may ask for at most ``max_delay_ms`` (0: no limit)."""
    active: bool = True
    tick_ms: int = 1000
    max_delay_ms: int = 0

    def as_json(self) -> dict:
        return {"active": self.active, "tickTime": self.tick_ms, "maxDeliveryDelayInMillis": self.max_delay_ms}

    def delay_problem(self, deliver_at: int, now_ms: int) -> str | None:
        """Why a send asking for delivery at ``deliver_at`` (ms) is refused, or None."""
        if deliver_at < 0:
            return f"deliver_at_time {deliver_at} is negative"
        if self.max_delay_ms and deliver_at - now_ms > self.max_delay_ms:
            return (f"delivery in {deliver_at - now_ms} ms exceeds the maximum delivery delay of "
                    f"{self.max_delay_ms} ms (the namespace's delayed_delivery policy)")
        return None


def parse_delayed_delivery(body) -> DelayedDelivery:
    """Pulsar's DelayedDeliveryPolicies body: {"active": bool, "tickTime": ms,
    "maxDeliveryDelayInMillis": ms}; tickTime and the limit optional."""
    if not isinstance(body, dict):
        raise PolicyError('delayedDelivery: the body must be {"active": true|false, "tickTime": ms, '
                          '"maxDeliveryDelayInMillis": ms}')
    unknown = set(body) - {"active", "tickTime", "maxDeliveryDelayInMillis"}
    if unknown:
        raise PolicyError(f"delayedDelivery: unknown field(s) {sorted(unknown)}")
    active = body.get("active")
    if not isinstance(active, bool):
        raise PolicyError(f"delayedDelivery: active must be true or false, not {active!r}")
    tick = _int(body, "tickTime", 1, "delayedDelivery", 1000)
    limit = _int(body, "maxDeliveryDelayInMillis", 0, "delayedDelivery", 0)
    return DelayedDelivery(active, tick, limit)


def resolve_delayed(default: DelayedDelivery, namespace: Row | None, topic: Row | None) -> DelayedDelivery:
    """The topic's delayed_delivery policy over its namespace's over the broker's settings."""
    for row in (topic, namespace):
        if row is not None and row.delayed_delivery_active is not None:
            return DelayedDelivery(row.delayed_delivery_active,
                                   row.delayed_delivery_tick_ms or default.tick_ms,
                                   row.delayed_delivery_max_delay_ms or 0)
    return default


@dataclass(frozen=True, slots=True)
class Row:
    """One storage_policies row (namespace or topic level); None = not set there."""
    retention_time_minutes: int | None = None
    retention_size_mb: int | None = None
    message_ttl_seconds: int | None = None
    backlog_limit_size: int | None = None
    backlog_limit_time: int | None = None
    backlog_policy: str | None = None
    delayed_delivery_active: bool | None = None      # migration 0011
    delayed_delivery_tick_ms: int | None = None
    delayed_delivery_max_delay_ms: int | None = None
    compaction_threshold: int | None = None


def resolve(default_retention: Retention, default_ttl_s: int, namespace: Row | None,
            topic: Row | None, default_compaction_threshold: int = 0) -> Policies:
    """Topic-level over namespace-level over the broker's defaults, policy by policy."""
    layers = [r for r in (topic, namespace) if r is not None]
    retention, ttl, quota, threshold = default_retention, default_ttl_s, None, default_compaction_threshold
    for r in reversed(layers):  # namespace first, then the topic overrides it
        if r.retention_time_minutes is not None:
            retention = Retention(r.retention_time_minutes, r.retention_size_mb)
        if r.message_ttl_seconds is not None:
            ttl = r.message_ttl_seconds
        if r.backlog_policy is not None:
            quota = BacklogQuota(r.backlog_limit_size, r.backlog_limit_time, r.backlog_policy)
        if r.compaction_threshold is not None:
            threshold = r.compaction_threshold
    return Policies(retention, ttl, quota, threshold)
