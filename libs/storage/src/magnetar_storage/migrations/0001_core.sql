-- Core schema: namespaces, topics, ownership leases, the partition log, dedup state, cursors.
-- Every hot table is keyed by topic_id first, and no hot path joins across topics, so a
-- deployment can distribute by topic later (see docs/architecture.md).

CREATE TABLE tenants (
    tenant       text PRIMARY KEY,
    admin_roles  text[] NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE namespaces (
    tenant                 text NOT NULL REFERENCES tenants (tenant),
    namespace              text NOT NULL,
    -- NULL: follow the broker default (MAGNETAR_BROKER_DEDUPLICATION_ENABLED)
    deduplication_enabled  boolean,
    created_at             timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, namespace)
);

-- A partitioned topic's metadata; its partitions are rows of `topics`.
CREATE TABLE partitioned_topics (
    topic       text PRIMARY KEY,
    tenant      text NOT NULL,
    namespace   text NOT NULL,
    partitions  integer NOT NULL CHECK (partitions > 0),
    created_at  timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (tenant, namespace) REFERENCES namespaces (tenant, namespace)
);

-- The unit of ownership and of the log: a non-partitioned topic or one partition.
CREATE TABLE topics (
    topic_id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic            text NOT NULL UNIQUE,
    tenant           text NOT NULL,
    namespace        text NOT NULL,
    partition_index  integer NOT NULL DEFAULT -1,
    created_at       timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (tenant, namespace) REFERENCES namespaces (tenant, namespace)
);

-- Live brokers.  A broker's leases are valid while its heartbeat is fresh (judged by
-- the database clock, so no two clocks are compared).
CREATE TABLE brokers (
    broker_id     text PRIMARY KEY,
    url           text NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz NOT NULL DEFAULT now()
);

-- Ownership lease of one topic.  `epoch` grows on every change of owner; every write
-- for the topic compares it in the same SQL transaction (fencing by compare-and-set).
CREATE TABLE topic_owners (
    topic_id     bigint PRIMARY KEY REFERENCES topics (topic_id) ON DELETE CASCADE,
    broker_id    text,
    epoch        bigint NOT NULL DEFAULT 0,
    acquired_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX topic_owners_broker ON topic_owners (broker_id);

-- The partition log.  One row per producer batch (an "entry"), stored as the producer
-- sent it; entry ids are dense per topic.
CREATE TABLE entries (
    topic_id             bigint NOT NULL,
    entry_id             bigint NOT NULL,
    producer_name        text NOT NULL,
    sequence_id          bigint NOT NULL,
    highest_sequence_id  bigint NOT NULL,
    num_messages         integer NOT NULL,
    publish_time         bigint NOT NULL,
    payload              bytea NOT NULL,
    PRIMARY KEY (topic_id, entry_id)
);
-- Payloads are already compact protobuf; skip pglz on the write path.
ALTER TABLE entries ALTER COLUMN payload SET STORAGE EXTERNAL;

-- PIP-6 deduplication state, written in the same transaction as the entries it admits.
CREATE TABLE producer_sequences (
    topic_id          bigint NOT NULL,
    producer_name     text NOT NULL,
    last_sequence_id  bigint NOT NULL,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic_id, producer_name)
);

-- Durable cursors: everything up to mark_delete_entry is acknowledged; acked_state
-- holds the individually acknowledged messages beyond it (magnetar.v1.CursorState).
CREATE TABLE subscriptions (
    topic_id           bigint NOT NULL,
    subscription       text NOT NULL,
    mark_delete_entry  bigint NOT NULL,
    acked_state        bytea NOT NULL DEFAULT '\x',
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic_id, subscription)
);

INSERT INTO tenants (tenant) VALUES ('public');
INSERT INTO namespaces (tenant, namespace) VALUES ('public', 'default');
