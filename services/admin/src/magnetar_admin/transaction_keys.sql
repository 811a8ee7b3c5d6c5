-- Admin views of transaction keys (/admin/v2/transactions/transaction-keys).  Deletion
-- goes through the registry (it aborts the key's transactions first).

-- name: list_keys
-- Keyset pagination on (owner, transaction_key); $1 owner filter (NULL: all), $5 one
-- key by name (NULL: all).
SELECT k.owner, k.transaction_key, k.epoch, k.coordinator_id, k.created_at, k.last_active_at,
       extract(epoch FROM now() - k.created_at) AS age_s,
       extract(epoch FROM now() - k.last_active_at) AS idle_s,
       ARRAY(SELECT '(' || t.coordinator_id || ',' || t.txn_id || ')' FROM transactions t
             WHERE t.key_owner = k.owner AND t.transaction_key = k.transaction_key
               AND t.status IN (0, 1, 3)
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

