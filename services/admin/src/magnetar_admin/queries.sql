-- Admin SQL, loaded by store.py with magnetar_storage.queries.load_queries.
-- Metadata changes and reads only: the partition log is written by brokers.  Deleting a
-- topic first moves its lease (topic_owners.epoch) on, so the owner's next write, which
-- compares the epoch under a FOR SHARE lock of the lease row, finds nothing to write to.


-- name: ping
SELECT 1;

-- name: list_tenants
SELECT tenant FROM tenants ORDER BY tenant;

-- name: get_tenant
SELECT tenant, admin_roles FROM tenants WHERE tenant = $1;

-- name: create_tenant
INSERT INTO tenants (tenant, admin_roles) VALUES ($1, $2)
ON CONFLICT (tenant) DO NOTHING
RETURNING tenant;

-- name: update_tenant
UPDATE tenants SET admin_roles = $2 WHERE tenant = $1 RETURNING tenant;

-- name: lock_tenant
-- FOR UPDATE conflicts with the FOR KEY SHARE lock a concurrent namespace insert takes
-- through its foreign key, so no namespace can appear while the tenant is deleted.
SELECT tenant FROM tenants WHERE tenant = $1 FOR UPDATE;

-- name: count_namespaces
SELECT count(*) FROM namespaces WHERE tenant = $1;

-- name: delete_tenant
DELETE FROM tenants WHERE tenant = $1 RETURNING tenant;


-- name: list_namespaces
SELECT namespace FROM namespaces WHERE tenant = $1 ORDER BY namespace;

-- name: get_namespace
SELECT deduplication_enabled FROM namespaces WHERE tenant = $1 AND namespace = $2;

-- name: create_namespace
INSERT INTO namespaces (tenant, namespace) VALUES ($1, $2)
ON CONFLICT (tenant, namespace) DO NOTHING
RETURNING namespace;

-- name: lock_namespace
-- Blocks topic creation in the namespace (brokers auto-create topics) until commit.
SELECT namespace FROM namespaces WHERE tenant = $1 AND namespace = $2 FOR UPDATE;

-- name: delete_namespace
DELETE FROM namespaces WHERE tenant = $1 AND namespace = $2 RETURNING namespace;

-- name: set_deduplication
UPDATE namespaces SET deduplication_enabled = $3
WHERE tenant = $1 AND namespace = $2
RETURNING namespace;

-- name: get_schema_policies
-- A namespace's schema policies (migration 0013); NULL: the broker's default.
SELECT schema_compatibility_strategy, is_allow_auto_update_schema, schema_validation_enforced
FROM namespaces WHERE tenant = $1 AND namespace = $2;

-- name: set_schema_compatibility_strategy
UPDATE namespaces SET schema_compatibility_strategy = $3
WHERE tenant = $1 AND namespace = $2
RETURNING namespace;

-- name: set_allow_auto_update_schema
UPDATE namespaces SET is_allow_auto_update_schema = $3
WHERE tenant = $1 AND namespace = $2
RETURNING namespace;

-- name: set_schema_validation_enforced
UPDATE namespaces SET schema_validation_enforced = $3
WHERE tenant = $1 AND namespace = $2
RETURNING namespace;


-- name: list_topics
SELECT topic FROM topics WHERE tenant = $1 AND namespace = $2 ORDER BY topic;

-- name: list_partitioned
SELECT topic FROM partitioned_topics WHERE tenant = $1 AND namespace = $2 ORDER BY topic;

-- name: namespace_topics
SELECT topic_id, topic FROM topics WHERE tenant = $1 AND namespace = $2;

-- name: get_partitioned
SELECT partitions FROM partitioned_topics WHERE topic = $1;

-- name: get_topic
SELECT topic_id FROM topics WHERE topic = $1;

-- name: get_topics
-- $1: topic names; answers the ones that exist.
SELECT topic, topic_id FROM topics WHERE topic = ANY($1::text[]);

-- name: create_partitioned
INSERT INTO partitioned_topics (topic, tenant, namespace, partitions) VALUES ($1, $2, $3, $4)
ON CONFLICT (topic) DO NOTHING
RETURNING topic;

-- name: create_topics
-- $4: one partition index per name in $1 (-1: a non-partitioned topic).  Names that
-- exist already are skipped, so the caller compares the count it gets back.
INSERT INTO topics (topic, tenant, namespace, partition_index)
SELECT t.topic, $2, $3, t.partition_index
FROM unnest($1::text[], $4::integer[]) AS t (topic, partition_index)
ON CONFLICT (topic) DO NOTHING
RETURNING topic_id;

-- name: create_owner_rows
-- A new topic has no owner (broker_id NULL): the first lookup assigns one.
INSERT INTO topic_owners (topic_id) SELECT unnest($1::bigint[])
ON CONFLICT (topic_id) DO NOTHING;

-- name: topic_owners
SELECT o.topic_id, o.broker_id, o.epoch, o.topic_epoch, b.url,
       coalesce(b.heartbeat_at > now() - make_interval(secs => $2::float8), false) AS alive
FROM topic_owners o LEFT JOIN brokers b ON b.broker_id = o.broker_id
WHERE o.topic_id = ANY($1::bigint[]);

-- name: fence_topics
-- Takes the lease rows away from their brokers.  The row lock waits for writes in
-- flight (they hold FOR SHARE) and makes later ones wait for this transaction.
UPDATE topic_owners SET broker_id = NULL, epoch = epoch + 1, acquired_at = now()
WHERE topic_id = ANY($1::bigint[]);

-- name: fence_owned_topics
UPDATE topic_owners SET broker_id = NULL, epoch = epoch + 1, acquired_at = now()
WHERE topic_id = ANY($1::bigint[]) AND broker_id IS NOT NULL
RETURNING topic_id;

-- name: delete_entries
DELETE FROM entries WHERE topic_id = ANY($1::bigint[]);

-- name: delete_txn_entries
DELETE FROM txn_entries WHERE topic_id = ANY($1::bigint[]);

-- name: delete_txn_outcomes
DELETE FROM txn_outcomes WHERE topic_id = ANY($1::bigint[]);

-- name: delete_pending_acks
DELETE FROM pending_acks WHERE topic_id = ANY($1::bigint[]);

-- name: delete_delayed_deliveries
DELETE FROM delayed_deliveries WHERE topic_id = ANY($1::bigint[]);

-- name: delete_producer_sequences
DELETE FROM producer_sequences WHERE topic_id = ANY($1::bigint[]);

-- name: delete_subscriptions
DELETE FROM subscriptions WHERE topic_id = ANY($1::bigint[]);

-- name: delete_compacted_entries
DELETE FROM compacted_entries WHERE topic_id = ANY($1::bigint[]);

-- name: delete_compactions
DELETE FROM compactions WHERE topic_id = ANY($1::bigint[]);

-- name: delete_topic_owners
DELETE FROM topic_owners WHERE topic_id = ANY($1::bigint[]);

-- name: delete_topics
DELETE FROM topics WHERE topic_id = ANY($1::bigint[]);

-- name: delete_partitioned
DELETE FROM partitioned_topics WHERE topic = $1 RETURNING topic;

-- name: delete_namespace_partitioned
DELETE FROM partitioned_topics WHERE tenant = $1 AND namespace = $2;


-- name: log_stats
-- Committed transactions keep their batches in txn_entries (the log holds a marker),
-- so both tables count towards the stored bytes.
SELECT count(*) AS entries,
       coalesce(sum(num_messages), 0)::bigint AS messages,
       coalesce(sum(length(payload)), 0)::bigint
         + (SELECT coalesce(sum(length(payload)), 0)::bigint FROM txn_entries
            WHERE topic_id = $1) AS bytes,
       max(entry_id) AS last_entry,
       min(entry_id) AS first_entry,  -- trimming (retention) removes entries from the front
       (SELECT e.num_messages FROM entries e WHERE e.topic_id = $1
        ORDER BY e.entry_id DESC LIMIT 1) AS last_entry_messages
FROM entries WHERE topic_id = $1;

-- name: subscriptions
-- backlog_messages counts every message after the mark-delete position; the caller
-- subtracts the ones acknowledged individually (acked_state).
SELECT s.subscription, s.mark_delete_entry, s.acked_state,
       (SELECT coalesce(sum(e.num_messages), 0)::bigint FROM entries e
        WHERE e.topic_id = s.topic_id AND e.entry_id > s.mark_delete_entry) AS backlog_messages,
       (SELECT coalesce(sum(length(e.payload)), 0)::bigint FROM entries e
        WHERE e.topic_id = s.topic_id AND e.entry_id > s.mark_delete_entry) AS backlog_bytes
FROM subscriptions s WHERE s.topic_id = $1
ORDER BY s.subscription;

-- name: entry_sizes
SELECT entry_id, num_messages FROM entries
WHERE topic_id = $1 AND entry_id = ANY($2::bigint[]);

-- name: subscription_topics
-- Which of the topics $1 have the subscription $2.
SELECT topic_id FROM subscriptions WHERE topic_id = ANY($1::bigint[]) AND subscription = $2;

-- name: delete_subscription
-- With the delayed messages it was waiting for (migration 0011).
WITH delayed AS (
    DELETE FROM delayed_deliveries WHERE topic_id = ANY($1::bigint[]) AND subscription = $2
)
DELETE FROM subscriptions WHERE topic_id = ANY($1::bigint[]) AND subscription = $2
RETURNING topic_id;


-- name: live_brokers
SELECT broker_id, url, started_at, heartbeat_at FROM brokers
WHERE heartbeat_at > now() - make_interval(secs => $1::float8)
ORDER BY broker_id;

-- name: ownership
SELECT t.topic, o.broker_id, o.epoch, b.url,
       coalesce(b.heartbeat_at > now() - make_interval(secs => $1::float8), false) AS alive
FROM topic_owners o
JOIN topics t ON t.topic_id = o.topic_id
LEFT JOIN brokers b ON b.broker_id = o.broker_id
WHERE o.broker_id IS NOT NULL
ORDER BY t.topic;

-- ---------------------------------------------------------------- permissions (0007)

-- name: namespace_grants
SELECT role, actions FROM namespace_permissions WHERE tenant = $1 AND namespace = $2 ORDER BY role;

-- name: grant_namespace
-- Replaces the role's actions (Pulsar's grant-permission); no row when the namespace is missing.
INSERT INTO namespace_permissions (tenant, namespace, role, actions)
SELECT tenant, namespace, $3, $4 FROM namespaces WHERE tenant = $1 AND namespace = $2
ON CONFLICT (tenant, namespace, role) DO UPDATE SET actions = excluded.actions
RETURNING role;

-- name: revoke_namespace
DELETE FROM namespace_permissions WHERE tenant = $1 AND namespace = $2 AND role = $3;

-- name: topic_grants
SELECT role, actions FROM topic_permissions WHERE topic = $1 ORDER BY role;

-- name: grant_topic
INSERT INTO topic_permissions (tenant, namespace, topic, role, actions)
SELECT tenant, namespace, $3, $4, $5 FROM namespaces WHERE tenant = $1 AND namespace = $2
ON CONFLICT (topic, role) DO UPDATE SET actions = excluded.actions
RETURNING role;

-- name: revoke_topic
DELETE FROM topic_permissions WHERE topic = $1 AND role = $2;

-- name: delete_topic_grants
-- A deleted topic's grants go with it, so a later topic of the same name starts bare.
DELETE FROM topic_permissions WHERE topic = $1;

-- name: subscription_grants
SELECT subscription, roles FROM subscription_permissions
WHERE tenant = $1 AND namespace = $2 ORDER BY subscription;

-- name: grant_subscription
INSERT INTO subscription_permissions (tenant, namespace, subscription, roles)
SELECT tenant, namespace, $3, $4 FROM namespaces WHERE tenant = $1 AND namespace = $2
ON CONFLICT (tenant, namespace, subscription) DO UPDATE SET roles = excluded.roles
RETURNING subscription;

-- name: revoke_subscription_role
-- Takes one role off a subscription's list (the row goes with its last role: an empty
-- list restricts nothing, as in Pulsar).  No row: the subscription has no list.
WITH changed AS (
    UPDATE subscription_permissions SET roles = array_remove(roles, $4)
    WHERE tenant = $1 AND namespace = $2 AND subscription = $3
    RETURNING tenant, namespace, subscription, roles
), emptied AS (
    DELETE FROM subscription_permissions p USING changed c
    WHERE p.tenant = c.tenant AND p.namespace = c.namespace AND p.subscription = c.subscription
      AND cardinality(c.roles) = 0
)
SELECT subscription FROM changed;

-- ---------------------------------------------------------------- transactions (/admin/v3/transactions)
-- Read-only except abort, which goes through the coordinator's normal path.

-- name: coordinators
-- adopted_by: the live coordinator answering for a TCID whose own process is gone.
SELECT coordinator_id, url, fence_epoch, next_txn_id, heartbeat_at, adopted_by,
       heartbeat_at > now() - make_interval(secs => $1::float8) AS alive
FROM coordinators ORDER BY coordinator_id;

-- name: coordinator_counts
SELECT coordinator_id, count(*) FILTER (WHERE status IN ({TXN_OPEN}, {TXN_COMMITTING}, {TXN_ABORTING})) AS ongoing,
       count(*) FILTER (WHERE status = {TXN_COMMITTED}) AS committed,
       count(*) FILTER (WHERE status = {TXN_ABORTED}) AS aborted,
       min(txn_id) FILTER (WHERE status IN ({TXN_OPEN}, {TXN_COMMITTING}, {TXN_ABORTING})) AS low_water_mark
FROM transactions GROUP BY coordinator_id;

-- name: transaction
SELECT coordinator_id, txn_id, status, timeout_ms, opened_at, deadline_at, ended_at, owner, timed_out
FROM transactions WHERE coordinator_id = $1 AND txn_id = $2;

-- name: transaction_partitions
SELECT topic FROM txn_partitions WHERE coordinator_id = $1 AND txn_id = $2 ORDER BY topic;

-- name: transaction_subscriptions
SELECT topic, subscription FROM txn_subscriptions WHERE coordinator_id = $1 AND txn_id = $2
ORDER BY topic, subscription;

-- name: slow_transactions
SELECT coordinator_id, txn_id FROM transactions
WHERE status IN ({TXN_OPEN}, {TXN_COMMITTING}, {TXN_ABORTING}) AND opened_at < now() - make_interval(secs => $1::float8)
  AND ($2::integer IS NULL OR coordinator_id = $2)
ORDER BY opened_at LIMIT 1000;

-- name: txn_in_buffer
SELECT count(e.seq) AS batches, coalesce(sum(e.num_messages), 0) AS messages,
       (SELECT committed FROM txn_outcomes o WHERE o.topic_id = $1 AND o.subscription = ''
          AND o.txn_most = $2 AND o.txn_least = $3) AS committed,
       (SELECT entry_id FROM entries m WHERE m.topic_id = $1 AND m.txn_most = $2 AND m.txn_least = $3)
          AS marker
FROM txn_entries e WHERE e.topic_id = $1 AND e.txn_most = $2 AND e.txn_least = $3;

-- name: pending_acks
SELECT txn_most, txn_least, count(*) AS positions, bool_or(cumulative) AS cumulative,
       min(entry_id) AS first_entry, max(entry_id) AS last_entry
FROM pending_acks WHERE topic_id = $1 AND subscription = $2
GROUP BY txn_most, txn_least ORDER BY txn_most, txn_least;

-- name: sub_outcome
SELECT committed FROM txn_outcomes
WHERE topic_id = $1 AND subscription = $2 AND txn_most = $3 AND txn_least = $4;

-- name: transaction_owner
SELECT owner FROM transactions WHERE coordinator_id = $1 AND txn_id = $2;

-- ---------------------------------------------------------------- transaction keys
-- Deletion goes through the registry (it aborts the key's transactions first).

-- name: list_keys
-- Keyset pagination on (owner, transaction_key); $1 owner filter (NULL: all), $5 one
-- key by name (NULL: all).
SELECT k.owner, k.transaction_key, k.epoch, k.coordinator_id, k.created_at, k.last_active_at,
       extract(epoch FROM now() - k.created_at) AS age_s,
       extract(epoch FROM now() - k.last_active_at) AS idle_s,
       ARRAY(SELECT '(' || t.coordinator_id || ',' || t.txn_id || ')' FROM transactions t
             WHERE t.key_owner = k.owner AND t.transaction_key = k.transaction_key
               AND t.status IN ({TXN_OPEN}, {TXN_COMMITTING}, {TXN_ABORTING})
             ORDER BY t.coordinator_id, t.txn_id) AS transactions
FROM transaction_keys k
WHERE NOT k.deleted
  AND ($1::text IS NULL OR k.owner = $1)
  AND ($2::text IS NULL OR (k.owner, k.transaction_key) > ($2, $3::text))
  AND ($5::text IS NULL OR k.transaction_key = $5)
ORDER BY k.owner, k.transaction_key
LIMIT $4;

-- name: live_registries
SELECT DISTINCT url FROM registries
WHERE heartbeat_at > now() - make_interval(secs => $1::float8) ORDER BY url;


-- ---------------------------------------------------------------- storage policies (0008)
-- Namespace level: topic = ''; topic level: the topic's (or partitioned topic's) full name.
-- A NULL written clears that policy at that level (remove-*).

-- name: get_storage_policies
SELECT retention_time_minutes, retention_size_mb, message_ttl_seconds,
       backlog_limit_size, backlog_limit_time, backlog_policy, delayed_delivery_active,
       delayed_delivery_tick_ms, delayed_delivery_max_delay_ms, compaction_threshold
FROM storage_policies WHERE tenant = $1 AND namespace = $2 AND topic = $3;

-- name: set_compaction_threshold
INSERT INTO storage_policies (tenant, namespace, topic, compaction_threshold)
VALUES ($1, $2, $3, $4)
ON CONFLICT (tenant, namespace, topic) DO UPDATE
    SET compaction_threshold = excluded.compaction_threshold, updated_at = now();

-- name: set_retention
INSERT INTO storage_policies (tenant, namespace, topic, retention_time_minutes, retention_size_mb)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (tenant, namespace, topic) DO UPDATE
    SET retention_time_minutes = excluded.retention_time_minutes,
        retention_size_mb = excluded.retention_size_mb, updated_at = now();

-- name: set_message_ttl
INSERT INTO storage_policies (tenant, namespace, topic, message_ttl_seconds)
VALUES ($1, $2, $3, $4)
ON CONFLICT (tenant, namespace, topic) DO UPDATE
    SET message_ttl_seconds = excluded.message_ttl_seconds, updated_at = now();

-- name: set_backlog_quota
INSERT INTO storage_policies (tenant, namespace, topic, backlog_limit_size, backlog_limit_time,
                              backlog_policy)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (tenant, namespace, topic) DO UPDATE
    SET backlog_limit_size = excluded.backlog_limit_size,
        backlog_limit_time = excluded.backlog_limit_time,
        backlog_policy = excluded.backlog_policy, updated_at = now();

-- name: set_delayed_delivery
-- Pulsar's delayed_delivery policy at one level (NULLs: removed).
INSERT INTO storage_policies (tenant, namespace, topic, delayed_delivery_active, delayed_delivery_tick_ms,
                              delayed_delivery_max_delay_ms)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (tenant, namespace, topic) DO UPDATE
    SET delayed_delivery_active = excluded.delayed_delivery_active,
        delayed_delivery_tick_ms = excluded.delayed_delivery_tick_ms,
        delayed_delivery_max_delay_ms = excluded.delayed_delivery_max_delay_ms, updated_at = now();

-- name: delete_topic_storage_policies
DELETE FROM storage_policies WHERE topic = $1;


-- name: lock_partitioned
SELECT partitions FROM partitioned_topics WHERE topic = $1 FOR UPDATE;

-- name: grow_partitioned
-- update-partitioned-topic: grow only (the caller checked under the row lock).
UPDATE partitioned_topics SET partitions = $2 WHERE topic = $1 AND partitions < $2;


-- ---------------------------------------------------------------- dead-letter policies (0010)
-- Per subscription of a topic (or partitioned topic: its full name covers its partitions).

-- name: get_dead_letter_policy
SELECT max_redeliver_count, dead_letter_topic, initial_subscription_name, retry_letter_topic
FROM dead_letter_policies WHERE topic = $1 AND subscription = $2;

-- name: set_dead_letter_policy
INSERT INTO dead_letter_policies (tenant, namespace, topic, subscription, max_redeliver_count,
                                  dead_letter_topic, initial_subscription_name, retry_letter_topic)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (topic, subscription) DO UPDATE
    SET max_redeliver_count = excluded.max_redeliver_count,
        dead_letter_topic = excluded.dead_letter_topic,
        initial_subscription_name = excluded.initial_subscription_name,
        retry_letter_topic = excluded.retry_letter_topic, updated_at = now();

-- name: delete_dead_letter_policy
DELETE FROM dead_letter_policies WHERE topic = $1 AND subscription = $2 RETURNING 1;

-- name: delete_topic_dead_letter_policies
DELETE FROM dead_letter_policies WHERE topic = $1;
