-- Exactly-once into the application's own PostgreSQL (docs/exactly-once-postgres.md).
--
-- The commit decision of a Magnetar transaction is one row's status change, OPEN ->
-- COMMITTING, by compare-and-set.  `magnetar_app.commit_transaction` lets the application's
-- own SQL transaction make that change, so the application's rows, its acknowledgements
-- and its sends commit or roll back together, with no two-phase commit.  The coordinator
-- then finishes a COMMITTING transaction as its recovery always has (markers, settled
-- acks), told by `pg_notify` (delivered at the application's COMMIT), by the client
-- after it, and at the latest by its timeout loop.
--
-- The application's database role gets USAGE on the schema and EXECUTE on the
-- functions only (magnetar_app.grant_app_role); it never reads or writes Magnetar's tables.
-- The functions run as the role that ran this migration (SECURITY DEFINER), with a
-- search_path fixed to the schema holding Magnetar's tables, pg_temp last.
--
-- The schema is `magnetar_app`, not `magnetar`: Magnetar's own database role is usually
-- named `magnetar`, and PostgreSQL's default search_path ("$user", public) would then put
-- a schema of that name before `public` for every service and every later migration.

CREATE SCHEMA magnetar_app;
REVOKE ALL ON SCHEMA magnetar_app FROM PUBLIC;

-- Which Magnetar role a database role acts as.  `trusted`: the Magnetar role is a
-- superuser (MAGNETAR_AUTH_SUPERUSER_ROLES), or authentication is off (every caller is
-- `anonymous`): its commits are not checked against grants.  Otherwise the role must
-- hold `produce` on every partition its transaction sent to and `consume` on every
-- subscription it acknowledged on (a grant on the namespace or the topic, or be an
-- admin of the tenant), checked when it commits.
CREATE TABLE magnetar_app.app_roles (
    db_role        text PRIMARY KEY,
    magnetar_role  text NOT NULL,
    trusted        boolean NOT NULL DEFAULT false,
    created_at     timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON magnetar_app.app_roles FROM PUBLIC;

-- Whether `role` may do `action` ('produce' or 'consume') on the partition `partition`
-- (its full name, e.g. persistent://t/ns/orders-partition-3): Magnetar's authorization
-- rules (docs/security.md) over the grant tables of migration 0007.
CREATE FUNCTION magnetar_app.role_may(who text, act text, part text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    WITH name AS (
        SELECT regexp_replace(part, '-partition-[0-9]+$', '') AS topic,
               split_part(split_part(part, '://', 2), '/', 1) AS tenant,
               split_part(split_part(part, '://', 2), '/', 2) AS namespace
    )
    SELECT EXISTS (SELECT 1 FROM tenants t, name WHERE t.tenant = name.tenant
                   AND who = ANY (t.admin_roles))
        OR EXISTS (SELECT 1 FROM namespace_permissions p, name
                   WHERE p.tenant = name.tenant AND p.namespace = name.namespace
                     AND p.role = who AND act = ANY (p.actions))
        OR EXISTS (SELECT 1 FROM topic_permissions p, name
                   WHERE p.topic = name.topic AND p.role = who AND act = ANY (p.actions))
$$;

-- Commit Magnetar transaction (txn_most, txn_least) as part of the caller's SQL
-- transaction.  Raises, failing the caller's COMMIT, unless the transaction is OPEN,
-- before its deadline, its key (if any) still at its epoch, and the caller's mapped role
-- its owner with the grants its participants need.  SQLSTATEs: MGX01 fenced key
-- (ExpiredTransactionError), MGX02 no longer OPEN or timed out (InvalidTxnStatusError),
-- MGX03 unknown transaction (TransactionNotFound), 42501 not allowed
-- (AuthorizationError).
CREATE FUNCTION magnetar_app.commit_transaction(txn_most bigint, txn_least bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    mapped magnetar_app.app_roles;
    txn record;
    key_row record;
    denied text;
BEGIN
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
    -- clock_timestamp(), not now(): the caller's transaction may be old.
    IF txn.deadline_at <= clock_timestamp() THEN
        RAISE EXCEPTION 'transaction (%,%) timed out; it is being aborted', txn_most, txn_least
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
    UPDATE transactions SET status = {TXN_COMMITTING}
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

-- Map database role `db_role` to Magnetar role `magnetar_role` and grant it what it
-- needs: USAGE on the schema, EXECUTE on commit_transaction.  Run by the owner of
-- Magnetar's schema (the migration's role), never by the application.
CREATE FUNCTION magnetar_app.grant_app_role(db_role text, magnetar_role text,
                                        trusted boolean DEFAULT false) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO magnetar_app.app_roles (db_role, magnetar_role, trusted)
    VALUES (db_role, magnetar_role, trusted)
    ON CONFLICT ON CONSTRAINT app_roles_pkey DO UPDATE
        SET magnetar_role = excluded.magnetar_role, trusted = excluded.trusted;
    EXECUTE format('GRANT USAGE ON SCHEMA magnetar_app TO %I', db_role);
    EXECUTE format('GRANT EXECUTE ON FUNCTION magnetar_app.commit_transaction(bigint, bigint) TO %I',
                   db_role);
END;
$$;

CREATE FUNCTION magnetar_app.revoke_app_role(db_role text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM magnetar_app.app_roles a WHERE a.db_role = revoke_app_role.db_role;
    EXECUTE format('REVOKE EXECUTE ON FUNCTION magnetar_app.commit_transaction(bigint, bigint) FROM %I',
                   db_role);
    EXECUTE format('REVOKE USAGE ON SCHEMA magnetar_app FROM %I', db_role);
END;
$$;

REVOKE ALL ON FUNCTION magnetar_app.role_may(text, text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION magnetar_app.commit_transaction(bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION magnetar_app.grant_app_role(text, text, boolean) FROM PUBLIC;
REVOKE ALL ON FUNCTION magnetar_app.revoke_app_role(text) FROM PUBLIC;

-- Name Magnetar's tables through the schema they were created in, never the caller's
-- search_path (a SECURITY DEFINER function must not resolve names the caller controls).
DO $$
DECLARE
    home text := (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE c.oid = 'transactions'::regclass);
BEGIN
    EXECUTE format('ALTER FUNCTION magnetar_app.commit_transaction(bigint, bigint) SET search_path = %I, pg_temp',
                   home);
    EXECUTE format('ALTER FUNCTION magnetar_app.role_may(text, text, text) SET search_path = %I, pg_temp',
                   home);
END;
$$;
