-- Schema registry (docs/admin.md, "Schemas"; Pulsar's per-topic schemas): one row per
-- version of a topic's schema, keyed by topic first.  `topic` is the full name of the
-- topic or of the partitioned topic (its partitions share its schemas).  A deletion is a
-- version too (deleted, no definition), so a version is never reused after one; a forced
-- delete removes the rows.  `hash` finds an identical schema's version (type and
-- definition, as Pulsar's SchemaHash).  The broker writes it (producers', consumers' and
-- uploads' new versions, deletions: the admin's routes go through a broker).
CREATE TABLE schemas (
    topic       text NOT NULL,
    version     bigint NOT NULL CHECK (version >= 0),
    type        text NOT NULL,
    data        bytea NOT NULL DEFAULT '\x',
    properties  jsonb NOT NULL DEFAULT '{}',
    hash        bytea NOT NULL DEFAULT '\x',
    deleted     boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, version)
);

-- A namespace's schema policies (Pulsar's schema_compatibility_strategy,
-- is_allow_auto_update_schema, schema_validation_enforced).  NULL: the broker's default
-- (MAGNETAR_SCHEMA_COMPATIBILITY_STRATEGY, _ALLOW_AUTO_UPDATE_SCHEMA, _SCHEMA_VALIDATION_ENFORCED).
ALTER TABLE namespaces
    ADD COLUMN schema_compatibility_strategy text CHECK (schema_compatibility_strategy IN (
        'ALWAYS_COMPATIBLE', 'ALWAYS_INCOMPATIBLE', 'BACKWARD', 'FORWARD', 'FULL',
        'BACKWARD_TRANSITIVE', 'FORWARD_TRANSITIVE', 'FULL_TRANSITIVE')),
    ADD COLUMN is_allow_auto_update_schema boolean,
    ADD COLUMN schema_validation_enforced boolean;
