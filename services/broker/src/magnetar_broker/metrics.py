"""Broker metrics (Prometheus).  The magnetar_* ones carry no topic labels; the topic
gauges of Pulsar's names (pulsar_storage_size, pulsar_msg_backlog, ...) are per
namespace unless MAGNETAR_METRICS_PER_TOPIC, and bounded then (topic_metrics.py)."""

from prometheus_client import REGISTRY, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

from magnetar_broker.topic_metrics import SUBSCRIPTION_GAUGE, TOPIC_GAUGES, Exported

MESSAGES_IN = Counter("magnetar_broker_messages_in_total", "Messages stored")
MESSAGES_OUT = Counter("magnetar_broker_messages_out_total", "Messages delivered to consumers")
DUPLICATES = Counter("magnetar_broker_duplicate_messages_total", "Messages dropped as duplicates")
PUBLISH_LATENCY = Histogram(
    "magnetar_broker_publish_latency_seconds", "Send request to durable commit",
    buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
)
COMMIT_BATCHES = Histogram(
    "magnetar_broker_group_commit_batches", "Producer batches per database commit",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
)
OWNED_TOPICS = Gauge("magnetar_broker_owned_topics", "Partitions served by this broker")
SESSIONS = Gauge("magnetar_broker_sessions", "Open client sessions")
REDELIVERIES = Counter("magnetar_broker_redeliveries_total", "Messages queued for redelivery")
DEAD_LETTERED = Counter("magnetar_broker_dead_lettered_total",
                        "Messages moved to a dead-letter topic (copy and ack in one SQL transaction)")
DEDUP_EXPIRED = Counter("magnetar_broker_dedup_producers_expired_total",
                        "Idle producer names whose deduplication state was forgotten")

# Transaction buffer (tb) and pending ack (tp), named as Pulsar names them.
TB_ACTIVE = Gauge("pulsar_txn_tb_active_total", "Open transactions in this broker's transaction buffers")
TB_COMMITTED = Counter("pulsar_txn_tb_committed", "Transactions committed on a partition")
TB_ABORTED = Counter("pulsar_txn_tb_aborted", "Transactions aborted on a partition")
TP_COMMITTED = Counter("pulsar_txn_tp_committed_count", "Transactions committed on a subscription")
TP_ABORTED = Counter("pulsar_txn_tp_aborted_count", "Transactions aborted on a subscription")
TP_COMMIT_LATENCY = Histogram(
    "pulsar_txn_tp_commit_latency_seconds", "EndTxnOnSubscription: request to durable",
    buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
)
# Storage lifecycle (lifecycle.py): what trimming deleted, TTL expired, quotas evicted.
TRIMMED_ENTRIES = Counter("magnetar_broker_trimmed_entries_total", "Log entries deleted by trimming")
TRIMMED_BYTES = Counter("magnetar_broker_trimmed_bytes_total", "Payload bytes deleted by trimming")
TRIMMED_TXN_OUTCOMES = Counter("magnetar_broker_trimmed_txn_outcomes_total",
                               "txn_outcomes rows deleted (their transaction forgotten, nothing of it left)")
TRIM_BATCH_SECONDS = Histogram("magnetar_broker_trim_batch_seconds", "Time of one trim batch (its queries and DELETE)",
                               buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0))
TRIM_PAUSE_SECONDS = Counter("magnetar_broker_trim_pause_seconds_total",
                             "Time trimming paused between batches to leave the database to sends")
LIFECYCLE_EXPIRED = Counter("magnetar_broker_expired_entries_total",
                            "Entries acknowledged by messageTTL or expire-messages")
LIFECYCLE_EVICTED = Counter("magnetar_broker_evicted_entries_total",
                            "Entries acknowledged by consumer_backlog_eviction")
LIFECYCLE_PASSES = Counter("magnetar_broker_lifecycle_passes_total",
                           "Completed passes of the storage-lifecycle loop over the owned partitions")
COMPACTIONS = Counter("magnetar_broker_compactions_total",
                      "Topic compactions that switched a partition to a new compacted view")
ONE_REQUEST_COMMITS = Counter("magnetar_txn_one_request_total",
                              "One-request transactions committed here with their data in one SQL transaction")
ONE_REQUEST_GROUP = Histogram("magnetar_txn_one_request_group_size",
                              "One-request commits written by one statement",
                              buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256))


class TopicGauges:
    """The latest export of the topic-metrics loop, served on every scrape (the scrape
    itself runs no query).  Every family is listed even while it has no series yet."""

    # Every label a topic gauge may carry (per namespace: the first two).
    label_names = ("cluster", "namespace", "topic", "subscription")

    def __init__(self) -> None:
        self.latest = Exported({}, 0)

    def collect(self):
        exported = self.latest
        helps = TOPIC_GAUGES | {SUBSCRIPTION_GAUGE[0]: SUBSCRIPTION_GAUGE[1]}
        for name, text in helps.items():
            rows = exported.rows.get(name, [])
            keys = list(rows[0][0]) if rows else ["cluster", "namespace"]
            family = GaugeMetricFamily(name, text, labels=keys)
            for labels, value in rows:
                family.add_metric([labels[k] for k in keys], value)
            yield family
        yield GaugeMetricFamily("magnetar_broker_topic_metrics_folded",
                                "Topics past MAGNETAR_METRICS_MAX_TOPICS summed into topic=_other",
                                value=exported.folded)


TOPIC_GAUGES_COLLECTOR = TopicGauges()
REGISTRY.register(TOPIC_GAUGES_COLLECTOR)
