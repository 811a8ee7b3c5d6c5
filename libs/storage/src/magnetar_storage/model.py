"""The schema described once with SQLAlchemy Core.

Migrations are the source of truth for the database; this model exists so tooling can
reason about tables, and tests/integration/test_migrations.py proves the two agree (same
tables, columns, types, nullability, keys and indexes).
"""

from __future__ import annotations

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, TIMESTAMP

metadata = MetaData()


def _created_at() -> Column:
    return Column("created_at", TIMESTAMP(timezone=True), nullable=False, server_default=func.now())


tenants = Table(
    "tenants",
    metadata,
    Column("tenant", Text, primary_key=True),
    Column("admin_roles", ARRAY(Text), nullable=False, server_default=text("'{}'")),
    _created_at(),
)

namespaces = Table(
    "namespaces",
    metadata,
    Column("tenant", Text, nullable=False),
    Column("namespace", Text, nullable=False),
    Column("deduplication_enabled", Boolean, nullable=True),
    _created_at(),
    # schema policies (0013); NULL: the broker's default
    Column("schema_compatibility_strategy", Text, CheckConstraint(
        "schema_compatibility_strategy IN ('ALWAYS_COMPATIBLE', 'ALWAYS_INCOMPATIBLE', 'BACKWARD', 'FORWARD', "
        "'FULL', 'BACKWARD_TRANSITIVE', 'FORWARD_TRANSITIVE', 'FULL_TRANSITIVE')")),
    Column("is_allow_auto_update_schema", Boolean, nullable=True),
    Column("schema_validation_enforced", Boolean, nullable=True),
    PrimaryKeyConstraint("tenant", "namespace"),
    ForeignKeyConstraint(["tenant"], ["tenants.tenant"]),
)

partitioned_topics = Table(
    "partitioned_topics",
    metadata,
    Column("topic", Text, primary_key=True),
    Column("tenant", Text, nullable=False),
    Column("namespace", Text, nullable=False),
    Column("partitions", Integer, nullable=False),
    _created_at(),
    ForeignKeyConstraint(["tenant", "namespace"], ["namespaces.tenant", "namespaces.namespace"]),
)

topics = Table(
    "topics",
    metadata,
    Column("topic_id", BigInteger, Identity(always=True), primary_key=True),
    Column("topic", Text, nullable=False, unique=True),
    Column("tenant", Text, nullable=False),
    Column("namespace", Text, nullable=False),
    Column("partition_index", Integer, nullable=False, server_default=text("-1")),
    _created_at(),
    ForeignKeyConstraint(["tenant", "namespace"], ["namespaces.tenant", "namespaces.namespace"]),
)

brokers = Table(
    "brokers",
    metadata,
    Column("broker_id", Text, primary_key=True),
    Column("url", Text, nullable=False),
    Column("started_at", TIMESTAMP(timezone=True), nullable=False, server_default=func.now()),
    Column("heartbeat_at", TIMESTAMP(timezone=True), nullable=False, server_default=func.now()),
)

topic_owners = Table(
    "topic_owners",
    metadata,
    Column("topic_id", BigInteger, primary_key=True),
    Column("broker_id", Text, nullable=True),
    Column("epoch", BigInteger, nullable=False, server_default=text("0")),
    Column("acquired_at", TIMESTAMP(timezone=True), nullable=False, server_default=func.now()),
    Column("topic_epoch", BigInteger, nullable=False, server_default=text("0")),
    Column("terminated_entry", BigInteger, nullable=True),  # migration 0009
    ForeignKeyConstraint(["topic_id"], ["topics.topic_id"], ondelete="CASCADE"),
    Index("topic_owners_broker", "broker_id"),
)

entries = Table(
    "entries",
    metadata,
    Column("topic_id", BigInteger, nullable=False),
    Column("entry_id", BigInteger, nullable=False),
    Column("producer_name", Text, nullable=False),
    Column("sequence_id", BigInteger, nullable=False),
    Column("highest_sequence_id", BigInteger, nullable=False),
    Column("num_messages", Integer, nullable=False),
    Column("publish_time", BigInteger, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("txn_most", BigInteger, nullable=True),
    Column("txn_least", BigInteger, nullable=True),
    Column("deliver_at", BigInteger, nullable=True),  # migration 0011
    PrimaryKeyConstraint("topic_id", "entry_id"),
    Index("entries_txn_marker", "topic_id", "txn_most", "txn_least", unique=True,
          postgresql_where=text("txn_most IS NOT NULL")),
)

producer_sequences = Table(
    "producer_sequences",
    metadata,
    Column("topic_id", BigInteger, nullable=False),
    Column("producer_name", Text, nullable=False),
    Column("last_sequence_id", BigInteger, nullable=False),
    Column("updated_at", TIMESTAMP(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("topic_id", "producer_name"),
)

subscriptions = Table(
    "subscriptions",
    metadata,
    Column("topic_id", BigInteger, nullable=False),
    Column("subscription", Text, nullable=False),
    Column("mark_delete_entry", BigInteger, nullable=False),
    Column("acked_state", LargeBinary, nullable=False, server_default=text("'\\x'::bytea")),
    _created_at(),
    Column("updated_at", TIMESTAMP(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("topic_id", "subscription"),
)


# ---------------------------------------------------------------- transactions (0003)

coordinators = Table(
    "coordinators",
    metadata,
    Column("coordinator_id", Integer, primary_key=True, autoincrement=False),
    Column("instance", Text, nullable=False),
    Column("fence_epoch", BigInteger, nullable=False),
    Column("url", Text, nullable=False),
    Column("heartbeat_at", TIMESTAMP(timezone=True), nullable=False, server_default=func.now()),
    Column("next_txn_id", BigInteger, nullable=False, server_default=text("0")),
    # 0005: the adopter's own TCID while a live coordinator serves this gone one's.
    Column("adopted_by", Integer, nullable=True),
)

transactions = Table(
    "transactions",
    metadata,
    Column("coordinator_id", Integer, nullable=False),
    Column("txn_id", BigInteger, nullable=False),
    Column("status", SmallInteger, nullable=False),
    Column("timeout_ms", BigInteger, nullable=False),
    Column("opened_at", TIMESTAMP(timezone=True), nullable=False, server_default=func.now()),
    Column("deadline_at", TIMESTAMP(timezone=True), nullable=False),
    Column("ended_at", TIMESTAMP(timezone=True), nullable=True),
    Column("owner", Text, nullable=True),
    Column("timed_out", Boolean, nullable=False, server_default=text("false")),
    # 0004: the transaction key it was opened under, and whether fencing aborted it.
    Column("key_owner", Text, nullable=True),
    Column("transaction_key", Text, nullable=True),
    Column("key_epoch", BigInteger, nullable=True),
    Column("expired", Boolean, nullable=False, server_default=text("false")),
    # 0015: where an application's commit falls in the commit order of the partitions it
    # sent to (docs/exactly-once-postgres.md "Ordering"); NULL for any other transaction.
    Column("app_commit_order", BigInteger, nullable=True),
    PrimaryKeyConstraint("coordinator_id", "txn_id"),
    Index("transactions_unfinished", "coordinator_id", "status",
          postgresql_where=text("status = ANY (ARRAY[0, 1, 3])")),
    Index("transactions_by_key", "key_owner", "transaction_key",
          postgresql_where=text("transaction_key IS NOT NULL AND status = ANY (ARRAY[0, 1, 3])")),
    Index("transactions_app_committing", "app_commit_order",
          postgresql_where=text("status = 1 AND app_commit_order IS NOT NULL")),
)

txn_partitions = Table(
    "txn_partitions",
    metadata,
    Column("coordinator_id", Integer, nullable=False),
    Column("txn_id", BigInteger, nullable=False),
    Column("topic", Text, nullable=False),
    PrimaryKeyConstraint("coordinator_id", "txn_id", "topic"),
    ForeignKeyConstraint(["coordinator_id", "txn_id"],
                         ["transactions.coordinator_id", "transactions.txn_id"], ondelete="CASCADE"),
)

txn_subscriptions = Table(
    "txn_subscriptions",
    metadata,
    Column("coordinator_id", Integer, nullable=False),
    Column("txn_id", BigInteger, nullable=False),
    Column("topic", Text, nullable=False),
    Column("subscription", Text, nullable=False),
    PrimaryKeyConstraint("coordinator_id", "txn_id", "topic", "subscription"),
    ForeignKeyConstraint(["coordinator_id", "txn_id"],
                         ["transactions.coordinator_id", "transactions.txn_id"], ondelete="CASCADE"),
)

txn_entries = Table(
    "txn_entries",
    metadata,
    Column("topic_id", BigInteger, nullable=False),
    Column("txn_most", BigInteger, nullable=False),
    Column("txn_least", BigInteger, nullable=False),
    Column("seq", Integer, nullable=False),
    Column("producer_name", Text, nullable=False),
    Column("sequence_id", BigInteger, nullable=False),
    Column("highest_sequence_id", BigInteger, nullable=False),
    Column("num_messages", Integer, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    PrimaryKeyConstraint("topic_id", "txn_most", "txn_least", "seq"),
)

txn_outcomes = Table(
    "txn_outcomes",
    metadata,
    Column("topic_id", BigInteger, nullable=False),
    Column("subscription", Text, nullable=False),
    Column("txn_most", BigInteger, nullable=False),
    Column("txn_least", BigInteger, nullable=False),
    Column("committed", Boolean, nullable=False),
    Column("ended_at", TIMESTAMP(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("topic_id", "subscription", "txn_most", "txn_least"),
)

pending_acks = Table(
    "pending_acks",
    metadata,
    Column("topic_id", BigInteger, nullable=False),
    Column("subscription", Text, nullable=False),
    Column("entry_id", BigInteger, nullable=False),
    Column("batch_index", Integer, nullable=False),
    Column("txn_most", BigInteger, nullable=False),
    Column("txn_least", BigInteger, nullable=False),
    Column("cumulative", Boolean, nullable=False),
    PrimaryKeyConstraint("topic_id", "subscription", "entry_id", "batch_index"),
    Index("pending_acks_txn", "topic_id", "subscription", "txn_most", "txn_least"),
)

# ---------------------------------------------------------------- transaction keys (0004)

transaction_keys = Table(
    "transaction_keys",
    metadata,
    Column("owner", Text, nullable=False),
    Column("transaction_key", Text, nullable=False),
    Column("epoch", BigInteger, nullable=False),
    Column("coordinator_id", Integer, nullable=False),
    Column("active_txn_most", BigInteger, nullable=True),
    Column("active_txn_least", BigInteger, nullable=True),
    Column("deleted", Boolean, nullable=False, server_default=text("false")),
    Column("created_at", TIMESTAMP(timezone=True), nullable=False, server_default=func.now()),
    Column("last_active_at", TIMESTAMP(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("owner", "transaction_key"),
)

registries = Table(
    "registries",
    metadata,
    Column("instance", Text, primary_key=True),
    Column("url", Text, nullable=False),
    Column("heartbeat_at", TIMESTAMP(timezone=True), nullable=False, server_default=func.now()),
)

# ---------------------------------------------------------------- permissions (0007)


def _namespace_fk() -> ForeignKeyConstraint:
    return ForeignKeyConstraint(["tenant", "namespace"], ["namespaces.tenant", "namespaces.namespace"],
                                ondelete="CASCADE")


namespace_permissions = Table(
    "namespace_permissions",
    metadata,
    Column("tenant", Text, nullable=False),
    Column("namespace", Text, nullable=False),
    Column("role", Text, nullable=False),
    Column("actions", ARRAY(Text), nullable=False),
    _created_at(),
    PrimaryKeyConstraint("tenant", "namespace", "role"),
    _namespace_fk(),
)

topic_permissions = Table(
    "topic_permissions",
    metadata,
    Column("tenant", Text, nullable=False),
    Column("namespace", Text, nullable=False),
    Column("topic", Text, nullable=False),
    Column("role", Text, nullable=False),
    Column("actions", ARRAY(Text), nullable=False),
    _created_at(),
    PrimaryKeyConstraint("topic", "role"),
    _namespace_fk(),
)

subscription_permissions = Table(
    "subscription_permissions",
    metadata,
    Column("tenant", Text, nullable=False),
    Column("namespace", Text, nullable=False),
    Column("subscription", Text, nullable=False),
    Column("roles", ARRAY(Text), nullable=False),
    _created_at(),
    PrimaryKeyConstraint("tenant", "namespace", "subscription"),
    _namespace_fk(),
)

# ---------------------------------------------------------------- advertised listeners (0006)

advertised_listeners = Table(
    "advertised_listeners",
    metadata,
    Column("internal_url", Text, nullable=False),
    Column("listener", Text, nullable=False),
    Column("url", Text, nullable=False),
    Column("updated_at", TIMESTAMP(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("internal_url", "listener"),
)

# ---------------------------------------------------------------- storage policies (0008)

storage_policies = Table(
    "storage_policies",
    metadata,
    Column("tenant", Text, nullable=False),
    Column("namespace", Text, nullable=False),
    Column("topic", Text, nullable=False, server_default=text("''")),
    Column("retention_time_minutes", BigInteger, CheckConstraint("retention_time_minutes >= -1")),
    Column("retention_size_mb", BigInteger, CheckConstraint("retention_size_mb >= -1")),
    Column("message_ttl_seconds", BigInteger, CheckConstraint("message_ttl_seconds >= 0")),
    Column("backlog_limit_size", BigInteger, CheckConstraint("backlog_limit_size >= -1")),
    Column("backlog_limit_time", BigInteger, CheckConstraint("backlog_limit_time >= -1")),
    Column("backlog_policy", Text, CheckConstraint(
        "backlog_policy IN ('producer_request_hold', 'producer_exception', 'consumer_backlog_eviction')")),
    Column("updated_at", TIMESTAMP(timezone=True), nullable=False, server_default=func.now()),
    # migration 0011: Pulsar's delayed_delivery policy
    Column("delayed_delivery_active", Boolean),
    Column("delayed_delivery_tick_ms", BigInteger, CheckConstraint("delayed_delivery_tick_ms > 0")),
    Column("delayed_delivery_max_delay_ms", BigInteger, CheckConstraint("delayed_delivery_max_delay_ms >= 0")),
    Column("compaction_threshold", BigInteger, CheckConstraint("compaction_threshold >= 0")),  # migration 0012
    PrimaryKeyConstraint("tenant", "namespace", "topic"),
    _namespace_fk(),
    CheckConstraint("(retention_time_minutes IS NULL) = (retention_size_mb IS NULL)"),
    CheckConstraint("(backlog_policy IS NULL) = (backlog_limit_size IS NULL)"),
)

# ---------------------------------------------------------------- dead-letter policies (0010)

dead_letter_policies = Table(
    "dead_letter_policies",
    metadata,
    Column("tenant", Text, nullable=False),
    Column("namespace", Text, nullable=False),
    Column("topic", Text, nullable=False),
    Column("subscription", Text, nullable=False),
    Column("max_redeliver_count", Integer, CheckConstraint("max_redeliver_count > 0"), nullable=False),
    Column("dead_letter_topic", Text, nullable=False, server_default=text("''")),
    Column("initial_subscription_name", Text, nullable=False, server_default=text("''")),
    Column("retry_letter_topic", Text, nullable=False, server_default=text("''")),
    Column("updated_at", TIMESTAMP(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("topic", "subscription"),
    _namespace_fk(),
)


# ---------------------------------------------------------------- delayed delivery (0011)

delayed_deliveries = Table(
    "delayed_deliveries",
    metadata,
    Column("topic_id", BigInteger, nullable=False),
    Column("subscription", Text, nullable=False),
    Column("deliver_at", BigInteger, nullable=False),
    Column("entry_id", BigInteger, nullable=False),
    Column("indices", LargeBinary, nullable=False, server_default=text("'\\x'::bytea")),
    Column("messages", Integer, CheckConstraint("messages > 0"), nullable=False),
    PrimaryKeyConstraint("topic_id", "subscription", "deliver_at", "entry_id"),
    Index("delayed_deliveries_entry", "topic_id", "entry_id"),
)


# Migration 0012: topic compaction (docs/operations.md).
compactions = Table(
    "compactions",
    metadata,
    Column("topic_id", BigInteger, nullable=False, autoincrement=False),
    Column("generation", BigInteger, nullable=False, server_default=text("0")),
    Column("horizon", BigInteger, nullable=False, server_default=text("0")),
    Column("status", Text, CheckConstraint("status IN ('NOT_RUN', 'RUNNING', 'SUCCESS', 'ERROR')"),
           nullable=False, server_default=text("'NOT_RUN'")),
    Column("last_error", Text, nullable=False, server_default=text("''")),
    Column("started_at", TIMESTAMP(timezone=True), nullable=True),
    Column("finished_at", TIMESTAMP(timezone=True), nullable=True),
    PrimaryKeyConstraint("topic_id"),
)

compacted_entries = Table(
    "compacted_entries",
    metadata,
    Column("topic_id", BigInteger, nullable=False),
    Column("generation", BigInteger, nullable=False),
    Column("entry_id", BigInteger, nullable=False),
    Column("producer_name", Text, nullable=False),
    Column("num_messages", Integer, nullable=False),
    Column("publish_time", BigInteger, nullable=False),
    Column("kept", ARRAY(Integer), nullable=False),
    Column("payload", LargeBinary, nullable=False),
    PrimaryKeyConstraint("topic_id", "generation", "entry_id"),
)

# ---------------------------------------------------------------- schema registry (0013)

schemas = Table(
    "schemas",
    metadata,
    Column("topic", Text, nullable=False),
    Column("version", BigInteger, CheckConstraint("version >= 0"), nullable=False),
    Column("type", Text, nullable=False),
    Column("data", LargeBinary, nullable=False, server_default=text("'\\x'::bytea")),
    Column("properties", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("hash", LargeBinary, nullable=False, server_default=text("'\\x'::bytea")),
    Column("deleted", Boolean, nullable=False, server_default=text("false")),
    _created_at(),
    PrimaryKeyConstraint("topic", "version"),
)

# ---------------------------------------------------------------- application commits (0014)

# In schema magnetar_app, beside the functions an application's database role may execute
# (docs/exactly-once-postgres.md): which Magnetar role each database role acts as.
app_roles = Table(
    "app_roles",
    metadata,
    Column("db_role", Text, nullable=False),
    Column("magnetar_role", Text, nullable=False),
    Column("trusted", Boolean, nullable=False, server_default=text("false")),
    _created_at(),
    PrimaryKeyConstraint("db_role"),
    schema="magnetar_app",
)
