-- Admin SQL.  Metadata changes only; the partition log is written by brokers.

-- name: list_tenants
SELECT tenant FROM tenants ORDER BY tenant;

-- name: get_tenant
SELECT tenant, admin_roles FROM tenants WHERE tenant = $1;

-- name: create_tenant
INSERT INTO tenants (tenant, admin_roles) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING tenant;

-- name: delete_tenant
DELETE FROM tenants WHERE tenant = $1 RETURNING tenant;

-- name: count_namespaces
SELECT count(*) FROM namespaces WHERE tenant = $1;

-- name: list_namespaces
SELECT namespace FROM namespaces WHERE tenant = $1 ORDER BY namespace;

-- name: get_namespace
SELECT deduplication_enabled FROM namespaces WHERE tenant = $1 AND namespace = $2;

-- name: create_namespace
INSERT INTO namespaces (tenant, namespace) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING namespace;

-- name: delete_namespace
DELETE FROM namespaces WHERE tenant = $1 AND namespace = $2 RETURNING namespace;

-- name: set_deduplication
UPDATE namespaces SET deduplication_enabled = $3 WHERE tenant = $1 AND namespace = $2 RETURNING namespace;

-- name: count_topics_in_namespace
SELECT (SELECT count(*) FROM topics WHERE tenant = $1 AND namespace = $2)
     + (SELECT count(*) FROM partitioned_topics WHERE tenant = $1 AND namespace = $2);

-- name: list_topics
SELECT topic FROM topics WHERE tenant = $1 AND namespace = $2 ORDER BY topic;

-- name: list_partitioned
SELECT topic FROM partitioned_topics WHERE tenant = $1 AND namespace = $2 ORDER BY topic;

-- name: get_partitioned
SELECT partitions FROM partitioned_topics WHERE topic = $1;

-- name: create_partitioned
INSERT INTO partitioned_topics (topic, tenant, namespace, partitions) VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING RETURNING topic;

-- name: create_topic
INSERT INTO topics (topic, tenant, namespace, partition_index) VALUES ($1, $2, $3, $4)
ON CONFLICT DO NOTHING RETURNING topic_id;

-- name: create_owner_row
INSERT INTO topic_owners (topic_id) VALUES ($1) ON CONFLICT DO NOTHING;

-- name: get_topic
SELECT topic_id FROM topics WHERE topic = $1;

-- name: topic_owner
SELECT o.broker_id, o.epoch, o.topic_epoch, b.url,
       coalesce(b.heartbeat_at > now() - make_interval(secs => $2::float8), false) AS alive
FROM topic_owners o LEFT JOIN brokers b ON b.broker_id = o.broker_id
WHERE o.topic_id = $1;

-- name: fence_topic
UPDATE topic_owners SET broker_id = NULL, epoch = epoch + 1 WHERE topic_id = $1;

-- name: delete_topic_rows
WITH e AS (DELETE FROM entries WHERE topic_id = $1),
     s AS (DELETE FROM subscriptions WHERE topic_id = $1),
     p AS (DELETE FROM producer_sequences WHERE topic_id = $1),
     x AS (DELETE FROM txn_entries WHERE topic_id = $1),
     o AS (DELETE FROM txn_outcomes WHERE topic_id = $1),
     a AS (DELETE FROM pending_acks WHERE topic_id = $1)
DELETE FROM topics WHERE topic_id = $1;

-- name: delete_partitioned
DELETE FROM partitioned_topics WHERE topic = $1;

-- name: log_stats
SELECT count(*) AS entries, coalesce(sum(num_messages), 0) AS messages,
       coalesce(sum(length(payload)), 0) AS bytes, max(entry_id) AS last_entry
FROM entries WHERE topic_id = $1;

-- name: subscriptions
SELECT s.subscription, s.mark_delete_entry, s.acked_state,
       (SELECT coalesce(sum(e.num_messages), 0) FROM entries e
        WHERE e.topic_id = s.topic_id AND e.entry_id > s.mark_delete_entry) AS backlog
FROM subscriptions s WHERE s.topic_id = $1 ORDER BY s.subscription;

-- name: delete_subscription
DELETE FROM subscriptions WHERE topic_id = $1 AND subscription = $2 RETURNING 1;

-- name: live_brokers
SELECT broker_id, url, started_at, heartbeat_at FROM brokers
WHERE heartbeat_at > now() - make_interval(secs => $1::float8) ORDER BY broker_id;

-- name: ownership
SELECT t.topic, o.broker_id, o.epoch FROM topic_owners o JOIN topics t USING (topic_id)
WHERE o.broker_id IS NOT NULL ORDER BY t.topic;
