-- Broker SQL.  Loaded by store.py with magnetar_storage.queries.load_queries.
-- Every write for a topic compares the owner epoch in the same statement (the `owner`
-- CTE takes a FOR SHARE lock on the lease row, so a takeover's compare-and-set waits
-- for in-flight writes and every later write of the old owner finds no row).

-- name: register_broker
INSERT INTO brokers (broker_id, url) VALUES ($1, $2)
ON CONFLICT (broker_id) DO UPDATE SET url = excluded.url, started_at = now(), heartbeat_at = now();

-- name: deregister_broker
DELETE FROM brokers WHERE broker_id = $1;

-- name: heartbeat
UPDATE brokers SET heartbeat_at = now() WHERE broker_id = $1 RETURNING broker_id;

-- name: release_all_topics
UPDATE topic_owners SET broker_id = NULL, epoch = epoch + 1, acquired_at = now()
WHERE broker_id = $1;

-- name: release_topic
UPDATE topic_owners SET broker_id = NULL, epoch = epoch + 1, acquired_at = now()
WHERE topic_id = $1 AND broker_id = $2 AND epoch = $3;

-- name: owned_topics
SELECT topic_id, epoch FROM topic_owners WHERE broker_id = $1;

-- name: owned_topics_with_entries
-- The partitions this broker owns that have a log, loaded or not (the lifecycle loop
-- tends them all, not only those a client has opened since the broker started).
SELECT o.topic_id, t.topic FROM topic_owners o JOIN topics t USING (topic_id)
WHERE o.broker_id = $1 AND EXISTS (SELECT 1 FROM entries e WHERE e.topic_id = o.topic_id)
ORDER BY o.topic_id;

-- name: live_brokers
SELECT broker_id, url FROM brokers
WHERE heartbeat_at > now() - make_interval(secs => $1::float8)
ORDER BY broker_id;

-- name: get_topic
SELECT topic_id, partition_index FROM topics WHERE topic = $1;

-- name: get_partitioned_topic
SELECT partitions FROM partitioned_topics WHERE topic = $1;

-- name: namespace_topics
-- A namespace's topics, partitions by their own names (Pulsar's GET_TOPICS_OF_NAMESPACE).
SELECT topic FROM topics WHERE tenant = $1 AND namespace = $2 ORDER BY topic;

-- name: get_namespace
SELECT deduplication_enabled FROM namespaces WHERE tenant = $1 AND namespace = $2;

-- name: insert_topic
INSERT INTO topics (topic, tenant, namespace, partition_index) VALUES ($1, $2, $3, $4)
ON CONFLICT (topic) DO NOTHING;

-- name: insert_topic_owner
INSERT INTO topic_owners (topic_id) SELECT topic_id FROM topics WHERE topic = $1
ON CONFLICT (topic_id) DO NOTHING;

-- name: lookup_owner
SELECT o.broker_id, o.epoch, b.url,
       coalesce(b.heartbeat_at > now() - make_interval(secs => $2::float8), false) AS alive
FROM topic_owners o LEFT JOIN brokers b ON b.broker_id = o.broker_id
WHERE o.topic_id = $1;

-- name: assign_owner
UPDATE topic_owners SET broker_id = $2, epoch = epoch + 1, acquired_at = now()
WHERE topic_id = $1 AND epoch = $3
RETURNING epoch;

-- name: my_epoch
SELECT epoch FROM topic_owners WHERE topic_id = $1 AND broker_id = $2;

-- name: next_entry_id
SELECT coalesce(max(entry_id) + 1, 0) FROM entries WHERE topic_id = $1;

-- name: last_sequence_id
SELECT last_sequence_id FROM producer_sequences WHERE topic_id = $1 AND producer_name = $2;

-- name: append_entries
-- :exclusive_epoch: the topic epoch the writing exclusive producer holds (NULL for shared
-- producers).  The entries come as rows.EntryColumns (entry_*), the sequences as
-- (sequence_producer, sequence_highest).
WITH owner AS (
    SELECT topic_epoch FROM topic_owners
    WHERE topic_id = :topic_id AND broker_id = :broker_id AND epoch = :epoch
    FOR SHARE
), allowed AS (
    SELECT 1 FROM owner WHERE :exclusive_epoch::bigint IS NULL OR topic_epoch = :exclusive_epoch::bigint
), appended AS (
    INSERT INTO entries (topic_id, entry_id, producer_name, sequence_id, highest_sequence_id,
                         num_messages, publish_time, payload, deliver_at)
    -- :delays: each entry's delivery time, or NULL when none is delayed (unnest pads it).
    SELECT :topic_id, e.* FROM unnest(
        :entry_entry_id::bigint[], :entry_producer::text[], :entry_lowest::bigint[],
        :entry_highest::bigint[], :entry_messages::integer[], :entry_publish_time::bigint[],
        :entry_payload::bytea[], :delays::bigint[]) AS e
    WHERE EXISTS (SELECT 1 FROM allowed)
    RETURNING 1
), sequences AS (
    INSERT INTO producer_sequences (topic_id, producer_name, last_sequence_id)
    SELECT :topic_id, s.name, s.seq
    FROM unnest(:sequence_producer::text[], :sequence_highest::bigint[]) AS s (name, seq)
    WHERE EXISTS (SELECT 1 FROM allowed)
    ON CONFLICT (topic_id, producer_name) DO UPDATE
        SET last_sequence_id = greatest(producer_sequences.last_sequence_id,
                                        excluded.last_sequence_id),
            updated_at = now()
    RETURNING 1
)
SELECT (SELECT count(*) FROM owner) AS owned, (SELECT count(*) FROM allowed) AS allowed;

-- name: get_topic_epoch
SELECT topic_epoch FROM topic_owners WHERE topic_id = $1;

-- name: set_topic_epoch
UPDATE topic_owners SET topic_epoch = $4
WHERE topic_id = $1 AND broker_id = $2 AND epoch = $3 AND topic_epoch < $4
RETURNING topic_epoch;

-- name: expire_idle_producers
-- PIP-6 state of the producer names that stored nothing for $4 seconds and are not
-- connected here ($5), deleted only while this broker holds the lease (Pulsar's
-- brokerDeduplicationProducerInactivityTimeoutMinutes); the names deleted come back.
WITH owner AS (
    SELECT 1 FROM topic_owners
    WHERE topic_id = $1 AND broker_id = $2 AND epoch = $3
    FOR SHARE
)
DELETE FROM producer_sequences
WHERE topic_id = $1 AND updated_at < now() - make_interval(secs => $4)
  AND producer_name <> ALL ($5::text[]) AND EXISTS (SELECT 1 FROM owner)
RETURNING producer_name;

-- name: first_entry_since
SELECT min(entry_id) FROM entries WHERE topic_id = $1 AND publish_time >= $2;

-- name: message_counts
SELECT entry_id, num_messages FROM entries WHERE topic_id = $1 AND entry_id = ANY($2::bigint[]);

-- name: create_subscription
WITH owner AS (
    SELECT 1 FROM topic_owners
    WHERE topic_id = $1 AND broker_id = $2 AND epoch = $3
    FOR SHARE
)
INSERT INTO subscriptions (topic_id, subscription, mark_delete_entry)
SELECT $1, $4, $5 WHERE EXISTS (SELECT 1 FROM owner)
ON CONFLICT (topic_id, subscription) DO NOTHING;

-- name: get_subscription
SELECT mark_delete_entry, acked_state FROM subscriptions
WHERE topic_id = $1 AND subscription = $2;

-- name: save_cursor
WITH owner AS (
    SELECT 1 FROM topic_owners
    WHERE topic_id = $1 AND broker_id = $2 AND epoch = $3
    FOR SHARE
)
UPDATE subscriptions SET mark_delete_entry = $5, acked_state = $6, updated_at = now()
WHERE topic_id = $1 AND subscription = $4 AND EXISTS (SELECT 1 FROM owner)
RETURNING 1;

-- name: delete_subscription
-- Whether this broker still held the lease (the row is deleted only then), with the
-- delayed messages it was waiting for (migration 0011).
WITH owner AS (
    SELECT 1 FROM topic_owners
    WHERE topic_id = $1 AND broker_id = $2 AND epoch = $3
    FOR SHARE
), delayed AS (
    DELETE FROM delayed_deliveries
    WHERE topic_id = $1 AND subscription = $4 AND EXISTS (SELECT 1 FROM owner)
), deleted AS (
    DELETE FROM subscriptions
    WHERE topic_id = $1 AND subscription = $4 AND EXISTS (SELECT 1 FROM owner)
)
SELECT EXISTS (SELECT 1 FROM owner);

-- ---------------------------------------------------------------- transactions
-- Every write here is one statement that takes the lease row FOR SHARE and writes only
-- while this broker holds the lease, like the plain path above: one round trip and one
-- commit per group, never a BEGIN ... COMMIT of several.

-- name: write_txn_group
-- A group holding transactional work (txnbuffer.commit_group) in one statement, so one
-- round trip and one commit: plain and marker entries, transactional (sidecar) entries,
-- dedup sequences, partition outcomes and the discarded entries of aborted transactions,
-- all written only while this broker holds the lease at its epoch (row FOR SHARE) and,
-- for an exclusive producer's group, the topic epoch is still :exclusive_epoch.  The ids of a transaction
-- both appended and discarded in one group are never both here (the caller drops the
-- appends: a statement's DELETE does not see its own INSERTs).
-- A transaction's first send here registers this partition (:topic, its full name) with
-- it in the same statement, as Kafka's KIP-890 has brokers do (the client makes no
-- AddPartitionToTxn call): only while the transaction is OPEN, its row held FOR SHARE in
-- id order, so an ending waits for this statement and then reads the registration, or
-- went first and nothing is registered (no hanging transaction); and only for the
-- owner's role or one that may act for any owner.  Its rows are numbered after the
-- batches an earlier owner of the partition buffered for it; a refused transaction's
-- rows, dedup sequences included, are not written at all.  (record_pending_acks repeats
-- these registration CTEs for a first ack; change both together.)
-- Rows come as one array per column, named after the planner's row types (EntryRow
-- entry_*, BufferedRow buffered_*, SequenceRow sequence_*, OutcomeRow outcome_*,
-- discarded TxnIDs discard_*, RegistrationRow registration_*).
-- :delays: each entry's delivery time (NULL: not delayed; a commit marker's always).
WITH owner AS (
    SELECT topic_epoch FROM topic_owners
    WHERE topic_id = :topic_id AND broker_id = :broker_id AND epoch = :epoch
    FOR SHARE
), allowed AS (
    SELECT 1 FROM owner WHERE :exclusive_epoch::bigint IS NULL OR topic_epoch = :exclusive_epoch::bigint
), reg AS (
    SELECT * FROM unnest(:registration_txn_most::bigint[], :registration_txn_least::bigint[],
                         :registration_role::text[], :registration_any_owner::bool[])
         WITH ORDINALITY AS g (most, least, role, any_owner, i)
), reg_open AS (
    SELECT t.coordinator_id, t.txn_id, t.owner FROM transactions t
    WHERE (t.coordinator_id, t.txn_id) IN (SELECT most, least FROM reg) AND t.status = {TXN_OPEN}
      AND EXISTS (SELECT 1 FROM allowed)
    ORDER BY t.coordinator_id, t.txn_id
    FOR SHARE
), reg_ok AS (
    SELECT g.most, g.least FROM reg g
    JOIN reg_open o ON o.coordinator_id = g.most AND o.txn_id = g.least
    WHERE g.any_owner OR o.owner = g.role
), registered AS (
    INSERT INTO txn_partitions (coordinator_id, txn_id, topic)
    SELECT most, least, :topic FROM reg_ok
    ON CONFLICT DO NOTHING
), refused AS (
    SELECT most, least FROM reg EXCEPT SELECT most, least FROM reg_ok
), earlier AS (
    SELECT e.txn_most AS most, e.txn_least AS least, count(*)::integer AS batches,
           sum(e.num_messages)::bigint AS messages
    FROM reg_ok r JOIN txn_entries e
      ON e.topic_id = :topic_id AND e.txn_most = r.most AND e.txn_least = r.least
    GROUP BY 1, 2
), new_entries AS (
    INSERT INTO entries (topic_id, entry_id, producer_name, sequence_id, highest_sequence_id,
                         num_messages, publish_time, payload, txn_most, txn_least, deliver_at)
    SELECT :topic_id, e.* FROM unnest(
        :entry_entry_id::bigint[], :entry_producer::text[], :entry_lowest::bigint[],
        :entry_highest::bigint[], :entry_messages::integer[], :entry_publish_time::bigint[],
        :entry_payload::bytea[], :entry_txn_most::bigint[], :entry_txn_least::bigint[],
        :delays::bigint[]) AS e
    WHERE EXISTS (SELECT 1 FROM allowed)
    RETURNING 1
), new_txn_entries AS (
    INSERT INTO txn_entries (topic_id, txn_most, txn_least, seq, producer_name, sequence_id,
                             highest_sequence_id, num_messages, payload)
    SELECT :topic_id, e.most, e.least, e.seq + coalesce(x.batches, 0), e.name, e.sequence,
           e.highest, e.messages, e.payload
    FROM unnest(:buffered_txn_most::bigint[], :buffered_txn_least::bigint[], :buffered_seq::integer[],
                :buffered_producer::text[], :buffered_lowest::bigint[], :buffered_highest::bigint[],
                :buffered_messages::integer[], :buffered_payload::bytea[])
         AS e (most, least, seq, name, sequence, highest, messages, payload)
    LEFT JOIN earlier x ON x.most = e.most AND x.least = e.least
    WHERE EXISTS (SELECT 1 FROM allowed)
      AND NOT EXISTS (SELECT 1 FROM refused r WHERE r.most = e.most AND r.least = e.least)
    RETURNING 1
), sequences AS (
    INSERT INTO producer_sequences (topic_id, producer_name, last_sequence_id)
    SELECT :topic_id, s.name, max(s.seq)
    FROM unnest(:sequence_producer::text[], :sequence_highest::bigint[],
                :sequence_txn_most::bigint[], :sequence_txn_least::bigint[])
         AS s (name, seq, most, least)
    WHERE EXISTS (SELECT 1 FROM allowed)
      AND NOT EXISTS (SELECT 1 FROM refused r WHERE r.most = s.most AND r.least = s.least)
    GROUP BY s.name
    ON CONFLICT (topic_id, producer_name) DO UPDATE
        SET last_sequence_id = greatest(producer_sequences.last_sequence_id,
                                        excluded.last_sequence_id),
            updated_at = now()
    RETURNING 1
), outcomes AS (
    INSERT INTO txn_outcomes (topic_id, subscription, txn_most, txn_least, committed)
    SELECT :topic_id, '', o.most, o.least, o.committed
    FROM unnest(:outcome_txn_most::bigint[], :outcome_txn_least::bigint[], :outcome_committed::boolean[]) AS o (most, least, committed)
    WHERE EXISTS (SELECT 1 FROM allowed)
    RETURNING 1
), discarded AS (
    DELETE FROM txn_entries d
    USING unnest(:discard_most_bits::bigint[], :discard_least_bits::bigint[]) AS x (most, least)
    WHERE d.topic_id = :topic_id AND d.txn_most = x.most AND d.txn_least = x.least
      AND EXISTS (SELECT 1 FROM allowed)
    RETURNING 1
)
SELECT (SELECT topic_epoch FROM owner) AS topic_epoch,
       (SELECT count(*) FROM owner) AS owned, (SELECT count(*) FROM allowed) AS allowed,
       -- per registration, in input order: registered, the batches and messages buffered
       -- here before, and for a refused one the coordinator's status, expired flag, owner
       ARRAY(SELECT EXISTS (SELECT 1 FROM reg_ok k WHERE k.most = g.most AND k.least = g.least)
             FROM reg g ORDER BY g.i) AS reg_ok,
       ARRAY(SELECT coalesce(x.batches, 0) FROM reg g
             LEFT JOIN earlier x ON x.most = g.most AND x.least = g.least ORDER BY g.i) AS reg_batches,
       ARRAY(SELECT coalesce(x.messages, 0) FROM reg g
             LEFT JOIN earlier x ON x.most = g.most AND x.least = g.least ORDER BY g.i) AS reg_messages,
       ARRAY(SELECT t.status FROM reg g LEFT JOIN transactions t
             ON t.coordinator_id = g.most AND t.txn_id = g.least ORDER BY g.i) AS reg_status,
       ARRAY(SELECT coalesce(t.expired, false) FROM reg g LEFT JOIN transactions t
             ON t.coordinator_id = g.most AND t.txn_id = g.least ORDER BY g.i) AS reg_expired,
       ARRAY(SELECT t.owner FROM reg g LEFT JOIN transactions t
             ON t.coordinator_id = g.most AND t.txn_id = g.least ORDER BY g.i) AS reg_owner;

-- name: txn_state
-- A transaction's buffer on one partition: (batches, messages) and its outcome if ended.
SELECT count(e.seq) AS batches, coalesce(sum(e.num_messages), 0) AS messages,
       (SELECT committed FROM txn_outcomes o
        WHERE o.topic_id = $1 AND o.subscription = $4 AND o.txn_most = $2 AND o.txn_least = $3)
       AS committed
FROM txn_entries e
WHERE e.topic_id = $1 AND e.txn_most = $2 AND e.txn_least = $3;

-- name: txn_expired
-- Whether fencing of the transaction's key aborted it (seed 000): its holder's later
-- operations get ExpiredTransactionError.
SELECT expired FROM transactions WHERE coordinator_id = $1 AND txn_id = $2;

-- name: txn_payloads
SELECT payload FROM txn_entries
WHERE topic_id = $1 AND txn_most = $2 AND txn_least = $3
ORDER BY seq;

-- name: read_entries_full
SELECT entry_id, producer_name, num_messages, publish_time, payload, txn_most, txn_least, deliver_at
FROM entries
WHERE topic_id = $1 AND entry_id >= $2 AND entry_id < $3
ORDER BY entry_id
LIMIT $4;

-- name: load_pending_acks
SELECT entry_id, batch_index, txn_most, txn_least, cumulative FROM pending_acks
WHERE topic_id = $1 AND subscription = $2;

-- name: get_outcome
SELECT committed FROM txn_outcomes
WHERE topic_id = $1 AND subscription = $2 AND txn_most = $3 AND txn_least = $4;

-- name: record_pending_acks
-- Transactional acks of a group in one statement, only while this broker holds the lease
-- at :epoch: rows.PendingAckRow (ack_*).  A transaction's first ack on this subscription
-- (:subscription of :topic) registers the subscription with it here, by
-- write_txn_group's rules (OPEN, row FOR SHARE in id order, the owner's role or one that
-- may act for any owner): rows.RegistrationRow (registration_*).  A refused transaction's acks are not written; one row
-- per registration comes back, in order: registered, its outcome here, the
-- coordinator's status, expired flag and owner.
WITH owner AS (
    SELECT 1 FROM topic_owners
    WHERE topic_id = :topic_id AND broker_id = :broker_id AND epoch = :epoch FOR SHARE
), reg AS (
    SELECT * FROM unnest(:registration_txn_most::bigint[], :registration_txn_least::bigint[],
                         :registration_role::text[], :registration_any_owner::bool[])
         WITH ORDINALITY AS g (most, least, role, any_owner, i)
), reg_open AS (
    SELECT t.coordinator_id, t.txn_id, t.owner FROM transactions t
    WHERE (t.coordinator_id, t.txn_id) IN (SELECT most, least FROM reg) AND t.status = {TXN_OPEN}
      AND EXISTS (SELECT 1 FROM owner)
    ORDER BY t.coordinator_id, t.txn_id
    FOR SHARE
), reg_ok AS (
    SELECT g.most, g.least FROM reg g
    JOIN reg_open o ON o.coordinator_id = g.most AND o.txn_id = g.least
    WHERE g.any_owner OR o.owner = g.role
), registered AS (
    INSERT INTO txn_subscriptions (coordinator_id, txn_id, topic, subscription)
    SELECT most, least, :topic, :subscription FROM reg_ok
    ON CONFLICT DO NOTHING
), refused AS (
    SELECT most, least FROM reg EXCEPT SELECT most, least FROM reg_ok
), written AS (
    INSERT INTO pending_acks (topic_id, subscription, entry_id, batch_index, txn_most,
                              txn_least, cumulative)
    SELECT :topic_id, :subscription, a.*
    FROM unnest(:ack_entry_id::bigint[], :ack_batch_index::integer[], :ack_txn_most::bigint[],
                :ack_txn_least::bigint[], :ack_cumulative::boolean[])
         AS a (entry_id, batch_index, most, least, cumulative)
    WHERE EXISTS (SELECT 1 FROM owner)
      AND NOT EXISTS (SELECT 1 FROM refused r WHERE r.most = a.most AND r.least = a.least)
    ON CONFLICT (topic_id, subscription, entry_id, batch_index) DO UPDATE
        SET txn_most = excluded.txn_most, txn_least = excluded.txn_least,
            cumulative = excluded.cumulative
    RETURNING 1
)
SELECT (SELECT count(*) FROM owner) AS owned,
       ARRAY(SELECT EXISTS (SELECT 1 FROM reg_ok k WHERE k.most = g.most AND k.least = g.least)
             FROM reg g ORDER BY g.i) AS reg_ok,
       ARRAY(SELECT (SELECT committed FROM txn_outcomes o
                     WHERE o.topic_id = :topic_id AND o.subscription = :subscription AND o.txn_most = g.most
                       AND o.txn_least = g.least)
             FROM reg g ORDER BY g.i) AS reg_outcome,
       ARRAY(SELECT t.status FROM reg g LEFT JOIN transactions t
             ON t.coordinator_id = g.most AND t.txn_id = g.least ORDER BY g.i) AS reg_status,
       ARRAY(SELECT coalesce(t.expired, false) FROM reg g LEFT JOIN transactions t
             ON t.coordinator_id = g.most AND t.txn_id = g.least ORDER BY g.i) AS reg_expired,
       ARRAY(SELECT t.owner FROM reg g LEFT JOIN transactions t
             ON t.coordinator_id = g.most AND t.txn_id = g.least ORDER BY g.i) AS reg_owner;

-- name: end_subscription_txns
-- EndTxnOnSubscription for a group in one statement, only while this broker holds the
-- lease at :epoch: the cursor (when :move_cursor, some committed: :mark_delete,
-- :acked_state), the transactions' pending acks removed and their outcomes (ended_*)
-- recorded.
WITH owner AS (
    SELECT 1 FROM topic_owners
    WHERE topic_id = :topic_id AND broker_id = :broker_id AND epoch = :epoch FOR SHARE
), cursor AS (
    UPDATE subscriptions SET mark_delete_entry = :mark_delete, acked_state = :acked_state,
                             updated_at = now()
    WHERE topic_id = :topic_id AND subscription = :subscription AND :move_cursor
      AND EXISTS (SELECT 1 FROM owner)
    RETURNING 1
), released AS (
    DELETE FROM pending_acks p
    USING unnest(:ended_txn_most::bigint[], :ended_txn_least::bigint[]) AS t (most, least)
    WHERE p.topic_id = :topic_id AND p.subscription = :subscription AND p.txn_most = t.most
      AND p.txn_least = t.least AND EXISTS (SELECT 1 FROM owner)
    RETURNING 1
), outcomes AS (
    INSERT INTO txn_outcomes (topic_id, subscription, txn_most, txn_least, committed)
    SELECT :topic_id, :subscription, o.most, o.least, o.committed
    FROM unnest(:ended_txn_most::bigint[], :ended_txn_least::bigint[], :ended_committed::boolean[])
         AS o (most, least, committed)
    WHERE EXISTS (SELECT 1 FROM owner)
    RETURNING 1
)
SELECT (SELECT count(*) FROM owner) AS owned;

-- name: commit_one_request
-- One-request transactions committed in one statement (onerequest.py; docs/transactions.md,
-- "One-request transactions"): their statuses OPEN -> COMMITTED, their sends appended to
-- the log as committed entries, their producers' sequence ids, and the cursors their acks
-- move, all or nothing.  Everything is written only if this broker still holds the hosted
-- coordinator's TCID at fence epoch $2, every lease ($5..$7: topic ids, lease epochs and,
-- for a partition an exclusive producer writes, its topic epoch) at that epoch, and every
-- transaction ($4, least bits of TCID $1, distinct) is OPEN with its key (if any) at the
-- epoch it was opened under; the transactions' rows are locked FOR UPDATE first (in id
-- order), so an abort or a registration racing this waits for it, then finds it ended.
-- Else nothing is written and the last columns say why (the caller then tries the
-- transactions one by one).  A repeated commit finds COMMITTED and writes nothing.
--   $3 broker id; $8..$15 entries (topic id, entry id, producer, sequence, highest,
--   messages, publish time, payload); $16..$18 sequences (topic id, producer, highest);
--   $19..$22 cursors (topic id, subscription, mark delete, acked state).
WITH fence AS (
    SELECT 1 FROM coordinators WHERE coordinator_id = $1 AND fence_epoch = $2 FOR SHARE
), leases AS (
    SELECT o.topic_id FROM topic_owners o
    JOIN unnest($5::bigint[], $6::bigint[], $7::bigint[]) AS l (topic_id, epoch, exclusive_epoch)
      ON o.topic_id = l.topic_id
    WHERE o.broker_id = $3 AND o.epoch = l.epoch
      AND (l.exclusive_epoch IS NULL OR o.topic_epoch = l.exclusive_epoch)
    FOR SHARE OF o
), txns AS (
    SELECT t.txn_id, t.status, t.expired, t.key_owner, t.transaction_key, t.key_epoch
    FROM transactions t
    WHERE t.coordinator_id = $1 AND t.txn_id = ANY($4::bigint[])
    ORDER BY t.txn_id
    FOR UPDATE
), keys AS (
    SELECT k.owner, k.transaction_key, k.epoch, k.deleted FROM transaction_keys k
    WHERE (k.owner, k.transaction_key) IN (SELECT key_owner, transaction_key FROM txns
                                           WHERE transaction_key IS NOT NULL)
    FOR SHARE
), verdict AS (
    SELECT t.txn_id, t.status, t.expired,
           t.transaction_key IS NULL OR EXISTS (
               SELECT 1 FROM keys k WHERE k.owner = t.key_owner AND k.transaction_key = t.transaction_key
                 AND k.epoch = t.key_epoch AND NOT k.deleted) AS key_ok
    FROM txns t
), go AS (
    SELECT (SELECT count(*) FROM fence) = 1
       AND (SELECT count(*) FROM leases) = cardinality($5::bigint[])
       AND (SELECT count(*) FROM verdict WHERE status = {TXN_OPEN} AND key_ok)
           = cardinality($4::bigint[]) AS ok
), moved AS (
    UPDATE transactions t SET status = {TXN_COMMITTED}, ended_at = now()
    WHERE t.coordinator_id = $1 AND t.txn_id = ANY($4::bigint[]) AND (SELECT ok FROM go)
    RETURNING t.txn_id, t.key_owner, t.transaction_key
), freed AS (
    UPDATE transaction_keys k
    SET active_txn_most = NULL, active_txn_least = NULL, last_active_at = now()
    FROM moved m
    WHERE k.owner = m.key_owner AND k.transaction_key = m.transaction_key
      AND k.active_txn_most = $1 AND k.active_txn_least = m.txn_id
    RETURNING 1
), appended AS (
    INSERT INTO entries (topic_id, entry_id, producer_name, sequence_id, highest_sequence_id,
                         num_messages, publish_time, payload)
    SELECT e.* FROM unnest($8::bigint[], $9::bigint[], $10::text[], $11::bigint[], $12::bigint[],
                           $13::integer[], $14::bigint[], $15::bytea[]) AS e
    WHERE (SELECT ok FROM go)
    RETURNING 1
), sequences AS (
    INSERT INTO producer_sequences (topic_id, producer_name, last_sequence_id)
    SELECT s.topic_id, s.name, s.seq FROM unnest($16::bigint[], $17::text[], $18::bigint[]) AS s (topic_id, name, seq)
    WHERE (SELECT ok FROM go)
    ON CONFLICT (topic_id, producer_name) DO UPDATE
        SET last_sequence_id = greatest(producer_sequences.last_sequence_id,
                                        excluded.last_sequence_id),
            updated_at = now()
    RETURNING 1
), cursors AS (
    UPDATE subscriptions s SET mark_delete_entry = c.mark_delete, acked_state = c.state, updated_at = now()
    FROM unnest($19::bigint[], $20::text[], $21::bigint[], $22::bytea[]) AS c (topic_id, name, mark_delete, state)
    WHERE s.topic_id = c.topic_id AND s.subscription = c.name AND (SELECT ok FROM go)
    RETURNING 1
)
SELECT (SELECT ok FROM go) AS ok, (SELECT count(*) FROM fence) = 1 AS fence_ok,
       (SELECT count(*) FROM cursors) AS cursors,
       ARRAY(SELECT topic_id FROM leases) AS leased,
       ARRAY(SELECT txn_id FROM verdict ORDER BY txn_id) AS ids,
       ARRAY(SELECT status FROM verdict ORDER BY txn_id) AS statuses,
       ARRAY(SELECT expired FROM verdict ORDER BY txn_id) AS expired,
       ARRAY(SELECT key_ok FROM verdict ORDER BY txn_id) AS key_ok;

-- name: live_coordinators
-- Discovery for clients (/v1/txn/coordinators).
SELECT coordinator_id, url FROM coordinators
WHERE heartbeat_at > now() - make_interval(secs => $1::float8) ORDER BY coordinator_id;

-- name: live_registries
-- Discovery for keyed clients (/v1/registry/lookup).
SELECT DISTINCT url FROM registries
WHERE heartbeat_at > now() - make_interval(secs => $1::float8) ORDER BY url;

-- name: auth_policies
-- What authorization needs about one topic (migration 0007): the tenant's admin roles,
-- the namespace's grants (role -> actions), the topic's grants ($3: the full name of the
-- topic or its partitioned topic) and the namespace's subscription roles.
SELECT (SELECT admin_roles FROM tenants WHERE tenant = $1) AS admin_roles,
       (SELECT coalesce(jsonb_object_agg(role, actions), '{}')::text FROM namespace_permissions
        WHERE tenant = $1 AND namespace = $2) AS namespace_grants,
       (SELECT coalesce(jsonb_object_agg(role, actions), '{}')::text FROM topic_permissions
        WHERE topic = $3) AS topic_grants,
       (SELECT coalesce(jsonb_object_agg(subscription, roles), '{}')::text FROM subscription_permissions
        WHERE tenant = $1 AND namespace = $2) AS subscription_roles;

-- ---------------------------------------------------------------- storage lifecycle
-- Retention, TTL, backlog quotas and trimming (docs/operations.md; the rules:
-- partition/trimming.py).

-- name: storage_policies
-- A topic's lifecycle policy rows (migration 0008): the namespace's (topic '') and the
-- topic's own ($3: the full name of the topic or of its partitioned topic).
SELECT topic, retention_time_minutes, retention_size_mb, message_ttl_seconds,
       backlog_limit_size, backlog_limit_time, backlog_policy, delayed_delivery_active,
       delayed_delivery_tick_ms, delayed_delivery_max_delay_ms, compaction_threshold
FROM storage_policies
WHERE tenant = $1 AND namespace = $2 AND topic IN ('', $3);

-- ---------------------------------------------------------------- compaction
-- Topic compaction (migration 0012, docs/operations.md; the rule: partition/survivors.py).
-- Every write is lease-checked like the log's: only the owner at epoch $3 writes.

-- name: compaction_state
SELECT generation, horizon, status, last_error FROM compactions WHERE topic_id = $1;

-- name: start_compaction
-- A run begins (RUNNING, its error cleared); the view stays what it was until the run
-- switches it (finish_compaction).  Answers the view it starts from.
WITH owner AS (
    SELECT 1 FROM topic_owners WHERE topic_id = $1 AND broker_id = $2 AND epoch = $3 FOR SHARE
)
INSERT INTO compactions AS c (topic_id, status, last_error, started_at)
SELECT $1, 'RUNNING', '', now() WHERE EXISTS (SELECT 1 FROM owner)
ON CONFLICT (topic_id) DO UPDATE SET status = 'RUNNING', last_error = '', started_at = now()
RETURNING c.generation, c.horizon;

-- name: drop_compacted
-- At most $5 rows of any generation but $4 (the view's): a finished run's predecessor,
-- or what a run that died left half written.
WITH owner AS (
    SELECT 1 FROM topic_owners WHERE topic_id = $1 AND broker_id = $2 AND epoch = $3 FOR SHARE
), gone AS (
    DELETE FROM compacted_entries
    WHERE (topic_id, generation, entry_id) IN (
        SELECT topic_id, generation, entry_id FROM compacted_entries
        WHERE topic_id = $1 AND generation <> $4 LIMIT $5)
      AND EXISTS (SELECT 1 FROM owner)
    RETURNING 1
)
SELECT (SELECT count(*) FROM owner) AS owned, (SELECT count(*) FROM gone) AS deleted;

-- name: write_compacted
-- One page of a run's view (generation $4): $5..$11 per entry (entry id, producer,
-- message count, publish time, kept indices as '{...}' text, payload).
WITH owner AS (
    SELECT 1 FROM topic_owners WHERE topic_id = $1 AND broker_id = $2 AND epoch = $3 FOR SHARE
), written AS (
    INSERT INTO compacted_entries (topic_id, generation, entry_id, producer_name, num_messages,
                                   publish_time, kept, payload)
    SELECT $1, $4, e.entry_id, e.producer_name, e.num_messages, e.publish_time, e.kept::integer[], e.payload
    FROM unnest($5::bigint[], $6::text[], $7::integer[], $8::bigint[], $9::text[], $10::bytea[])
         AS e (entry_id, producer_name, num_messages, publish_time, kept, payload)
    WHERE EXISTS (SELECT 1 FROM owner)
    RETURNING 1
)
SELECT (SELECT count(*) FROM owner) AS owned, (SELECT count(*) FROM written) AS written;

-- name: finish_compaction
-- The switch: readers' view becomes generation $4, horizon $5, in one statement, only
-- while the view is still generation $6 (the one the run started from).
WITH owner AS (
    SELECT 1 FROM topic_owners WHERE topic_id = $1 AND broker_id = $2 AND epoch = $3 FOR SHARE
)
UPDATE compactions SET generation = $4, horizon = $5, status = 'SUCCESS', last_error = '',
                       finished_at = now()
WHERE topic_id = $1 AND generation = $6 AND EXISTS (SELECT 1 FROM owner)
RETURNING generation;

-- name: fail_compaction
WITH owner AS (
    SELECT 1 FROM topic_owners WHERE topic_id = $1 AND broker_id = $2 AND epoch = $3 FOR SHARE
)
UPDATE compactions SET status = 'ERROR', last_error = $4, finished_at = now()
WHERE topic_id = $1 AND EXISTS (SELECT 1 FROM owner)
RETURNING 1;

-- name: read_compacted
SELECT entry_id, producer_name, num_messages, publish_time, kept, payload
FROM compacted_entries
WHERE topic_id = $1 AND generation = $2 AND entry_id >= $3 AND entry_id < $4
ORDER BY entry_id
LIMIT $5;

-- name: last_compacted
SELECT entry_id, kept FROM compacted_entries
WHERE topic_id = $1 AND generation = $2 ORDER BY entry_id DESC LIMIT 1;

-- ---------------------------------------------------------------- backlog operations and stats

-- name: get_termination
SELECT terminated_entry FROM topic_owners WHERE topic_id = $1;

-- name: terminate_topic
-- Lease-checked like every write; a second terminate keeps the first one's last entry.
UPDATE topic_owners SET terminated_entry = coalesce(terminated_entry, $4)
WHERE topic_id = $1 AND broker_id = $2 AND epoch = $3
RETURNING terminated_entry;

-- name: open_txns_with_messages
-- What a terminate waits for: transactions with buffered sends here and no outcome yet
-- (an abort deletes its rows; a commit keeps them, with its outcome row).
SELECT DISTINCT e.txn_most, e.txn_least FROM txn_entries e
WHERE e.topic_id = $1
  AND NOT EXISTS (SELECT 1 FROM txn_outcomes o
                  WHERE o.topic_id = $1 AND o.subscription = ''
                    AND o.txn_most = e.txn_most AND o.txn_least = e.txn_least);

-- name: hand_over_topic
-- Unload to a chosen broker: the lease moves from this owner (its epoch checked) to $4 in
-- one compare-and-set, so the next lookup answers the new owner at once.
UPDATE topic_owners SET broker_id = $4, epoch = epoch + 1, acquired_at = now()
WHERE topic_id = $1 AND broker_id = $2 AND epoch = $3
RETURNING epoch;

-- name: first_entry_id
SELECT min(entry_id) FROM entries WHERE topic_id = $1;

-- name: trim_floor
-- What protects entries from trimming: every durable subscription's mark-delete, the
-- lowest entry pending in a transaction's acknowledgement, and the lowest entry a
-- delayed message waits in (its subscription's cursor has passed it).
SELECT ARRAY(SELECT mark_delete_entry FROM subscriptions WHERE topic_id = $1) AS mark_deletes,
       least((SELECT min(entry_id) FROM pending_acks WHERE topic_id = $1),
             (SELECT min(entry_id) FROM delayed_deliveries WHERE topic_id = $1)) AS pending_min;

-- name: entry_metas
-- The oldest entries in [$2, $3), at most $4: id, publish time and bytes (a commit
-- marker's: its transaction's batches).
SELECT e.entry_id, e.publish_time,
       CASE WHEN e.txn_most IS NULL THEN octet_length(e.payload)
            ELSE coalesce((SELECT sum(octet_length(t.payload)) FROM txn_entries t
                           WHERE t.topic_id = $1 AND t.txn_most = e.txn_most
                             AND t.txn_least = e.txn_least), 0)::bigint END AS size
FROM entries e
WHERE e.topic_id = $1 AND e.entry_id >= $2 AND e.entry_id < $3
ORDER BY e.entry_id
LIMIT $4;

-- name: log_bytes
-- Bytes of the partition's log from entry $2 on (payloads; markers count their
-- transaction's batches): the whole log for retention by size, a backlog for quotas.
SELECT coalesce(sum(octet_length(e.payload)), 0)::bigint
       + coalesce((SELECT sum(octet_length(t.payload)) FROM txn_entries t
                   JOIN entries m ON m.topic_id = t.topic_id AND m.txn_most = t.txn_most
                                 AND m.txn_least = t.txn_least AND m.entry_id >= $2
                   WHERE t.topic_id = $1), 0)::bigint
FROM entries e WHERE e.topic_id = $1 AND e.entry_id >= $2 AND e.txn_most IS NULL;

-- name: trim_entries
-- One bounded trim batch: the entries below $4 (the caller passes a bound at most a
-- batch above the first entry) and the transaction-buffer rows of the commit markers
-- among them, only while this broker holds the lease at epoch $3 (one statement: a crash
-- leaves the batch all there or all gone).
WITH owner AS (
    SELECT 1 FROM topic_owners
    WHERE topic_id = $1 AND broker_id = $2 AND epoch = $3
    FOR SHARE
), gone AS (
    DELETE FROM entries
    WHERE topic_id = $1 AND entry_id < $4 AND EXISTS (SELECT 1 FROM owner)
    RETURNING txn_most, txn_least, octet_length(payload) AS size
), buffered AS (
    DELETE FROM txn_entries t USING gone g
    WHERE t.topic_id = $1 AND g.txn_most IS NOT NULL
      AND t.txn_most = g.txn_most AND t.txn_least = g.txn_least
    RETURNING octet_length(t.payload) AS size
)
SELECT (SELECT count(*) FROM owner) AS owned, (SELECT count(*) FROM gone) AS entries,
       (SELECT coalesce(sum(size), 0) FROM gone)::bigint
       + (SELECT coalesce(sum(size), 0) FROM buffered)::bigint AS bytes;

-- name: trim_txn_outcomes
-- How the partition and its subscriptions ended transactions (txn_outcomes), at most $4
-- rows, only while this broker holds the lease at epoch $3.  A row answers a repeated
-- EndTxnOn* exactly and refuses a late send or ack in an ended transaction; it goes
-- only when nothing can ask any more: the coordinator has forgotten the transaction
-- (purge_ended: it is final and past its retention, so no EndTxnOn* is driven again and
-- a late send or ack is refused by the registration check), and nothing of it is left
-- here (no commit marker, no buffered batch, no pending ack: all trimmed or discarded).
WITH owner AS (
    SELECT 1 FROM topic_owners
    WHERE topic_id = $1 AND broker_id = $2 AND epoch = $3
    FOR SHARE
), doomed AS (
    SELECT o.subscription, o.txn_most, o.txn_least FROM txn_outcomes o
    WHERE o.topic_id = $1 AND EXISTS (SELECT 1 FROM owner)
      AND NOT EXISTS (SELECT 1 FROM transactions t
                      WHERE t.coordinator_id = o.txn_most AND t.txn_id = o.txn_least)
      AND NOT EXISTS (SELECT 1 FROM entries e
                      WHERE e.topic_id = $1 AND e.txn_most = o.txn_most AND e.txn_least = o.txn_least)
      AND NOT EXISTS (SELECT 1 FROM txn_entries x
                      WHERE x.topic_id = $1 AND x.txn_most = o.txn_most AND x.txn_least = o.txn_least)
      AND NOT EXISTS (SELECT 1 FROM pending_acks p
                      WHERE p.topic_id = $1 AND p.subscription = o.subscription
                        AND p.txn_most = o.txn_most AND p.txn_least = o.txn_least)
    LIMIT $4
), gone AS (
    DELETE FROM txn_outcomes o USING doomed d
    WHERE o.topic_id = $1 AND o.subscription = d.subscription
      AND o.txn_most = d.txn_most AND o.txn_least = d.txn_least
    RETURNING 1
)
SELECT (SELECT count(*) FROM owner) AS owned, (SELECT count(*) FROM gone) AS deleted;

-- name: subscription_names
SELECT subscription FROM subscriptions WHERE topic_id = $1 ORDER BY subscription;

-- name: entry_sizes_from
-- (entry id, messages) from $2 on, for skip and peek (no payloads).
SELECT entry_id, num_messages FROM entries
WHERE topic_id = $1 AND entry_id >= $2 AND entry_id < $3
ORDER BY entry_id LIMIT $4;

-- name: storage_stats
-- What the metrics loop exports per owned partition: stored bytes (the log and the
-- transaction buffer's payloads a commit marker indexes) and messages.
SELECT coalesce(sum(length(payload)), 0)::bigint
         + (SELECT coalesce(sum(length(payload)), 0)::bigint FROM txn_entries
            WHERE topic_id = $1) AS bytes,
       coalesce(sum(num_messages), 0)::bigint AS messages
FROM entries WHERE topic_id = $1;

-- name: backlog_since
-- Messages and bytes after a mark-delete position (individual acks not subtracted).
SELECT coalesce(sum(num_messages), 0)::bigint AS messages,
       coalesce(sum(length(payload)), 0)::bigint AS bytes
FROM entries WHERE topic_id = $1 AND entry_id > $2;

-- name: subscription_backlogs
-- Per durable subscription: messages and bytes after its stored mark-delete position, and
-- its individual acks (the caller takes those messages off).
SELECT s.subscription, s.mark_delete_entry, s.acked_state,
       (SELECT coalesce(sum(e.num_messages), 0)::bigint FROM entries e
        WHERE e.topic_id = s.topic_id AND e.entry_id > s.mark_delete_entry) AS messages,
       (SELECT coalesce(sum(length(e.payload)), 0)::bigint FROM entries e
        WHERE e.topic_id = s.topic_id AND e.entry_id > s.mark_delete_entry) AS bytes
FROM subscriptions s WHERE s.topic_id = $1;

-- ---------------------------------------------------------------- dead-letter policies (0010)

-- name: dead_letter_policies
-- The operators' dead-letter policies of the partitions $1 (their own names and their
-- partitioned topics' names, which cover them).
SELECT topic, subscription, max_redeliver_count, dead_letter_topic, initial_subscription_name,
       retry_letter_topic
FROM dead_letter_policies WHERE topic = ANY($1::text[]);

-- ---------------------------------------------------------------- delayed delivery (0011)
-- A Shared or Key_Shared subscription's delayed messages (subscription/delayed.py): written
-- with the cursor that passes them, found again by time through the primary key.

-- name: save_cursor_with_delays
-- save_cursor plus the subscription's delayed rows in one statement, only while this
-- broker holds the lease: upserted ($7..$10: deliver_at, entry, indices, messages),
-- deleted ($11, $12: deliver_at, entry), and every row of an entry up to $13 deleted
-- (expiry, a seek: NULL for none).  The caller never names one row twice.
WITH owner AS (
    SELECT 1 FROM topic_owners
    WHERE topic_id = $1 AND broker_id = $2 AND epoch = $3
    FOR SHARE
), cursor AS (
    UPDATE subscriptions SET mark_delete_entry = $5, acked_state = $6, updated_at = now()
    WHERE topic_id = $1 AND subscription = $4 AND EXISTS (SELECT 1 FROM owner)
    RETURNING 1
), cleared AS (
    DELETE FROM delayed_deliveries
    WHERE topic_id = $1 AND subscription = $4 AND entry_id <= $13::bigint
      AND EXISTS (SELECT 1 FROM cursor)
), gone AS (
    DELETE FROM delayed_deliveries d
    USING unnest($11::bigint[], $12::bigint[]) AS x (at, entry)
    WHERE d.topic_id = $1 AND d.subscription = $4 AND d.deliver_at = x.at AND d.entry_id = x.entry
      AND EXISTS (SELECT 1 FROM cursor)
), added AS (
    INSERT INTO delayed_deliveries (topic_id, subscription, deliver_at, entry_id, indices, messages)
    SELECT $1, $4, a.at, a.entry, a.indices, a.messages
    FROM unnest($7::bigint[], $8::bigint[], $9::bytea[], $10::integer[]) AS a (at, entry, indices, messages)
    WHERE EXISTS (SELECT 1 FROM cursor)
    ON CONFLICT (topic_id, subscription, deliver_at, entry_id) DO UPDATE
        SET indices = excluded.indices, messages = excluded.messages
)
SELECT count(*) FROM cursor;

-- name: due_delays
-- The subscription's delayed rows due by $3, after the key ($4, $5) (those before were
-- loaded already), in key order, at most $6.
SELECT deliver_at, entry_id, indices, messages FROM delayed_deliveries
WHERE topic_id = $1 AND subscription = $2 AND deliver_at <= $3 AND (deliver_at, entry_id) > ($4, $5)
ORDER BY deliver_at, entry_id
LIMIT $6;

-- name: next_delay
-- The delivery time of the subscription's first delayed row after the key ($3, $4).
SELECT deliver_at FROM delayed_deliveries
WHERE topic_id = $1 AND subscription = $2 AND (deliver_at, entry_id) > ($3, $4)
ORDER BY deliver_at, entry_id
LIMIT 1;

-- name: delayed_count
-- Messages of the subscription still waiting for their time after $3 (msgDelayed).
SELECT coalesce(sum(messages), 0)::bigint FROM delayed_deliveries
WHERE topic_id = $1 AND subscription = $2 AND deliver_at > $3;

-- name: delayed_delivery_policies
-- The delayed_delivery policy rows (namespace level: topic '') of the namespaces $1 ("tenant/namespace").
SELECT tenant, namespace, topic, delayed_delivery_active, delayed_delivery_tick_ms,
       delayed_delivery_max_delay_ms
FROM storage_policies
WHERE tenant || '/' || namespace = ANY($1::text[]) AND delayed_delivery_active IS NOT NULL;

-- ---------------------------------------------------------------- schema registry (migration 0013)

-- name: schema_versions
-- Every version of a topic's schema ($1: the full name of the topic or of its partitioned
-- topic), oldest first.
SELECT version, type, data, properties::text AS properties, hash, deleted,
       (extract(epoch FROM created_at) * 1000)::bigint AS timestamp
FROM schemas WHERE topic = $1 ORDER BY version;

-- name: add_schema
-- One new version, or nothing when another broker stored that version first: the caller
-- reads the versions again and decides anew (a compare-and-set on the row's key).
INSERT INTO schemas (topic, version, type, data, properties, hash, deleted)
VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7)
ON CONFLICT (topic, version) DO NOTHING
RETURNING version;

-- name: delete_schemas
-- A forced delete: the topic's whole history.
DELETE FROM schemas WHERE topic = $1;

-- name: schema_policies
-- A namespace's schema policies (NULL: the broker's default); no row: no namespace.
SELECT schema_compatibility_strategy, is_allow_auto_update_schema, schema_validation_enforced
FROM namespaces WHERE tenant = $1 AND namespace = $2;
