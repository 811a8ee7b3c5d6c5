-- Transaction keys with epoch fencing (seed 000; docs/transaction-keys.md).
--
-- One row per (owner, key): the seed's `__transaction_key`.  Every connect with epoch -1
-- bumps `epoch` by compare-and-set on this row; a deleted key keeps its row as a
-- tombstone (`deleted`) so a later connect continues from its epoch: epochs never go
-- backwards.  `active_txn_*` is the key's one OPEN transaction, set by the coordinator's
-- NewTxn (compare-and-set: only when empty and the epoch matches) and cleared when that
-- transaction starts ending or its holder is fenced.

CREATE TABLE transaction_keys (
    owner             text NOT NULL,
    transaction_key   text NOT NULL,
    epoch             bigint NOT NULL,
    coordinator_id    integer NOT NULL,      -- bound once (by hash), then sticky
    active_txn_most   bigint,
    active_txn_least  bigint,
    deleted           boolean NOT NULL DEFAULT false,
    created_at        timestamptz NOT NULL DEFAULT now(),
    last_active_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner, transaction_key)
);

-- A keyed transaction remembers its key and the epoch it was opened under; `expired`
-- marks a transaction aborted because a newer connection fenced its key (its later
-- operations get ExpiredTransactionError rather than InvalidTxnStatusError).
ALTER TABLE transactions ADD COLUMN key_owner text;
ALTER TABLE transactions ADD COLUMN transaction_key text;
ALTER TABLE transactions ADD COLUMN key_epoch bigint;
ALTER TABLE transactions ADD COLUMN expired boolean NOT NULL DEFAULT false;
CREATE INDEX transactions_by_key ON transactions (key_owner, transaction_key)
    WHERE transaction_key IS NOT NULL AND status IN (0, 1, 3);

-- Live registry processes (stateless; clients find one through any broker).
CREATE TABLE registries (
    instance      text PRIMARY KEY,
    url           text NOT NULL,
    heartbeat_at  timestamptz NOT NULL DEFAULT now()
);
