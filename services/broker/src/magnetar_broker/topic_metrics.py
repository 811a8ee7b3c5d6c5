"""Which Prometheus series a broker exports for the partitions it serves, with Pulsar's
names and labels (``cluster``, ``namespace``, ``topic``, ``subscription``).  Pure: no I/O.

By default the series are per namespace, as Pulsar's ``exposeTopicLevelMetricsInPrometheus
=false``: their count grows with namespaces, not topics.  Per topic
(``MAGNETAR_METRICS_PER_TOPIC=true``) at most ``max_topics`` topics get series of their
own: the ones with the largest backlog, then storage (the ones an operator looks for);
the rest of each namespace is summed into one series labelled ``topic="_other"``, so
totals stay exact and the label count stays bounded, and
``magnetar_broker_topic_metrics_folded`` says how many topics were folded.  A partition
of a partitioned topic counts as its topic (Pulsar's ``splitTopicAndPartitionLabel``
off: one series per partition would multiply the count again).
"""

from __future__ import annotations

from dataclasses import dataclass, field

OTHER = "_other"

# name -> help text; every one a gauge.
TOPIC_GAUGES = {
    "pulsar_storage_size": "Bytes stored for the topic (log and committed transaction payloads)",
    "pulsar_msg_backlog": "Unacknowledged messages, summed over the topic's subscriptions",
    "pulsar_storage_backlog_size": "Bytes of unacknowledged entries, summed over the subscriptions",
    "pulsar_rate_in": "Messages per second stored (sliding window)",
    "pulsar_rate_out": "Messages per second delivered to consumers (sliding window)",
    "pulsar_throughput_in": "Bytes per second stored (sliding window)",
    "pulsar_throughput_out": "Bytes per second delivered to consumers (sliding window)",
    "pulsar_subscriptions_count": "Durable subscriptions",
    "pulsar_producers_count": "Connected producers",
    "pulsar_consumers_count": "Connected consumers",
    "pulsar_subscription_delayed": "Messages waiting for their delivery time (delayed delivery), summed over "
                                   "the topic's subscriptions (they are in pulsar_msg_backlog too)",
}
SUBSCRIPTION_GAUGE = ("pulsar_subscription_back_log", "Unacknowledged messages of one subscription")


@dataclass
class PartitionSample:
    """What a broker knows of one partition it serves."""
    namespace: str       # tenant/namespace
    topic: str           # the topic's full name (a partition's base topic)
    values: dict[str, float] = field(default_factory=dict)   # TOPIC_GAUGES name -> value
    subscriptions: dict[str, float] = field(default_factory=dict)  # name -> backlog messages


@dataclass
class Exported:
    """Rows per metric name: (labels, value); and the topics folded into ``_other``."""
    rows: dict[str, list[tuple[dict[str, str], float]]]
    folded: int


def _merge(into: dict[str, float], values: dict[str, float]) -> None:
    for k, v in values.items():
        into[k] = into.get(k, 0.0) + v


def export(samples: list[PartitionSample], cluster: str, per_topic: bool, max_topics: int) -> Exported:
    rows: dict[str, list] = {name: [] for name in TOPIC_GAUGES} | {SUBSCRIPTION_GAUGE[0]: []}
    topics: dict[tuple[str, str], PartitionSample] = {}
    for s in samples:  # partitions -> their topic
        t = topics.setdefault((s.namespace, s.topic), PartitionSample(s.namespace, s.topic))
        _merge(t.values, s.values)
        _merge(t.subscriptions, s.subscriptions)
    if not per_topic:
        by_ns: dict[str, dict[str, float]] = {}
        for t in topics.values():
            _merge(by_ns.setdefault(t.namespace, {}), t.values)
        for ns, values in sorted(by_ns.items()):
            for name in TOPIC_GAUGES:
                rows[name].append(({"cluster": cluster, "namespace": ns}, values.get(name, 0.0)))
        return Exported(rows, 0)
    ranked = sorted(topics.values(), key=lambda t: (-t.values.get("pulsar_msg_backlog", 0.0),
                                                    -t.values.get("pulsar_storage_size", 0.0), t.topic))
    kept, rest = ranked[:max(max_topics, 0)], ranked[max(max_topics, 0):]
    other: dict[str, dict[str, float]] = {}
    for t in rest:
        _merge(other.setdefault(t.namespace, {}), t.values)
    for t in sorted(kept, key=lambda t: t.topic):
        labels = {"cluster": cluster, "namespace": t.namespace, "topic": t.topic}
        for name in TOPIC_GAUGES:
            rows[name].append((labels, t.values.get(name, 0.0)))
        for sub, backlog in sorted(t.subscriptions.items()):
            rows[SUBSCRIPTION_GAUGE[0]].append((labels | {"subscription": sub}, backlog))
    for ns, values in sorted(other.items()):
        labels = {"cluster": cluster, "namespace": ns, "topic": OTHER}
        for name in TOPIC_GAUGES:
            rows[name].append((labels, values.get(name, 0.0)))
    return Exported(rows, len(rest))
