"""Storage-lifecycle policy commands shared by ``namespaces`` and ``topics`` (as in
pulsar-admin): set/get/remove-retention, -message-ttl, -backlog-quota, -delayed-delivery,
-compaction-threshold, plus
``namespaces policies`` and ``topics expire-messages``.  Sizes take Pulsar's units
(10M, 2G, 1T; bytes without a unit for quotas, MB for retention) and times its suffixes
(30s, 10m, 3h, 2d, 1w; minutes without one for retention)."""

from __future__ import annotations

import json
import re

from magnetar.admin_cli._http import UsageError
from magnetar.admin_cli._names import duration_ms

_SIZE = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_TIME = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
QUOTA_POLICIES = ("producer_request_hold", "producer_exception", "consumer_backlog_eviction")


def _amount(text: str, units: dict[str, int], default_unit: str, what: str, example: str) -> int:
    """'-1' -> -1; 'N<unit>' -> N times the unit; a bare number is in ``default_unit``."""
    m = re.fullmatch(r"\s*(-1|\d+)\s*([a-zA-Z]?)[bB]?\s*", text)
    unit = (m[2] or default_unit).lower() if m else ""
    if not m or unit not in units:
        raise UsageError(f"{what} {text!r}: use -1 or a number with an optional unit "
                         f"{', '.join(u.upper() or '(none)' for u in units)} (e.g. {example})")
    return -1 if m[1] == "-1" else int(m[1]) * units[unit]


def size_bytes(text: str, default_unit: str = "") -> int:
    """'-1' -> -1; '10M' -> bytes; a bare number is in ``default_unit``."""
    return _amount(text, _SIZE, default_unit, "size", "10G")


def seconds(text: str, default_unit: str = "s") -> int:
    """'-1' -> -1; '3h' -> seconds; a bare number is in ``default_unit``."""
    return _amount(text, _TIME, default_unit, "time", "3h")


def add_policy_commands(add, scope: str, path_of) -> None:
    """The policy commands on ``scope`` ("namespace" or "topic"), whose admin path
    ``path_of(args)`` gives."""
    def set_retention(api, out, a) -> None:
        size = size_bytes(a.size, "m")
        size_mb = -1 if size == -1 else size // (1024 * 1024)
        if size not in (-1, 0) and size_mb == 0:
            raise UsageError(f"--size {a.size}: retention is counted in whole MB (at least 1M)")
        minutes = seconds(a.time, "m")
        minutes = -1 if minutes == -1 else minutes // 60
        body = {"retentionTimeInMinutes": minutes, "retentionSizeInMB": size_mb}
        api.request("POST", path_of(a) + "/retention", body)
        out.done(f"Retention of {getattr(a, scope)}: {minutes} min, {size_mb} MB", **body)

    def get_retention(api, out, a) -> None:
        out.emit(api.request("GET", path_of(a) + "/retention"),
                 lambda v: print("not set here" if v is None else json.dumps(v)))

    def remove_retention(api, out, a) -> None:
        api.request("DELETE", path_of(a) + "/retention")
        out.done(f"Removed the retention of {getattr(a, scope)}")

    def set_ttl(api, out, a) -> None:
        ttl = seconds(a.ttl)
        if ttl < 0:
            raise UsageError("--ttl must be 0 (off) or more seconds")
        api.request("POST", path_of(a) + "/messageTTL", ttl)
        out.done(f"messageTTL of {getattr(a, scope)}: {ttl} s", messageTTL=ttl)

    def get_ttl(api, out, a) -> None:
        out.emit(api.request("GET", path_of(a) + "/messageTTL"),
                 lambda v: print("not set here" if v is None else f"{v} s"))

    def remove_ttl(api, out, a) -> None:
        api.request("DELETE", path_of(a) + "/messageTTL")
        out.done(f"Removed the messageTTL of {getattr(a, scope)}")

    def set_quota(api, out, a) -> None:
        if a.limit is None and a.limit_time is None:
            raise UsageError("give --limit (size) and/or --limitTime (time)")
        body = {"limitSize": size_bytes(a.limit) if a.limit is not None else -1,
                "limitTime": seconds(a.limit_time) if a.limit_time is not None else -1,
                "policy": a.policy}
        api.request("POST", path_of(a) + "/backlogQuota", body, query={"backlogQuotaType": "destination_storage"})
        out.done(f"Backlog quota of {getattr(a, scope)}: {body}", **body)

    def get_quota(api, out, a) -> None:
        out.emit(api.request("GET", path_of(a) + "/backlogQuotaMap"),
                 lambda v: print(json.dumps(v) if v else "not set here"))

    def remove_quota(api, out, a) -> None:
        api.request("DELETE", path_of(a) + "/backlogQuota")
        out.done(f"Removed the backlog quota of {getattr(a, scope)}")

    def set_delayed(api, out, a) -> None:
        if a.enable == a.disable:
            raise UsageError("give --enable or --disable")
        body = {"active": a.enable, "tickTime": duration_ms(a.time),
                "maxDeliveryDelayInMillis": duration_ms(a.max_delay) if a.max_delay else 0}
        api.request("POST", path_of(a) + "/delayedDelivery", body)
        out.done(f"Delayed delivery of {getattr(a, scope)}: {body}", **body)

    def get_delayed(api, out, a) -> None:
        out.emit(api.request("GET", path_of(a) + "/delayedDelivery"),
                 lambda v: print("not set here" if v is None else json.dumps(v)))

    def remove_delayed(api, out, a) -> None:
        api.request("DELETE", path_of(a) + "/delayedDelivery")
        out.done(f"Removed the delayed-delivery policy of {getattr(a, scope)}")

    p = add("set-delayed-delivery", set_delayed, "turn delayed delivery on or off, its tick and longest delay",
            (scope,))
    p.add_argument("--enable", "-e", action="store_true", help="honour delivery times (Shared, Key_Shared)")
    p.add_argument("--disable", "-d", action="store_true", help="deliver delayed messages at once")
    p.add_argument("--time", "-t", default="1s", help="the tick: how late a delayed message may go (default 1s)")
    p.add_argument("--maxDelay", "-md", dest="max_delay", help="the longest delay a producer may ask for, e.g. 1d "
                   "(default: no limit)")
    add("get-delayed-delivery", get_delayed, "show the delayed-delivery policy set here", (scope,))
    add("remove-delayed-delivery", remove_delayed, "remove the delayed-delivery policy set here", (scope,))
    def set_threshold(api, out, a) -> None:
        threshold = size_bytes(a.threshold)
        if threshold < 0:
            raise UsageError("--threshold must be 0 (off) or a size, e.g. 100M")
        api.request("POST", path_of(a) + "/compactionThreshold", threshold)
        out.done(f"compactionThreshold of {getattr(a, scope)}: {threshold} bytes", compactionThreshold=threshold)

    def get_threshold(api, out, a) -> None:
        out.emit(api.request("GET", path_of(a) + "/compactionThreshold"),
                 lambda v: print("not set here" if v is None else f"{v} bytes"))

    def remove_threshold(api, out, a) -> None:
        api.request("DELETE", path_of(a) + "/compactionThreshold")
        out.done(f"Removed the compactionThreshold of {getattr(a, scope)}")

    p = add("set-compaction-threshold", set_threshold, "compact once this much is past the compaction horizon",
            (scope,))
    p.add_argument("--threshold", "-t", required=True, help="bytes, or e.g. 100M (0: off)")
    add("get-compaction-threshold", get_threshold, "show the compactionThreshold set here", (scope,))
    add("remove-compaction-threshold", remove_threshold, "remove the compactionThreshold set here", (scope,))
    p = add("set-retention", set_retention, "keep acknowledged data for a time and/or size", (scope,))
    p.add_argument("--size", "-s", required=True, help="-1 (infinite), 0, or e.g. 10G (a bare number is MB)")
    p.add_argument("--time", "-t", required=True, help="-1 (infinite), 0, or e.g. 3h (a bare number is minutes)")
    add("get-retention", get_retention, "show the retention set here", (scope,))
    add("remove-retention", remove_retention, "remove the retention set here", (scope,))
    p = add("set-message-ttl", set_ttl, "expire unacknowledged messages older than this", (scope,))
    p.add_argument("--ttl", "-ttl", "--messageTTL", dest="ttl", required=True, help="seconds, or e.g. 1h")
    add("get-message-ttl", get_ttl, "show the messageTTL set here", (scope,))
    add("remove-message-ttl", remove_ttl, "remove the messageTTL set here", (scope,))
    p = add("set-backlog-quota", set_quota, "limit a subscription's backlog", (scope,))
    p.add_argument("--limit", "-l", help="backlog size, e.g. 10G (-1: no size limit)")
    p.add_argument("--limitTime", "-lt", dest="limit_time", help="age of the oldest unacked message, e.g. 1h")
    p.add_argument("--policy", "-p", required=True, choices=QUOTA_POLICIES)
    add("get-backlog-quotas", get_quota, "show the backlog quota set here", (scope,))
    add("remove-backlog-quota", remove_quota, "remove the backlog quota set here", (scope,))
