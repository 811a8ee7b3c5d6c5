-- Admin views of transactions (/admin/v3/transactions).  Read-only except abort, which
-- goes through the coordinator's normal path.

-- name: coordinators
-- adopted_by: the live coordinator answering for a TCID whose own process is gone.
SELECT coordinator_id, url, fence_epoch, next_txn_id, heartbeat_at, adopted_by,
       heartbeat_at > now() - make_interval(secs => $1::float8) AS alive
FROM coordinators ORDER BY coordinator_id;

-- name: coordinator_counts
SELECT coordinator_id, count(*) FILTER (WHERE status IN (0, 1, 3)) AS ongoing,
       count(*) FILTER (WHERE status = 2) AS committed, count(*) FILTER (WHERE status = 4) AS aborted,
       min(txn_id) FILTER (WHERE status IN (0, 1, 3)) AS low_water_mark
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
WHERE status IN (0, 1, 3) AND opened_at < now() - make_interval(secs => $1::float8)
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
