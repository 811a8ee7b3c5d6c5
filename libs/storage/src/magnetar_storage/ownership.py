"""Which service owns which table, and every declared exception: a service writing a
table it does not own.  docs/architecture.md ("Table ownership") explains it in prose;
tests/unit/storage/test_ownership.py reads each service's queries.sql and fails on an
undeclared write.  Pure: no I/O here (the test reads the files).

"storage" is magnetar_storage's shared SQL (listeners.sql), which every service runs
for its own rows.
"""

from __future__ import annotations

import re

SERVICES = ("admin", "broker", "coordinator", "registry", "storage")

OWNER: dict[str, str] = {
    # Metadata: created, changed and deleted through the admin API.
    "tenants": "admin",
    "namespaces": "admin",
    "partitioned_topics": "admin",
    "topics": "admin",
    "namespace_permissions": "admin",
    "topic_permissions": "admin",
    "subscription_permissions": "admin",
    "storage_policies": "admin",
    "dead_letter_policies": "admin",
    # The partition log and its leases.
    "brokers": "broker",
    "topic_owners": "broker",
    "entries": "broker",
    "producer_sequences": "broker",
    "subscriptions": "broker",
    "txn_entries": "broker",
    "txn_outcomes": "broker",
    "pending_acks": "broker",
    "delayed_deliveries": "broker",
    "compactions": "broker",
    "compacted_entries": "broker",
    # Schemas: registered by producers and consumers on the broker (Pulsar's registry is
    # the broker's); the admin's upload and delete routes call a broker.
    "schemas": "broker",
    # Transactions.
    "coordinators": "coordinator",
    "transactions": "coordinator",
    "txn_partitions": "coordinator",
    "txn_subscriptions": "coordinator",
    # magnetar_app.app_roles (migration 0014): database role -> Magnetar role, written by
    # the database owner's magnetar_app.grant_app_role, read by the commit decisions
    # applications make (docs/exactly-once-postgres.md): the coordinator's rule.
    "app_roles": "coordinator",
    # Transaction keys.
    "registries": "registry",
    "transaction_keys": "registry",
    # Each service's own advertised addresses.
    "advertised_listeners": "storage",
}

_ADMIN_DELETES_TOPIC = ("deleting a topic (or a subscription) removes its rows in the same "
                        "transaction that fences the topic's lease first (topic_owners), so the "
                        "broker's next write fails its epoch check instead of racing the delete")

# (writer, table) -> why the writer may write a table another service owns.
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("broker", "topics"): "a lookup of a topic that does not exist creates it when the "
                          "namespace allows auto-creation (Pulsar's allowAutoTopicCreation)",
    ("broker", "txn_partitions"): "a transactional write registers its partition in the same "
                                  "statement as the data, while the transaction is OPEN, so "
                                  "no commit can miss a partition that holds its data",
    ("broker", "txn_subscriptions"): "a transactional ack registers its subscription in the same "
                                     "statement as the pending ack (as for txn_partitions)",
    ("admin", "topic_owners"): "creating a topic inserts its unowned lease row; deleting topics "
                               "or a subscription fences (moves on) the lease first",
    ("admin", "entries"): _ADMIN_DELETES_TOPIC,
    ("admin", "producer_sequences"): _ADMIN_DELETES_TOPIC,
    ("admin", "subscriptions"): _ADMIN_DELETES_TOPIC,
    ("admin", "txn_entries"): _ADMIN_DELETES_TOPIC,
    ("admin", "txn_outcomes"): _ADMIN_DELETES_TOPIC,
    ("admin", "pending_acks"): _ADMIN_DELETES_TOPIC,
    ("admin", "delayed_deliveries"): _ADMIN_DELETES_TOPIC,
    ("admin", "compactions"): _ADMIN_DELETES_TOPIC,
    ("admin", "compacted_entries"): _ADMIN_DELETES_TOPIC,
    ("broker", "transactions"): "a one-request commit (a broker hosting the transaction's "
                                "coordinator) moves its status OPEN -> COMMITTED by compare-and-set "
                                "in the statement that writes its data, with the hosted "
                                "coordinator's fence epoch checked there, so the status and the "
                                "data are one SQL transaction",
    ("broker", "transaction_keys"): "that one-request commit frees its key's active-transaction "
                                    "slot as the coordinator's end does, in the same statement",
    ("coordinator", "transaction_keys"): "a keyed transaction claims (and its end frees) the "
                                         "key's one active-transaction slot in the statement "
                                         "that creates (ends) the transaction, so two can never "
                                         "be open on one key",
}

_COMMENT = re.compile(r"--[^\n]*")
# The statement keyword and its target; FOR UPDATE / FOR NO KEY UPDATE (row locks) and
# ON CONFLICT ... DO UPDATE SET (the INSERT's own table) are not writes of another table.
_WRITE = re.compile(
    r"\b(?:(FOR|KEY|DO)\s+)?(INSERT\s+INTO|UPDATE|DELETE\s+FROM|TRUNCATE(?:\s+TABLE)?|MERGE\s+INTO)"
    r"\s+(?:ONLY\s+)?([A-Za-z_][\w.]*(?:\s*,\s*[A-Za-z_][\w.]*)*)",
    re.IGNORECASE)
_NOT_TABLES = {"set", "skip", "nowait", "of"}


def written_tables(sql: str) -> set[str]:
    """Tables the SQL text writes (INSERT/UPDATE/DELETE/TRUNCATE/MERGE, CTEs included)."""
    tables: set[str] = set()
    for match in _WRITE.finditer(_COMMENT.sub("", sql)):
        if match[1]:
            continue
        names = match[3].split(",") if match[2].upper().startswith("TRUNCATE") else [match[3].split(",")[0]]
        for name in names:
            table = name.strip().lower().rsplit(".", 1)[-1]
            if table not in _NOT_TABLES:
                tables.add(table)
    return tables


def violations(writer: str, queries: dict[str, str]) -> list[str]:
    """Each query of ``writer`` that writes a table it neither owns nor has an exception
    for, as a message naming the query, the table, its owner and the fix."""
    found = []
    for name, sql in queries.items():
        for table in sorted(written_tables(sql)):
            owner = OWNER.get(table)
            if owner == writer or (writer, table) in EXCEPTIONS:
                continue
            found.append(f"{writer} query {name!r} writes {table!r}, "
                         + (f"owned by {owner}" if owner else "which has no declared owner")
                         + ": go through the owner, or declare the exception with its reason in "
                           "magnetar_storage/ownership.py (and docs/architecture.md)")
    return found
