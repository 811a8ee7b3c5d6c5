-- PIP-31 transactions.
--
-- Coordinator side: one row per coordinator id (TCID) holding its fence epoch, and the
-- transaction log (status, participants).  Broker side, keyed by topic first: the
-- sidecar transaction buffer (messages written once, outside the visible log), commit
-- markers in `entries`, per-participant outcomes and pending acknowledgements.

CREATE TABLE coordinators (
    coordinator_id  integer PRIMARY KEY,
    instance        text NOT NULL,          -- the process now holding this id
    fence_epoch     bigint NOT NULL,        -- grows on every claim; every write compares it
    url             text NOT NULL,
    heartbeat_at    timestamptz NOT NULL DEFAULT now(),
    -- TxnID least bits are handed out in blocks from here: never reused, one write
    -- per block instead of one per transaction.
    next_txn_id     bigint NOT NULL DEFAULT 0
);

-- status: 0 OPEN, 1 COMMITTING, 2 COMMITTED, 3 ABORTING, 4 ABORTED (statemachine.py)
CREATE TABLE transactions (
    coordinator_id  integer NOT NULL,
    txn_id          bigint NOT NULL,        -- the TxnID's least bits
    status          smallint NOT NULL,
    timeout_ms      bigint NOT NULL,
    opened_at       timestamptz NOT NULL DEFAULT now(),
    deadline_at     timestamptz NOT NULL,
    ended_at        timestamptz,
    owner           text,
    timed_out       boolean NOT NULL DEFAULT false,
    PRIMARY KEY (coordinator_id, txn_id)
);
CREATE INDEX transactions_unfinished ON transactions (coordinator_id, status) WHERE status IN (0, 1, 3);

CREATE TABLE txn_partitions (
    coordinator_id  integer NOT NULL,
    txn_id          bigint NOT NULL,
    topic           text NOT NULL,
    PRIMARY KEY (coordinator_id, txn_id, topic),
    FOREIGN KEY (coordinator_id, txn_id) REFERENCES transactions (coordinator_id, txn_id) ON DELETE CASCADE
);

CREATE TABLE txn_subscriptions (
    coordinator_id  integer NOT NULL,
    txn_id          bigint NOT NULL,
    topic           text NOT NULL,
    subscription    text NOT NULL,
    PRIMARY KEY (coordinator_id, txn_id, topic, subscription),
    FOREIGN KEY (coordinator_id, txn_id) REFERENCES transactions (coordinator_id, txn_id) ON DELETE CASCADE
);

-- The transaction buffer: a transaction's batches on one partition, in send order.
CREATE TABLE txn_entries (
    topic_id             bigint NOT NULL,
    txn_most             bigint NOT NULL,
    txn_least            bigint NOT NULL,
    seq                  integer NOT NULL,
    producer_name        text NOT NULL,
    sequence_id          bigint NOT NULL,
    highest_sequence_id  bigint NOT NULL,
    num_messages         integer NOT NULL,
    payload              bytea NOT NULL,
    PRIMARY KEY (topic_id, txn_most, txn_least, seq)
);
ALTER TABLE txn_entries ALTER COLUMN payload SET STORAGE EXTERNAL;

-- A commit marker is an entry of the log whose messages are its transaction's batches.
ALTER TABLE entries ADD COLUMN txn_most bigint;
ALTER TABLE entries ADD COLUMN txn_least bigint;
CREATE UNIQUE INDEX entries_txn_marker ON entries (topic_id, txn_most, txn_least)
    WHERE txn_most IS NOT NULL;

-- How each participant ended each transaction (subscription '' = the partition itself),
-- so a repeated EndTxnOn* is answered exactly and the opposite one refused.
CREATE TABLE txn_outcomes (
    topic_id      bigint NOT NULL,
    subscription  text NOT NULL,
    txn_most      bigint NOT NULL,
    txn_least     bigint NOT NULL,
    committed     boolean NOT NULL,
    ended_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic_id, subscription, txn_most, txn_least)
);

-- Acknowledgements made in a transaction, final at commit, released at abort.
-- A message can be pending in one transaction only (the primary key).
CREATE TABLE pending_acks (
    topic_id      bigint NOT NULL,
    subscription  text NOT NULL,
    entry_id      bigint NOT NULL,
    batch_index   integer NOT NULL,
    txn_most      bigint NOT NULL,
    txn_least     bigint NOT NULL,
    cumulative    boolean NOT NULL,
    PRIMARY KEY (topic_id, subscription, entry_id, batch_index)
);
CREATE INDEX pending_acks_txn ON pending_acks (topic_id, subscription, txn_most, txn_least);
