-- Storage lifecycle (docs/operations.md): Pulsar's retention, messageTTL and backlogQuota
-- policies, per namespace (topic = '') with optional per-topic overrides (topic = the
-- full name of a topic or of a partitioned topic, whose partitions it covers).  A NULL
-- column is "not set here": a topic falls back to its namespace, a namespace to the
-- broker's defaults.  The admin service writes the rows; brokers read them (cached).
CREATE TABLE storage_policies (
    tenant                    text NOT NULL,
    namespace                 text NOT NULL,
    topic                     text NOT NULL DEFAULT '',
    -- retention: both set or neither (-1 = infinite)
    retention_time_minutes    bigint CHECK (retention_time_minutes >= -1),
    retention_size_mb         bigint CHECK (retention_size_mb >= -1),
    message_ttl_seconds       bigint CHECK (message_ttl_seconds >= 0),
    -- backlog quota (destination_storage): -1 = no limit of that kind
    backlog_limit_size        bigint CHECK (backlog_limit_size >= -1),
    backlog_limit_time        bigint CHECK (backlog_limit_time >= -1),
    backlog_policy            text CHECK (backlog_policy IN ('producer_request_hold',
                                                             'producer_exception',
                                                             'consumer_backlog_eviction')),
    updated_at                timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, namespace, topic),
    FOREIGN KEY (tenant, namespace) REFERENCES namespaces (tenant, namespace) ON DELETE CASCADE,
    CHECK ((retention_time_minutes IS NULL) = (retention_size_mb IS NULL)),
    CHECK ((backlog_policy IS NULL) = (backlog_limit_size IS NULL))
);

-- Trimming deletes from the hot tables in small batches all day long; vacuum them after
-- 1% dead rows (default 20%) and without cost-based throttling, so the freed pages are
-- reused by new inserts before the table grows (docs/operations.md "Sizing storage").
ALTER TABLE entries SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
                         autovacuum_vacuum_cost_delay = 0,
                         toast.autovacuum_vacuum_scale_factor = 0.01,
                         toast.autovacuum_vacuum_threshold = 1000,
                         toast.autovacuum_vacuum_cost_delay = 0);
ALTER TABLE txn_entries SET (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
                             autovacuum_vacuum_cost_delay = 0,
                             toast.autovacuum_vacuum_scale_factor = 0.01,
                             toast.autovacuum_vacuum_threshold = 1000,
                             toast.autovacuum_vacuum_cost_delay = 0);
