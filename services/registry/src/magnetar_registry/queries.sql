-- Registry SQL: transaction keys (seed 000).  An epoch only ever grows: connects bump
-- it by compare-and-set on the key row, deletion keeps the row as a tombstone.

-- name: heartbeat
INSERT INTO registries (instance, url) VALUES ($1, $2)
ON CONFLICT (instance) DO UPDATE SET url = excluded.url, heartbeat_at = now();

-- name: deregister
DELETE FROM registries WHERE instance = $1;

-- name: live_coordinators
-- Every TCID someone heartbeats, with the URL that answers for it (its own process, or
-- the live coordinator that adopted it), and whether its own process serves it.
SELECT coordinator_id, url, adopted_by IS NULL AS own FROM coordinators
WHERE heartbeat_at > now() - make_interval(secs => $1::float8)
ORDER BY coordinator_id;

-- name: connect_new
-- A new connection: epoch + 1 (0 for a new key), the key's active slot emptied, the
-- coordinator binding kept when the key exists and its coordinator's own process is
-- live ($4), else re-bound to $3 (the binding only routes: fencing is the epoch).
INSERT INTO transaction_keys (owner, transaction_key, epoch, coordinator_id)
VALUES ($1, $2, 0, $3)
ON CONFLICT (owner, transaction_key) DO UPDATE
    SET epoch = transaction_keys.epoch + 1, deleted = false,
        active_txn_most = NULL, active_txn_least = NULL, last_active_at = now(),
        coordinator_id = CASE WHEN transaction_keys.coordinator_id = ANY($4::int[])
                              THEN transaction_keys.coordinator_id ELSE $3 END
RETURNING epoch, coordinator_id, created_at;

-- name: connect_resume
-- The same client again (its epoch unchanged), re-bound like connect_new.
UPDATE transaction_keys
SET last_active_at = now(),
    coordinator_id = CASE WHEN coordinator_id = ANY($5::int[]) THEN coordinator_id
                          ELSE coalesce($4, coordinator_id) END
WHERE owner = $1 AND transaction_key = $2 AND epoch = $3 AND NOT deleted
RETURNING epoch, coordinator_id;

-- name: get_key
SELECT epoch, deleted FROM transaction_keys WHERE owner = $1 AND transaction_key = $2;

-- name: delete_key
-- Fence the current holder too (epoch + 1) and keep the row as a tombstone.
UPDATE transaction_keys
SET deleted = true, epoch = epoch + 1, active_txn_most = NULL, active_txn_least = NULL,
    last_active_at = now()
WHERE owner = $1 AND transaction_key = $2 AND NOT deleted
RETURNING epoch;

-- name: unfinished_older
-- The key's transactions opened under an older epoch and not yet ended: to abort.
SELECT coordinator_id, txn_id, status FROM transactions
WHERE key_owner = $1 AND transaction_key = $2 AND key_epoch < $3 AND status IN ({TXN_OPEN}, {TXN_COMMITTING}, {TXN_ABORTING})
ORDER BY coordinator_id, txn_id;

-- name: key_count
SELECT count(*) FROM transaction_keys WHERE NOT deleted;

-- name: recent_keys
SELECT owner, transaction_key, epoch, extract(epoch FROM now() - last_active_at) AS idle_s
FROM transaction_keys WHERE NOT deleted
ORDER BY last_active_at DESC LIMIT $1;
