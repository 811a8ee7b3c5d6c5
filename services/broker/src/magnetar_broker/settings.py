"""Broker settings (``MAGNETAR_*`` environment variables)."""

from __future__ import annotations

import socket

from pydantic import Field, model_validator

from magnetar_protocol.listeners import INTERNAL, PULSAR, parse_listeners, pulsar_key
from magnetar_protocol.schemacompat import STRATEGIES
from magnetar_runtime.settings import ServiceSettings

# The advertised listener holding a broker's pulsar:// URL.
PULSAR_LISTENER = PULSAR


class BrokerSettings(ServiceSettings):
    # Stable identity (the StatefulSet pod name in Kubernetes); default: the hostname+port.
    broker_id: str = ""
    # Broker liveness: heartbeat every interval; a broker whose heartbeat is older than
    # the lease TTL is dead and its topics may be taken over.
    heartbeat_interval_ms: int = Field(1000, gt=0)
    lease_ttl_ms: int = Field(5000, gt=0)
    # Client sessions (Pulsar connections): lapse when not kept alive this long.
    session_timeout_ms: int = Field(10000, gt=0)
    keepalive_interval_ms: int = Field(2000, gt=0)
    deduplication_enabled: bool = True
    # A producer name that stored nothing for this long and is not connected loses its
    # dedup state (Pulsar: brokerDeduplicationProducerInactivityTimeoutMinutes, 6 h), so
    # names that come and go (a Spark task's, per transaction) do not pile up forever.
    deduplication_producer_inactivity_timeout_s: int = Field(6 * 3600, gt=0)
    allow_auto_topic_creation: bool = True
    max_batch_messages: int = Field(10000, gt=0)
    # Group commit: at most this many batches in one PostgreSQL transaction.
    max_batches_per_commit: int = Field(256, gt=0)
    # Recently written entries kept in memory for tailing consumers (per partition),
    # bounded by bytes so large batches cannot blow up the broker's memory.
    entry_cache_bytes: int = Field(32 * 1024 * 1024, ge=0)
    max_fetch_wait_ms: int = Field(30000, gt=0)
    # Run the transaction coordinator in this process too (small deployments:
    # docs/architecture.md); its TCID is MAGNETAR_COORDINATOR_ID, else the hostname's -N.
    host_coordinator: bool = False
    # How long a topic's permissions (grants, tenant admins, subscription roles) are
    # cached: the longest a revoke takes to reach new producers and consumers.
    auth_policy_cache_ms: int = Field(3000, ge=0)
    # Storage lifecycle (docs/operations.md).  Defaults of namespaces that set no
    # retention / messageTTL policy: Pulsar's defaultRetentionTimeInMinutes and
    # defaultRetentionSizeInMB are 0 (acknowledged data goes), its TTL 0 (off).
    default_retention_time_minutes: int = Field(0, ge=-1)
    default_retention_size_mb: int = Field(0, ge=-1)
    default_message_ttl_s: int = Field(0, ge=0)
    # Nothing younger than this is trimmed, whatever the cursors and retention say, so a
    # subscriber or reader that arrives from Earliest within it gets everything written
    # (docs/operations.md).  Pulsar's managedLedgerMinLedgerRolloverTimeMinutes (10): its
    # ledger being written is never deleted and rolls over no sooner.  0: no floor.
    trim_min_age_s: int = Field(600, ge=0)
    # How often the owner of a partition trims it, expires TTL'd messages and checks its
    # backlog quota (Pulsar: retentionCheckIntervalInSeconds 120, messageExpiryCheck 5 min,
    # backlogQuotaCheckIntervalInSeconds 60; one loop here, so the smallest matters).
    lifecycle_interval_ms: int = Field(10_000, gt=0)
    # Trimming's pace (partition/trimpace.py says why): a DELETE takes at most this many
    # entries and bytes (1 MiB: 17.6 ms mean on the loaded soak machine against 55.7 ms
    # for the unbounded 500-entry batch, so a send waits about that long behind one at
    # worst), then trimming pauses so it uses at most trim_duty_percent of the time while
    # a backlog remains (25%: ~14 MB/s per broker at that batch time, above what a broker
    # takes in; docs/performance.md "Paced trimming").
    trim_batch_entries: int = Field(500, gt=0)
    trim_batch_bytes: int = Field(1 << 20, gt=0)
    trim_duty_percent: int = Field(25, gt=0, le=100)
    trim_min_pause_ms: int = Field(2, ge=0)
    trim_max_pause_ms: int = Field(1000, ge=0)
    # Batches per partition per pass (fairness between partitions) and per pass over all
    # of them (a pass ends in bounded time; the next pass goes on where this one stopped).
    trim_max_batches: int = Field(200, gt=0)
    trim_pass_batches: int = Field(2000, gt=0)
    # How long lifecycle policies are cached: the longest a policy change takes to apply.
    storage_policy_cache_ms: int = Field(3000, ge=0)
    # producer_request_hold: a send waits at most this long for the backlog to shrink,
    # then fails with ProducerBlockedQuotaExceeded (the client's send timeout may end it first).
    backlog_quota_hold_max_ms: int = Field(30_000, ge=0)
    # Sends check the quota against an estimate; past the limit they ask for an exact
    # check (a few queries) at most this often (partition/quota.py).
    backlog_quota_recheck_ms: int = Field(100, ge=0)

    # Topic compaction (docs/operations.md).  The compactionThreshold of topics whose
    # namespace and topic set none: bytes of log past the compaction horizon that start a
    # compaction, checked on each lifecycle pass; 0 = off, Pulsar's default
    # (brokerServiceCompactionThresholdInBytes).
    default_compaction_threshold_bytes: int = Field(0, ge=0)
    # Keep messages without a key in the compacted view (Pulsar's
    # topicCompactionRetainNullKey; false since Pulsar 3.2, which drops them).
    compaction_retain_null_key: bool = False
    # Entries a compaction reads, and compacted entries it writes, per statement: one
    # statement stays short next to the sends sharing the database (the same order as a
    # trim batch).
    compaction_page_entries: int = Field(500, gt=0)

    # `topics terminate` waits this long for the transactions that sent messages to the
    # partition to end (their commit markers must come before the end of the topic), then
    # answers 409 and takes sends again.  Below the admin's broker request timeout (5 s).
    terminate_txn_wait_ms: int = Field(3000, ge=0)

    # Delayed delivery (docs/operations.md), Pulsar's broker settings and defaults: on
    # (delayedDeliveryEnabled; false delivers delayed messages at once), delivered at most
    # one tick after their time (delayedDeliveryTickTimeMillis: a coarser tick wakes
    # subscriptions less often), no limit on the delay a producer asks for
    # (delayedDeliveryMaxDelayInMillis, 0; longer ones are refused with NotAllowed).  A
    # namespace's or topic's delayed_delivery policy overrides the three.
    delayed_delivery_enabled: bool = True
    delayed_delivery_tick_ms: int = Field(1000, gt=0)
    delayed_delivery_max_delay_ms: int = Field(0, ge=0)

    # Topic gauges of Pulsar's names (pulsar_storage_size, pulsar_msg_backlog, ...): per
    # namespace by default, per topic when true (Pulsar's exposeTopicLevelMetricsInPrometheus),
    # then for at most metrics_max_topics topics per broker (the largest backlogs; the rest
    # summed into topic="_other"), so a broker with 100k partitions cannot flood Prometheus.
    metrics_per_topic: bool = False
    metrics_max_topics: int = Field(1000, ge=0)
    # How often they are recomputed: one storage and one backlog query per served
    # partition, so not on every scrape.
    topic_metrics_interval_ms: int = Field(15000, gt=0)
    # The cluster label of those gauges (the admin's MAGNETAR_CLUSTER_NAME).
    cluster_name: str = "standalone"

    # Schemas (docs/admin.md, "Schemas"): the defaults of namespaces that set no schema
    # policy, Pulsar's: schemaCompatibilityStrategy FULL (the new schema and the latest
    # read each other's data), isAllowAutoUpdateSchemaEnabled true (a producer may
    # register a new compatible version), isSchemaValidationEnforced false (a producer
    # without a schema may write to a topic that has one, and payloads are not checked).
    schema_compatibility_strategy: str = "FULL"
    allow_auto_update_schema: bool = True
    schema_validation_enforced: bool = False

    # Pulsar's binary protocol (docs/pulsar-protocol.md): the port unmodified Pulsar
    # clients connect to (Pulsar's is 6650); 0: no Pulsar listener.
    pulsar_port: int = Field(0, ge=0, le=65535)
    # The pulsar:// URL lookups answer for this broker; default pulsar://HOST:PULSAR_PORT
    # (pulsar+ssl:// with MAGNETAR_TLS_ENABLED: the port then speaks TLS only).
    advertised_pulsar_url: str = ""
    # Other pulsar:// URLs this broker is reached at, by name (Pulsar's advertisedListeners
    # for the binary protocol), e.g. "external:pulsar://203.0.113.10:{30650+pod_index}";
    # a LOOKUP naming a listener (the client's listener_name) answers that one, and one
    # naming a listener the owner lacks is refused.  Empty: only the URL above.
    advertised_pulsar_listeners: str = ""
    # A Pulsar connection that sends nothing (not even a PONG to our PING) for this long
    # is closed; Pulsar clients PING every 30 s by default.
    pulsar_keepalive_s: float = Field(30.0, gt=0)

    @model_validator(mode="after")
    def _schema_strategy_known(self):
        if self.schema_compatibility_strategy not in STRATEGIES:
            raise ValueError(f"MAGNETAR_SCHEMA_COMPATIBILITY_STRATEGY is {self.schema_compatibility_strategy!r}; "
                             f"one of {', '.join(STRATEGIES)}")
        return self

    @model_validator(mode="after")
    def _pulsar_listeners_valid(self):
        # A bad entry stops the broker at start, naming it.
        self._pulsar_listeners()
        return self

    def _pulsar_listeners(self) -> dict[str, str]:
        named = parse_listeners(self._with_pod_index(self.advertised_pulsar_listeners), pulsar=True)
        internal = named.get(INTERNAL, "")
        if internal and self.advertised_pulsar_url and internal != self.advertised_pulsar_url.rstrip("/"):
            raise ValueError(f"MAGNETAR_ADVERTISED_PULSAR_URL is {self.advertised_pulsar_url!r} but "
                             f"MAGNETAR_ADVERTISED_PULSAR_LISTENERS names internal as {internal!r}: "
                             "set one of them, or the same URL in both")
        return named

    @property
    def pulsar_url(self) -> str:
        """This broker's advertised pulsar:// (or pulsar+ssl://) URL ("" when the listener is off)."""
        if not self.pulsar_port:
            return ""
        scheme = "pulsar+ssl" if self.tls_enabled else "pulsar"
        default = self.advertised_pulsar_url or self._pulsar_listeners().get(INTERNAL, "")
        return (default or f"{scheme}://{self.host}:{self.pulsar_port}").rstrip("/")

    @property
    def listeners(self) -> dict[str, str]:
        """The advertised listeners plus ``pulsar``, this broker's pulsar:// URL, and its
        named Pulsar listeners (``pulsar:NAME``), so a Pulsar LOOKUP on any broker finds
        the owner's (the advertised-listeners table)."""
        listeners = super().listeners
        if self.pulsar_url:
            listeners[PULSAR_LISTENER] = self.pulsar_url
            for name, url in self._pulsar_listeners().items():
                if name != INTERNAL:
                    listeners[pulsar_key(name)] = url
        return listeners

    @property
    def resolved_broker_id(self) -> str:
        return self.broker_id or f"{socket.gethostname()}-{self.port}"
