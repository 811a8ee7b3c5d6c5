-- Coordinator SQL.  Every write compares this process's fence epoch on the coordinator
-- row in the same statement (FOR SHARE), so a process that lost its TCID writes nothing.

-- name: claim
-- The TCID's own process: takes the row when its holder's lease lapsed, when it is
-- itself, or at once from an adopter (the owner comes back: the adopter is fenced).
INSERT INTO coordinators (coordinator_id, instance, fence_epoch, url)
VALUES ($1, $2, 1, $3)
ON CONFLICT (coordinator_id) DO UPDATE
    SET instance = excluded.instance, fence_epoch = coordinators.fence_epoch + 1,
        url = excluded.url, heartbeat_at = now(), adopted_by = NULL
    WHERE coordinators.heartbeat_at < now() - make_interval(secs => $4::float8)
       OR coordinators.instance = excluded.instance
       OR coordinators.adopted_by IS NOT NULL
RETURNING fence_epoch;

-- name: adopt
-- A live coordinator ($4, its own TCID) takes a gone TCID's row: only while nobody
-- heartbeats it (the same lapse a restart waits for), by compare-and-set on the epoch.
UPDATE coordinators
SET instance = $2, fence_epoch = fence_epoch + 1, url = $3, heartbeat_at = now(),
    adopted_by = $4
WHERE coordinator_id = $1 AND heartbeat_at < now() - make_interval(secs => $5::float8)
RETURNING fence_epoch;

-- name: orphans
-- TCIDs nobody heartbeats (process gone, or released on SIGTERM), with how long, and
-- the live coordinators serving their own TCID (the candidates to adopt them).
SELECT coordinator_id, extract(epoch FROM now() - heartbeat_at)::float8 AS stale_s,
       heartbeat_at > now() - make_interval(secs => $1::float8) AND adopted_by IS NULL AS owner_live
FROM coordinators
ORDER BY coordinator_id;

-- name: heartbeat
UPDATE coordinators SET heartbeat_at = now()
WHERE coordinator_id = $1 AND fence_epoch = $2
RETURNING 1;

-- name: release
UPDATE coordinators SET heartbeat_at = now() - interval '1 day'
WHERE coordinator_id = $1 AND fence_epoch = $2;

-- name: live_coordinators
SELECT coordinator_id, url FROM coordinators
WHERE heartbeat_at > now() - make_interval(secs => $1::float8)
ORDER BY coordinator_id;

-- name: live_brokers
SELECT url FROM brokers WHERE heartbeat_at > now() - make_interval(secs => $1::float8);

-- name: holds_fence
-- Whether this process still holds the coordinator id (a batch of transitions that moved
-- nothing may mean another process claimed it).
SELECT 1 FROM coordinators WHERE coordinator_id = $1 AND fence_epoch = $2;

-- name: allocate_ids
UPDATE coordinators SET next_txn_id = next_txn_id + $3
WHERE coordinator_id = $1 AND fence_epoch = $2
RETURNING next_txn_id - $3;

-- name: new_txns
-- Many unkeyed transactions in one statement (the store's group commit): $3 ids,
-- $4 timeouts in ms, $5 owners, $6 holds in ms (a client pool's: the deadline is that
-- much later).  No row comes back when this process lost its TCID.
WITH fence AS (
    SELECT 1 FROM coordinators WHERE coordinator_id = $1 AND fence_epoch = $2 FOR SHARE
)
INSERT INTO transactions (coordinator_id, txn_id, status, timeout_ms, deadline_at, owner)
SELECT $1, t.id, {TXN_OPEN}, t.timeout, now() + make_interval(secs => (t.timeout + t.hold) / 1000.0),
       t.owner
FROM unnest($3::bigint[], $4::bigint[], $5::text[], $6::bigint[]) AS t (id, timeout, owner, hold)
WHERE EXISTS (SELECT 1 FROM fence)
RETURNING txn_id;

-- name: add_participants
-- Registrations of many transactions in one statement (the store's group commit): row i
-- registers partition $4[i] ($5[i] = '') or subscription ($4[i], $5[i]) for transaction
-- $3[i], each only while its transaction is OPEN (its row held FOR SHARE, so an ending
-- waits for this statement and then reads what it registered).  Answers each
-- transaction's status; one missing there does not exist.
WITH fence AS (
    SELECT 1 FROM coordinators WHERE coordinator_id = $1 AND fence_epoch = $2 FOR SHARE
), req AS (
    SELECT * FROM unnest($3::bigint[], $4::text[], $5::text[]) AS r (id, topic, sub)
), txns AS (
    SELECT txn_id, status FROM transactions
    WHERE coordinator_id = $1 AND txn_id IN (SELECT id FROM req)
    FOR SHARE
), parts AS (
    INSERT INTO txn_partitions (coordinator_id, txn_id, topic)
    SELECT DISTINCT $1, r.id, r.topic FROM req r JOIN txns t ON t.txn_id = r.id
    WHERE r.sub = '' AND t.status = {TXN_OPEN} AND EXISTS (SELECT 1 FROM fence)
    ON CONFLICT DO NOTHING
    RETURNING 1
), subs AS (
    INSERT INTO txn_subscriptions (coordinator_id, txn_id, topic, subscription)
    SELECT DISTINCT $1, r.id, r.topic, r.sub FROM req r JOIN txns t ON t.txn_id = r.id
    WHERE r.sub <> '' AND t.status = {TXN_OPEN} AND EXISTS (SELECT 1 FROM fence)
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM fence) AS fenced_ok,
       (SELECT count(*) FROM parts) + (SELECT count(*) FROM subs) AS added,
       ARRAY(SELECT txn_id FROM txns) AS ids, ARRAY(SELECT status FROM txns) AS statuses;

-- name: transitions
-- Many compare-and-sets in one statement (the store's group commit): each of $3 moves
-- from $4 to $5; the ids that moved come back.
WITH fence AS (
    SELECT 1 FROM coordinators WHERE coordinator_id = $1 AND fence_epoch = $2 FOR SHARE
)
UPDATE transactions t
SET status = u.target,
    ended_at = CASE WHEN u.target IN (2, 4) THEN now() ELSE t.ended_at END
FROM unnest($3::bigint[], $4::smallint[], $5::smallint[]) AS u (id, current, target)
WHERE t.coordinator_id = $1 AND t.txn_id = u.id AND t.status = u.current
  AND EXISTS (SELECT 1 FROM fence)
RETURNING t.txn_id;

-- name: get_txn
SELECT status, timeout_ms, opened_at, deadline_at, ended_at, owner, timed_out, expired,
       transaction_key, app_commit_order
FROM transactions WHERE coordinator_id = $1 AND txn_id = $2;

-- name: txns_participants
-- The participants of many transactions ($2) in one statement, one row per participant
-- (subscription '' for a partition); read after their ending status is durable.
SELECT txn_id, topic, '' AS subscription FROM txn_partitions
WHERE coordinator_id = $1 AND txn_id = ANY($2::bigint[])
UNION ALL
SELECT txn_id, topic, subscription FROM txn_subscriptions
WHERE coordinator_id = $1 AND txn_id = ANY($2::bigint[])
ORDER BY 1, 2, 3;

-- name: ending_txns
SELECT txn_id, status FROM transactions
WHERE coordinator_id = $1 AND status IN ({TXN_COMMITTING}, {TXN_ABORTING})
ORDER BY txn_id;

-- name: expired_txns
-- Past their deadline: OPEN ones are aborted; COMMITTING/ABORTING ones nobody drives (an
-- application's own SQL transaction committed it, docs/exactly-once-postgres.md, and its
-- notification and its client's EndTxn were both lost) are finished.
SELECT txn_id, status FROM transactions
WHERE coordinator_id = $1 AND status IN ({TXN_OPEN}, {TXN_COMMITTING}, {TXN_ABORTING})
  AND deadline_at <= now()
ORDER BY deadline_at
LIMIT 1000;

-- name: active_count
SELECT count(*) FROM transactions WHERE coordinator_id = $1 AND status IN ({TXN_OPEN}, {TXN_COMMITTING}, {TXN_ABORTING});

-- name: open_by_owner
SELECT owner, count(*) AS n FROM transactions
WHERE coordinator_id = $1 AND status = {TXN_OPEN} AND owner IS NOT NULL GROUP BY owner;

-- name: purge_ended
WITH fence AS (
    SELECT 1 FROM coordinators WHERE coordinator_id = $1 AND fence_epoch = $3 FOR SHARE
)
DELETE FROM transactions
WHERE coordinator_id = $1 AND status IN ({TXN_COMMITTED}, {TXN_ABORTED})
  AND ended_at < now() - make_interval(secs => $2::float8) AND EXISTS (SELECT 1 FROM fence);

-- name: new_keyed_txn
-- A keyed client's transaction (seed 000): claims the key's one active-transaction slot
-- by compare-and-set on the key row (its epoch must still be the caller's, the slot
-- empty), and inserts the transaction, in one statement.  The last columns say why not.
WITH fence AS (
    SELECT 1 FROM coordinators WHERE coordinator_id = $1 AND fence_epoch = $2 FOR SHARE
), claimed AS (
    UPDATE transaction_keys
    SET active_txn_most = $1, active_txn_least = $3, last_active_at = now()
    WHERE owner = $5 AND transaction_key = $6 AND epoch = $7 AND NOT deleted
      AND active_txn_least IS NULL AND EXISTS (SELECT 1 FROM fence)
    RETURNING 1
), created AS (
    INSERT INTO transactions (coordinator_id, txn_id, status, timeout_ms, deadline_at, owner,
                              key_owner, transaction_key, key_epoch)
    SELECT $1, $3, {TXN_OPEN}, $4::bigint, now() + make_interval(secs => $4::bigint / 1000.0), $5,
           $5, $6, $7
    WHERE EXISTS (SELECT 1 FROM claimed)
    RETURNING 1
)
SELECT (SELECT count(*) FROM fence) AS fenced_ok, (SELECT count(*) FROM created) AS created,
       k.epoch, k.deleted, k.active_txn_most, k.active_txn_least
FROM (SELECT 1) AS one
LEFT JOIN transaction_keys k ON k.owner = $5 AND k.transaction_key = $6;

-- name: start_ending_unkeyed
-- OPEN -> COMMITTING/ABORTING for many transactions without a key in one statement (the
-- store's group commit): row i moves $3[i] to $4[i], setting the timed-out ($5[i]) and
-- expired ($6[i]) flags.  Keyed transactions are left alone (their key's epoch is
-- checked one at a time, by start_ending); the ids that moved come back.  The ids must
-- be distinct (the store sends a repeated id the one-at-a-time way).
WITH fence AS (
    SELECT 1 FROM coordinators WHERE coordinator_id = $1 AND fence_epoch = $2 FOR SHARE
)
UPDATE transactions t
SET status = u.target, timed_out = t.timed_out OR u.timed_out, expired = t.expired OR u.expired
FROM unnest($3::bigint[], $4::smallint[], $5::bool[], $6::bool[])
     AS u (id, target, timed_out, expired)
WHERE t.coordinator_id = $1 AND t.txn_id = u.id AND t.status = {TXN_OPEN}
  AND t.transaction_key IS NULL AND EXISTS (SELECT 1 FROM fence)
RETURNING t.txn_id;

-- name: lock_committing
-- A transaction an application's SQL transaction already moved to COMMITTING
-- (magnetar_app.commit_transaction): locked for the one-phase end that finishes it, as
-- start_ending_unkeyed locks the ones it moves.  Not one with an earlier application
-- commit still to finish on a partition they share (migration 0015): its markers wait
-- for that one's, the two-phase way (app_predecessors).
WITH fence AS (
    SELECT 1 FROM coordinators WHERE coordinator_id = $1 AND fence_epoch = $2 FOR SHARE
)
SELECT txn_id FROM transactions
WHERE coordinator_id = $1 AND txn_id = $3 AND status = {TXN_COMMITTING}
  AND EXISTS (SELECT 1 FROM fence)
  AND NOT EXISTS (SELECT 1 FROM app_commit_predecessors
                  WHERE coordinator_id = $1 AND txn_id = $3)
FOR UPDATE;

-- name: app_predecessors
-- The earlier application commits still COMMITTING on the partitions transaction $2 sent
-- to (none unless an application committed it: migration 0015), oldest first, with each
-- partition they share.
SELECT earlier_coordinator_id, earlier_txn_id, earlier_order, topic
FROM app_commit_predecessors
WHERE coordinator_id = $1 AND txn_id = $2
ORDER BY earlier_order, topic;

-- name: start_ending
-- OPEN -> COMMITTING/ABORTING ($4) by compare-and-set.  A keyed transaction may only
-- start committing while its key's epoch is still the one it was opened under (the key
-- row is locked FOR SHARE, so a concurrent connect's epoch bump goes first or after,
-- never between); either way its key's active slot is freed.
WITH fence AS (
    SELECT 1 FROM coordinators WHERE coordinator_id = $1 AND fence_epoch = $2 FOR SHARE
), txn AS (
    SELECT key_owner, transaction_key, key_epoch FROM transactions
    WHERE coordinator_id = $1 AND txn_id = $3 AND status = {TXN_OPEN}
), key_row AS (
    SELECT epoch, deleted FROM transaction_keys
    WHERE (owner, transaction_key) = (SELECT key_owner, transaction_key FROM txn)
    FOR SHARE
), key_ok AS (
    SELECT (SELECT transaction_key FROM txn) IS NULL
        OR $4::smallint = 3
        OR EXISTS (SELECT 1 FROM key_row
                   WHERE epoch = (SELECT key_epoch FROM txn) AND NOT deleted) AS ok
), moved AS (
    UPDATE transactions
    SET status = $4::smallint, timed_out = timed_out OR $5, expired = expired OR $6
    WHERE coordinator_id = $1 AND txn_id = $3 AND status = {TXN_OPEN}
      AND EXISTS (SELECT 1 FROM fence) AND (SELECT ok FROM key_ok)
    RETURNING key_owner, transaction_key
), freed AS (
    UPDATE transaction_keys k
    SET active_txn_most = NULL, active_txn_least = NULL, last_active_at = now()
    FROM moved
    WHERE k.owner = moved.key_owner AND k.transaction_key = moved.transaction_key
      AND k.active_txn_most = $1 AND k.active_txn_least = $3
    RETURNING 1
)
SELECT (SELECT count(*) FROM fence) AS fenced_ok, (SELECT count(*) FROM moved) AS moved,
       (SELECT ok FROM key_ok) AS key_ok, (SELECT count(*) FROM freed) AS freed;
