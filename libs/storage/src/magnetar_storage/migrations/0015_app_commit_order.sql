-- Commit order per partition for transactions an application's SQL transaction commits
-- (docs/exactly-once-postgres.md "Ordering").
--
-- A transaction's messages become visible where its commit marker is written.  Two
-- applications committing blocks that sent to the same partition must get their markers
-- in the order of their SQL COMMITs, whichever coordinator finishes which first.  So
-- commit_transaction, as the last thing before the application's COMMIT:
--
-- 1. takes a transaction-scoped advisory lock per partition it sent to, in one global
--    order (no deadlock between two such calls).  The lock is held until the COMMIT or
--    rollback: blocks sharing a partition pass this point one at a time, so their
--    commit order is the order they took the lock.  A wait is bounded by the waiting
--    transaction's deadline;
-- 2. then draws `app_commit_order` from a sequence.  Under the locks, a larger number
--    means a later COMMIT on every partition the two share; a rollback leaves a gap,
--    which nothing needs filled.
--
-- The coordinator finishing a transaction first drives the partition ends of every
-- COMMITTING predecessor (a smaller number, a shared partition): a predecessor is
-- visible by then, since its lock was released only after its COMMIT.
--
-- The advisory locks use the two-key form (a key space apart from the one-bigint locks
-- applications take); two partitions whose names hash alike merely share a lock.
--
-- REPEATABLE READ and SERIALIZABLE are refused: the function reads the sends and acks
-- Magnetar registered during the caller's transaction (to lock, to check grants), which
-- a snapshot taken at the caller's first statement cannot see.

ALTER TABLE transactions ADD COLUMN app_commit_order bigint;

-- The application commits still to finish: the few rows the predecessor query scans.
CREATE INDEX transactions_app_committing ON transactions (app_commit_order)
    WHERE status = {TXN_COMMITTING} AND app_commit_order IS NOT NULL;

CREATE SEQUENCE app_commit_order;

CREATE OR REPLACE FUNCTION magnetar_app.commit_transaction(txn_most bigint, txn_least bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    mapped magnetar_app.app_roles;
    txn record;
    key_row record;
    denied text;
    lock_key integer;
    lock_timeout_was text := current_setting('lock_timeout');
    sent boolean := false;
    commit_order bigint;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'magnetar_app.commit_transaction runs in READ COMMITTED transactions only, not %',
            upper(current_setting('transaction_isolation'))
            USING ERRCODE = 'MGX04',
                  HINT = 'A snapshot older than the transaction''s sends and acks cannot see them; begin the block''s transaction at READ COMMITTED.';
    END IF;
    SELECT * INTO mapped FROM magnetar_app.app_roles WHERE db_role = session_user;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'database role % is not mapped to a Magnetar role', session_user
            USING ERRCODE = '42501',
                  HINT = 'SELECT magnetar_app.grant_app_role(''' || session_user || ''', ''<magnetar role>'')';
    END IF;
    -- The row lock: a coordinator's abort (timeout, admin, fencing) waits for this
    -- transaction's end and then finds the row no longer OPEN.
    SELECT status, owner, deadline_at, timed_out, expired, key_owner, transaction_key, key_epoch
    INTO txn FROM transactions
    WHERE coordinator_id = txn_most AND txn_id = txn_least
    FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'transaction (%,%) does not exist', txn_most, txn_least
            USING ERRCODE = 'MGX03';
    END IF;
    IF txn.owner IS DISTINCT FROM mapped.magnetar_role AND NOT mapped.trusted THEN
        RAISE EXCEPTION 'database role % acts as Magnetar role %, which does not own transaction (%,%)',
            session_user, mapped.magnetar_role, txn_most, txn_least USING ERRCODE = '42501';
    END IF;
    IF txn.status <> {TXN_OPEN} THEN
        IF txn.expired THEN
            RAISE EXCEPTION 'transaction (%,%) was aborted because a newer connection took over its transaction key: this client was fenced',
                txn_most, txn_least USING ERRCODE = 'MGX01';
        END IF;
        RAISE EXCEPTION 'transaction (%,%) is %, not OPEN%', txn_most, txn_least,
            (ARRAY['OPEN', 'COMMITTING', 'COMMITTED', 'ABORTING', 'ABORTED'])[txn.status + 1],
            CASE WHEN txn.timed_out THEN ' (it timed out)' ELSE '' END
            USING ERRCODE = 'MGX02';
    END IF;
    IF txn.transaction_key IS NOT NULL THEN
        -- FOR SHARE: a concurrent connect's epoch bump goes first or after, never between.
        SELECT epoch, deleted INTO key_row FROM transaction_keys
        WHERE owner = txn.key_owner AND transaction_key = txn.transaction_key FOR SHARE;
        IF NOT FOUND OR key_row.deleted OR key_row.epoch <> txn.key_epoch THEN
            RAISE EXCEPTION 'transaction (%,%): a newer connection took over transaction key %: this client was fenced',
                txn_most, txn_least, txn.transaction_key USING ERRCODE = 'MGX01';
        END IF;
    END IF;
    IF NOT mapped.trusted THEN
        SELECT string_agg(what, ', ') INTO denied FROM (
            SELECT 'produce on ' || topic AS what FROM txn_partitions
            WHERE coordinator_id = txn_most AND txn_id = txn_least
              AND NOT magnetar_app.role_may(mapped.magnetar_role, 'produce', topic)
            UNION ALL
            SELECT 'consume on ' || topic || ' (subscription ' || subscription || ')'
            FROM txn_subscriptions
            WHERE coordinator_id = txn_most AND txn_id = txn_least
              AND NOT magnetar_app.role_may(mapped.magnetar_role, 'consume', topic)
        ) AS missing;
        IF denied IS NOT NULL THEN
            RAISE EXCEPTION 'Magnetar role % may not commit transaction (%,%): it lacks %',
                mapped.magnetar_role, txn_most, txn_least, denied USING ERRCODE = '42501';
        END IF;
    END IF;
    -- Commit order: the partitions' locks (waiting for earlier blocks' COMMITs), then a
    -- number.  A transaction that sent nothing has no order to keep.
    FOR lock_key IN
        SELECT DISTINCT hashtext(topic) FROM txn_partitions
        WHERE coordinator_id = txn_most AND txn_id = txn_least ORDER BY 1
    LOOP
        -- 1296521265: 'MGX1'.  Taken at once unless another block holds it; then waited
        -- for no longer than this transaction's deadline, so a block that never commits
        -- (an application idle in its transaction) holds the others up until their
        -- deadlines at worst, with an error naming why, never for ever.
        IF NOT pg_try_advisory_xact_lock(1296521265, lock_key) THEN
            PERFORM set_config('lock_timeout', greatest(1, ceil(1000 * extract(epoch FROM
                txn.deadline_at - clock_timestamp())))::bigint || 'ms', true);
            BEGIN
                PERFORM pg_advisory_xact_lock(1296521265, lock_key);
            EXCEPTION WHEN lock_not_available THEN
                RAISE EXCEPTION 'transaction (%,%) timed out waiting for its turn in the commit order of its partitions: another application''s block that sent to one of them called commit_transaction and has not committed or rolled back',
                    txn_most, txn_least USING ERRCODE = 'MGX02',
                    HINT = 'Commit right after magnetar_app.commit_transaction; idle_in_transaction_session_timeout bounds an application that does not.';
            END;
            PERFORM set_config('lock_timeout', lock_timeout_was, true);
        END IF;
        sent := true;
    END LOOP;
    IF sent THEN
        commit_order := nextval('app_commit_order');
    END IF;
    -- clock_timestamp(), not now(): the caller's transaction may be old, and the locks
    -- may have waited.
    IF txn.deadline_at <= clock_timestamp() THEN
        RAISE EXCEPTION 'transaction (%,%) timed out; it is being aborted', txn_most, txn_least
            USING ERRCODE = 'MGX02';
    END IF;
    UPDATE transactions SET status = {TXN_COMMITTING}, app_commit_order = commit_order
    WHERE coordinator_id = txn_most AND txn_id = txn_least AND status = {TXN_OPEN};
    -- Its key's one active-transaction slot is free again (as the coordinator's
    -- start_ending does).
    IF txn.transaction_key IS NOT NULL THEN
        UPDATE transaction_keys
        SET active_txn_most = NULL, active_txn_least = NULL, last_active_at = now()
        WHERE owner = txn.key_owner AND transaction_key = txn.transaction_key
          AND active_txn_most = txn_most AND active_txn_least = txn_least;
    END IF;
    -- Delivered at the caller's COMMIT (never on rollback): the coordinator finishes it.
    PERFORM pg_notify('magnetar_txn_committing', txn_most || ',' || txn_least);
END;
$$;

-- CREATE OR REPLACE kept the grants but not the pinned search_path: set it again.
DO $$
DECLARE
    home text := (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE c.oid = 'transactions'::regclass);
BEGIN
    EXECUTE format('ALTER FUNCTION magnetar_app.commit_transaction(bigint, bigint) SET search_path = %I, pg_temp',
                   home);
END;
$$;

-- The rule, once: each application commit, with every earlier one (a smaller order) still
-- COMMITTING that sent to a partition it sent to, and that partition.  The coordinator
-- drives those partition ends first (app_predecessors) and finishes in one phase only a
-- commit with none (lock_committing).
CREATE VIEW app_commit_predecessors AS
SELECT me.coordinator_id, me.txn_id,
       earlier.coordinator_id AS earlier_coordinator_id, earlier.txn_id AS earlier_txn_id,
       earlier.app_commit_order AS earlier_order, shared.topic
FROM transactions me
JOIN txn_partitions mine
  ON mine.coordinator_id = me.coordinator_id AND mine.txn_id = me.txn_id
JOIN transactions earlier
  ON earlier.status = {TXN_COMMITTING} AND earlier.app_commit_order IS NOT NULL
 AND earlier.app_commit_order < me.app_commit_order
JOIN txn_partitions shared
  ON shared.coordinator_id = earlier.coordinator_id AND shared.txn_id = earlier.txn_id
 AND shared.topic = mine.topic;
