"""The shapes of the stats answers, after Pulsar's TopicStats, PersistentTopicInternalStats
and PartitionedTopicStats, built from database rows and a broker's live view.  Pure: no I/O.

Positions are ``"entryId:batchIndex"``; batch index -1 stands for the whole entry (every
message of the producer batch stored in it), so ``markDeletePosition "7:-1"`` means every
message up to and including entry 7 is acknowledged, and an empty log's last entry is
``"-1:-1"``.  Rates and counters come from the owning broker (rates over its sliding
window, magnetar_broker/rates.py); without a live owner they read 0.
"""

from __future__ import annotations

from typing import Any

from magnetar_protocol.bitsets import set_bits
from magnetar_protocol.cursorstate import WHOLE


def position(entry_id: int | None, batch_index: int = -1) -> str:
    return f"{-1 if entry_id is None else entry_id}:{batch_index}"


def deleted_ranges(acks: dict[int, int]) -> list[tuple[int, int]]:
    """Runs of entries acknowledged whole, as (first, last) entry ids."""
    runs: list[list[int]] = []
    for entry_id in sorted(e for e, mask in acks.items() if mask == WHOLE):
        if runs and runs[-1][1] == entry_id - 1:
            runs[-1][1] = entry_id
        else:
            runs.append([entry_id, entry_id])
    return [(a, b) for a, b in runs]


def deleted_ranges_text(acks: dict[int, int]) -> str:
    """Pulsar's ``individuallyDeletedMessages``: open-closed ranges of positions, e.g.
    ``"[(4:-1..6:-1], (7:-1..8:-1]]"`` for entries 5, 6 and 8."""
    return "[" + ", ".join(f"({position(a - 1)}..{position(b)}]" for a, b in deleted_ranges(acks)) + "]"


def batch_deleted_indexes(acks: dict[int, int]) -> dict[str, list[int]]:
    """Entries acknowledged in part: {entry id: the acknowledged batch indexes}."""
    return {str(e): set_bits(mask) for e, mask in sorted(acks.items()) if mask != WHOLE}


def subscription_stats(backlog: int, backlog_bytes: int, live: dict, durable: bool) -> dict:
    consumers = list(live.get("consumers", []))
    active = [c.get("consumerName") for c in consumers if c.get("isActive")]
    # Delayed messages waiting for their time (Pulsar's msgDelayed) are in the backlog.
    delayed = live.get("msgDelayed", 0)
    out = {
        "type": live.get("type", "None"),
        "msgBacklog": backlog + delayed,
        "msgBacklogNoDelayed": backlog,
        "msgDelayed": delayed,
        "backlogSize": backlog_bytes,
        "unackedMessages": live.get("unackedMessages", 0),
        "msgRateOut": float(live.get("msgRateOut", 0.0)),
        "msgThroughputOut": float(live.get("msgThroughputOut", 0.0)),
        "msgRateRedeliver": float(live.get("msgRateRedeliver", 0.0)),
        # The subscription's own count keeps what closed consumers received.
        "msgOutCounter": live.get("msgOutCounter", sum(c.get("msgOutCounter", 0) for c in consumers)),
        "bytesOutCounter": live.get("bytesOutCounter", 0),
        "consumers": consumers,
        "isDurable": durable,
        "pendingAckedMessages": live.get("pendingAckedMessages", 0),
        # Dead letters: the policy in force (an operator's, else its consumers'), what
        # this broker moved since it took the partition, what waits to be moved.
        "deadLetterPolicy": live.get("deadLetterPolicy"),
        "msgDeadLettered": live.get("msgDeadLettered", 0),
        "msgDeadLetterPending": live.get("msgDeadLetterPending", 0),
    }
    if live.get("type") == "Failover" and active:
        out["activeConsumerName"] = active[0]
    return out


def topic_stats(log: dict, subs: list[dict], owner: dict, live: dict | None) -> dict:
    """Pulsar TopicStats of one topic or partition.

    ``log``: the log_stats row; ``subs``: durable subscriptions from the database, each
    {name, backlog, backlog_bytes}; ``owner``: the lease row (may be empty); ``live``:
    the owning broker's /internal/v1/topic-stats answer, or None when no live broker
    owns the topic (then only what the database knows is reported)."""
    lv = live or {}
    live_subs: dict = lv.get("subscriptions", {})
    subscriptions = {
        s["name"]: subscription_stats(s["backlog"], s["backlog_bytes"], live_subs.get(s["name"], {}), True)
        for s in subs
    }
    for name, ls in live_subs.items():  # readers' non-durable subscriptions live only in memory
        if name not in subscriptions:
            subscriptions[name] = subscription_stats(ls.get("backlogEntries", 0), 0, ls,
                                                     bool(ls.get("durable", False)))
    rate_in = float(lv.get("msgRateIn", 0.0))
    throughput_in = float(lv.get("msgThroughputIn", 0.0))
    stats: dict[str, Any] = {
        "msgRateIn": rate_in,
        "msgThroughputIn": throughput_in,
        "msgRateOut": float(lv.get("msgRateOut", 0.0)),
        "msgThroughputOut": float(lv.get("msgThroughputOut", 0.0)),
        "averageMsgSize": throughput_in / rate_in if rate_in else 0.0,
        "msgInCounter": lv.get("msgInCounter", 0),
        "bytesInCounter": lv.get("bytesInCounter", 0),
        "msgOutCounter": lv.get("msgOutCounter", 0),
        "bytesOutCounter": lv.get("bytesOutCounter", 0),
        "storageSize": log["bytes"],
        "backlogSize": max((s["backlog_bytes"] for s in subs), default=0),
        "numberOfEntries": log["entries"],
        "numberOfMessages": log["messages"],
        "publishers": list(lv.get("publishers", [])),
        "waitingPublishers": len(lv.get("waitingProducers", [])),
        "subscriptions": subscriptions,
        "replication": {},
        "topicEpoch": lv.get("topicEpoch", owner.get("topic_epoch")),
        "terminated": lv.get("terminatedAtEntry") is not None,
        "ownerBroker": owner.get("broker_id"),
        "liveStats": live is not None,
    }
    if live is not None:
        dedup = lv.get("deduplicationEnabled")
        stats["deduplicationStatus"] = None if dedup is None else ("Enabled" if dedup else "Disabled")
        stats["accessMode"] = lv.get("accessMode", "Shared")
        stats["exclusiveProducer"] = lv.get("exclusiveProducer")
        stats["waitingProducers"] = list(lv.get("waitingProducers", []))
        stats["backlogQuotaExceeded"] = lv.get("backlogQuotaExceeded")  # the refusing policy, or None
    return stats


def internal_stats(log: dict, subs: list[dict], owner: dict) -> dict:
    """Pulsar PersistentTopicInternalStats-like: the log is one ledger, cursors from the
    database.  ``subs``: {name, mark_delete, acks (decode_acks)}."""
    last = log["last_entry"]
    last_position = position(last)
    cursors = {}
    for s in subs:
        ranges = deleted_ranges(s["acks"])
        cursors[s["name"]] = {
            "markDeletePosition": position(s["mark_delete"]),
            "individuallyDeletedMessages": deleted_ranges_text(s["acks"]),
            "batchDeletedIndexes": batch_deleted_indexes(s["acks"]),
            "totalNonContiguousDeletedMessagesRange": len(ranges),
            "numberOfEntriesSinceFirstNotAckedMessage":
                max((-1 if last is None else last) - s["mark_delete"], 0),
            "state": "Open",
        }
    return {
        "entriesAddedCounter": log["entries"],
        "numberOfEntries": log["entries"],
        "numberOfMessages": log["messages"],
        "totalSize": log["bytes"],
        "currentLedgerEntries": log["entries"],
        "currentLedgerSize": log["bytes"],
        "lastConfirmedEntry": last_position,
        # The oldest entry still stored ("-1:-1": none); older ones were trimmed.
        "firstEntry": position(log.get("first_entry")),
        "state": "LedgerOpened" if owner.get("alive") else "Closed",
        "ownerBroker": owner.get("broker_id"),
        "ownerBrokerUrl": owner.get("url"),
        "ownerEpoch": owner.get("epoch"),
        "topicEpoch": owner.get("topic_epoch"),
        "cursors": cursors,
    }


_SUMMED = ("msgRateIn", "msgThroughputIn", "msgRateOut", "msgThroughputOut", "msgInCounter",
           "bytesInCounter", "msgOutCounter", "bytesOutCounter", "storageSize", "backlogSize",
           "numberOfEntries", "numberOfMessages", "waitingPublishers")
_SUB_SUMMED = ("msgBacklog", "msgBacklogNoDelayed", "backlogSize", "unackedMessages", "msgRateOut",
               "msgThroughputOut", "msgRateRedeliver", "msgOutCounter", "bytesOutCounter",
               "pendingAckedMessages", "msgDelayed", "msgDeadLettered", "msgDeadLetterPending")


def partitioned_stats(partitions: dict[str, dict], count: int, per_partition: bool) -> dict:
    """Pulsar PartitionedTopicStats: the partitions' stats summed, subscriptions merged by
    name (backlogs summed, consumers listed), publishers listed."""
    parts = list(partitions.values())
    out: dict[str, Any] = {k: sum(p.get(k, 0) for p in parts) for k in _SUMMED}
    out["averageMsgSize"] = out["msgThroughputIn"] / out["msgRateIn"] if out["msgRateIn"] else 0.0
    out["publishers"] = [pub for p in parts for pub in p["publishers"]]
    subs: dict[str, dict] = {}
    for p in parts:
        for name, s in p["subscriptions"].items():
            merged = subs.setdefault(name, {"type": "None", "consumers": [], "isDurable": s["isDurable"],
                                            "deadLetterPolicy": s.get("deadLetterPolicy"),
                                            **{k: 0 for k in _SUB_SUMMED}})
            for k in _SUB_SUMMED:
                merged[k] += s.get(k, 0)
            merged["consumers"] += s["consumers"]
            if merged["type"] == "None":
                merged["type"] = s["type"]
    out["subscriptions"] = subs
    out["replication"] = {}
    out["metadata"] = {"partitions": count}
    out["partitions"] = partitions if per_partition else {}
    return out


def partitioned_internal_stats(partitions: dict[str, dict], count: int) -> dict:
    return {"metadata": {"partitions": count}, "partitions": partitions}


def merged_compaction_status(partitions: list[dict]) -> dict:
    """One LongRunningProcessStatus for a topic from its partitions': RUNNING while any
    runs, else ERROR (the first error) if any failed, else SUCCESS once all succeeded,
    else NOT_RUN."""
    statuses = [p.get("status", "NOT_RUN") for p in partitions]
    for wanted in ("RUNNING", "ERROR"):
        for p, status in zip(partitions, statuses):
            if status == wanted:
                return {"status": status, "lastError": p.get("lastError", "")}
    if statuses and all(s == "SUCCESS" for s in statuses):
        return {"status": "SUCCESS", "lastError": ""}
    return {"status": "NOT_RUN", "lastError": ""}
