-- Dead-letter policies set by an operator per subscription (the admin API's
-- .../subscription/{sub}/deadLetterPolicy; docs/operations.md, "Dead-letter topics"):
-- whatever client consumes the subscription (the Pulsar wheel included), the broker moves
-- a message redelivered more than max_redeliver_count times to the dead-letter topic, the
-- copy and the acknowledgement in one SQL transaction.  topic: the full name of a topic
-- or of a partitioned topic (covering its partitions).  '' = the default (Pulsar's names).
-- The admin service writes the rows; brokers read them.
CREATE TABLE dead_letter_policies (
    tenant                    text NOT NULL,
    namespace                 text NOT NULL,
    topic                     text NOT NULL,
    subscription              text NOT NULL,
    max_redeliver_count       integer NOT NULL CHECK (max_redeliver_count > 0),
    dead_letter_topic         text NOT NULL DEFAULT '',
    initial_subscription_name text NOT NULL DEFAULT '',
    retry_letter_topic        text NOT NULL DEFAULT '',
    updated_at                timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, subscription),
    FOREIGN KEY (tenant, namespace) REFERENCES namespaces (tenant, namespace) ON DELETE CASCADE
);
