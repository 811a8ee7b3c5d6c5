-- Topic compaction (Pulsar's, docs/operations.md): per partition, a compacted view of
-- the log below a horizon -- the latest message of each key, tombstones applied -- kept
-- apart from the log so it outlives retention, as Pulsar's compacted ledger does.
-- Both tables are written by the partition's owning broker, each statement under the
-- lease check every write makes.

-- One row per partition that was ever compacted: the view readers use (``generation``
-- of compacted_entries, 0 = none) and its horizon (the view holds the log below this
-- entry id; the log serves the rest).  A run writes the next generation aside, then
-- switches both columns in one statement: a run that dies before that changes nothing.
CREATE TABLE compactions (
    topic_id      bigint PRIMARY KEY,
    generation    bigint NOT NULL DEFAULT 0,
    horizon       bigint NOT NULL DEFAULT 0,
    status        text NOT NULL DEFAULT 'NOT_RUN'
                  CHECK (status IN ('NOT_RUN', 'RUNNING', 'SUCCESS', 'ERROR')),
    last_error    text NOT NULL DEFAULT '',
    started_at    timestamptz,
    finished_at   timestamptz
);

-- The entries of a compacted view that keep at least one message: the original entry's
-- id, producer, publish time and message count (batch indices keep their meaning), the
-- indices kept, and its batch with the other messages emptied.
CREATE TABLE compacted_entries (
    topic_id      bigint NOT NULL,
    generation    bigint NOT NULL,
    entry_id      bigint NOT NULL,
    producer_name text NOT NULL,
    num_messages  integer NOT NULL,
    publish_time  bigint NOT NULL,
    kept          integer[] NOT NULL,
    payload       bytea NOT NULL,
    PRIMARY KEY (topic_id, generation, entry_id)
);

-- Pulsar's compactionThreshold (bytes of the log past the horizon that start a
-- compaction; 0 = off), per namespace or topic like the other storage policies.
ALTER TABLE storage_policies ADD COLUMN compaction_threshold bigint CHECK (compaction_threshold >= 0);
