"""The broker's database access.  SQL text lives in queries.sql."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple

import asyncpg

from magnetar_broker.entry import Entry, EntryMeta
from magnetar_broker.rows import (
    BufferedRow,
    EntryColumns,
    EntryRow,
    GroupRows,
    OutcomeRow,
    PendingAckRow,
    RegistrationRow,
    SequenceRow,
)
from magnetar_protocol.policies import Row
from magnetar_protocol.schemainfo import Schema
from magnetar_protocol.schemaregistry import Stored
from magnetar_protocol.txnid import TxnID
from magnetar_storage.listeners import listeners_of
from magnetar_storage.queries import load_queries

Q = load_queries("magnetar_broker")


@dataclass(frozen=True, slots=True)
class Owner:
    broker_id: str | None
    epoch: int
    url: str | None
    alive: bool


# What the statements answer, by name (the callers read fields, not positions).


class Topic(NamedTuple):
    topic_id: int
    partition_index: int


class Namespace(NamedTuple):
    exists: bool
    deduplication: bool | None  # the namespace's policy; None: the broker's setting


class SchemaPolicies(NamedTuple):
    """A namespace's schema policies; None: not set there (the broker's default)."""
    strategy: str | None
    allow_auto_update: bool | None
    validation_enforced: bool | None


class TxnState(NamedTuple):
    """A transaction on a partition (or one of its subscriptions)."""
    batches: int       # batches buffered here
    messages: int      # their messages
    committed: bool | None  # its outcome here; None: not ended here


class Registration(NamedTuple):
    """The answer to a first send's registration of a partition with its transaction."""
    ok: bool
    batches: int            # batches and messages an earlier owner buffered here
    messages: int
    status: int | None      # the coordinator's status of a refused one (None: unknown)
    expired: bool
    owner: str | None       # the transaction's owner (role)


class GroupWritten(NamedTuple):
    owned: bool             # the lease was still this broker's
    allowed: bool           # the exclusive producer's topic epoch still held
    registered: list[Registration]


class AckRegistration(NamedTuple):
    """The answer to a first transactional ack's registration of a subscription."""
    ok: bool
    outcome: bool | None    # the transaction already ended here (before a restart)
    status: int | None
    expired: bool
    owner: str | None


class AcksWritten(NamedTuple):
    owned: bool
    registered: list[AckRegistration]


class OneRequestWritten(NamedTuple):
    """What ``commit_one_request`` answered: whether it wrote everything, and else why."""
    ok: bool
    fence_ok: bool                  # the hosted coordinator still holds its TCID
    leased: set[int]                # the topics whose lease (and topic epoch) held
    statuses: dict[int, tuple[int, bool, bool]]  # txn id -> (status, expired, key ok)


@dataclass(frozen=True, slots=True)
class OneRequestRows:
    """The rows of a group of one-request commits (onerequest.py), by column."""
    txn_ids: list[int]
    leases: list[tuple[int, int, int | None]]                    # topic id, lease epoch, exclusive epoch
    entries: list[tuple[int, int, str, int, int, int, int, bytes]]  # topic id, entry id, producer, ...
    sequences: list[tuple[int, str, int]]                        # topic id, producer, highest
    cursors: list[tuple[int, str, int, bytes]]                   # topic id, subscription, mark delete, state


class StoredCursor(NamedTuple):
    mark_delete: int
    acked_state: bytes      # cursorstate-encoded individual acks past mark_delete


class SubscriptionBacklog(NamedTuple):
    mark_delete: int        # stored mark-delete position
    messages: int           # messages after it
    nbytes: int             # their bytes
    acked_state: bytes      # the stored individual acks


class DeadLetterRow(NamedTuple):
    """An operator's dead-letter policy of a subscription (migration 0010)."""
    topic: str              # the topic's, or its partitioned topic's, full name
    subscription: str
    max_redeliver_count: int
    dead_letter_topic: str
    initial_subscription_name: str
    retry_letter_topic: str


def columns(rows: Sequence[Sequence[Any]], width: int) -> list[list[Any]]:
    """Rows as the per-column arrays a statement unnests (``width`` empty ones if none)."""
    return [list(c) for c in zip(*rows)] if rows else [[] for _ in range(width)]


def named_columns(prefix: str, rows: Sequence[Sequence[Any]], row_type: type) -> dict[str, list[Any]]:
    """Rows of a NamedTuple ``row_type`` as the named inputs ``<prefix><field>`` of a
    statement that unnests them, one array per field."""
    fields: tuple[str, ...] = row_type._fields  # type: ignore[attr-defined]
    return {prefix + name: column for name, column in zip(fields, columns(rows, len(fields)))}


class CompactionState(NamedTuple):
    generation: int   # the compacted view readers use (0: none)
    horizon: int      # the view holds the log below this entry id
    status: str       # NOT_RUN, RUNNING, SUCCESS, ERROR (of the last run)
    last_error: str


class CompactedRow(NamedTuple):
    """One entry of a compacted view."""
    entry_id: int
    producer_name: str
    num_messages: int
    publish_time: int
    kept: tuple[int, ...]   # its batch indices in the view
    payload: bytes


class BrokerStore:
    def __init__(self, pool: asyncpg.Pool, broker_id: str):
        self.pool = pool
        self.broker_id = broker_id

    # ---------------------------------------------------------------- authorization

    async def auth_policies(self, tenant: str, namespace: str, topic: str) -> tuple:
        """(tenant admin roles, namespace grants, topic grants, subscription roles), the
        last three as JSON objects (queries.sql ``auth_policies``)."""
        row = await self.pool.fetchrow(Q["auth_policies"], tenant, namespace, topic)
        return (row["admin_roles"] or [], row["namespace_grants"], row["topic_grants"],
                row["subscription_roles"])

    # ---------------------------------------------------------------- brokers

    async def register(self, url: str) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(Q["register_broker"], self.broker_id, url)
            # A restarted broker fences any zombie of its former self.
            await conn.execute(Q["release_all_topics"], self.broker_id)

    async def deregister(self) -> None:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(Q["release_all_topics"], self.broker_id)
            await conn.execute(Q["deregister_broker"], self.broker_id)

    async def heartbeat(self) -> bool:
        return await self.pool.fetchval(Q["heartbeat"], self.broker_id) is not None

    async def owned_topics(self) -> dict[int, int]:
        rows = await self.pool.fetch(Q["owned_topics"], self.broker_id)
        return {r["topic_id"]: r["epoch"] for r in rows}

    async def owned_topics_with_entries(self) -> list[tuple[int, str]]:
        rows = await self.pool.fetch(Q["owned_topics_with_entries"], self.broker_id)
        return [(r["topic_id"], r["topic"]) for r in rows]

    async def live_coordinators(self, ttl_s: float) -> list[tuple[int, str]]:
        return [(r[0], r[1]) for r in await self.pool.fetch(Q["live_coordinators"], ttl_s)]

    async def live_registries(self, ttl_s: float) -> list[str]:
        return [r[0] for r in await self.pool.fetch(Q["live_registries"], ttl_s)]

    async def live_brokers(self, ttl_s: float) -> list[tuple[str, str]]:
        return [(r["broker_id"], r["url"]) for r in await self.pool.fetch(Q["live_brokers"], ttl_s)]

    async def listeners_of(self, internal_urls: list[str]) -> dict[str, dict[str, str]]:
        """internal URL -> {listener: URL} (advertised listeners, migration 0006)."""
        return await listeners_of(self.pool, internal_urls)

    # ---------------------------------------------------------------- topics

    async def get_topic(self, topic: str) -> Topic | None:
        row = await self.pool.fetchrow(Q["get_topic"], topic)
        return Topic(row["topic_id"], row["partition_index"]) if row else None

    async def partitions(self, topic: str) -> int | None:
        return await self.pool.fetchval(Q["get_partitioned_topic"], topic)

    async def namespace_topics(self, tenant: str, namespace: str) -> list[str]:
        return [row["topic"] for row in await self.pool.fetch(Q["namespace_topics"], tenant, namespace)]

    async def namespace(self, tenant: str, namespace: str) -> Namespace:
        """(exists, deduplication_enabled policy or None)."""
        row = await self.pool.fetchrow(Q["get_namespace"], tenant, namespace)
        return Namespace(row is not None, row["deduplication_enabled"] if row else None)

    async def create_topic(self, topic: str, tenant: str, namespace: str, partition: int) -> int:
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(Q["insert_topic"], topic, tenant, namespace, partition)
            await conn.execute(Q["insert_topic_owner"], topic)
            return (await conn.fetchrow(Q["get_topic"], topic))["topic_id"]

    async def lookup_owner(self, topic_id: int, ttl_s: float) -> Owner | None:
        row = await self.pool.fetchrow(Q["lookup_owner"], topic_id, ttl_s)
        return Owner(row["broker_id"], row["epoch"], row["url"], row["alive"]) if row else None

    async def assign_owner(self, topic_id: int, broker_id: str, expected_epoch: int) -> int | None:
        return await self.pool.fetchval(Q["assign_owner"], topic_id, broker_id, expected_epoch)

    async def my_epoch(self, topic_id: int) -> int | None:
        return await self.pool.fetchval(Q["my_epoch"], topic_id, self.broker_id)

    async def release_topic(self, topic_id: int, epoch: int) -> None:
        await self.pool.execute(Q["release_topic"], topic_id, self.broker_id, epoch)

    async def hand_over_topic(self, topic_id: int, epoch: int, to_broker: str) -> bool:
        """Move this broker's lease to ``to_broker`` (epoch-checked); False if not held."""
        return await self.pool.fetchval(Q["hand_over_topic"], topic_id, self.broker_id, epoch,
                                        to_broker) is not None

    async def termination(self, topic_id: int) -> int | None:
        """The last entry id of a terminated topic, None when it is not terminated."""
        return await self.pool.fetchval(Q["get_termination"], topic_id)

    async def terminate(self, topic_id: int, epoch: int, last_entry: int) -> int | None:
        """Mark the topic terminated at ``last_entry`` (lease-checked); the terminated
        entry id (an earlier termination's if there was one), None if not the owner."""
        row = await self.pool.fetchrow(Q["terminate_topic"], topic_id, self.broker_id, epoch, last_entry)
        return None if row is None else row[0]

    async def open_txns_with_messages(self, topic_id: int) -> list[TxnID]:
        """The transactions with messages buffered on the partition and no outcome there."""
        return [TxnID(r[0], r[1]) for r in await self.pool.fetch(Q["open_txns_with_messages"], topic_id)]

    # ---------------------------------------------------------------- log

    async def next_entry_id(self, topic_id: int) -> int:
        return await self.pool.fetchval(Q["next_entry_id"], topic_id)

    async def last_sequence_id(self, topic_id: int, producer_name: str) -> int:
        value = await self.pool.fetchval(Q["last_sequence_id"], topic_id, producer_name)
        return -1 if value is None else value

    async def append_entries(self, topic_id: int, epoch: int, columns: EntryColumns,
                             sequences: dict[str, int], topic_epoch: int | None = None,
                             delays: list[int | None] | None = None) -> tuple[bool, bool]:
        """Write entries and dedup state (producer -> highest sequence id) in one statement;
        ``delays``: each entry's delivery time (None: no entry is delayed).

        Returns (still owner, topic epoch matched); nothing is written unless both.
        """
        row = await self.pool.fetchrow(*Q.bind("append_entries",
            topic_id=topic_id, broker_id=self.broker_id, epoch=epoch, exclusive_epoch=topic_epoch,
            **{"entry_" + name: column for name, column in columns._asdict().items()},
            sequence_producer=list(sequences), sequence_highest=list(sequences.values()), delays=delays))
        return row["owned"] == 1, row["allowed"] == 1

    async def topic_epoch(self, topic_id: int) -> int:
        return await self.pool.fetchval(Q["get_topic_epoch"], topic_id) or 0

    async def set_topic_epoch(self, topic_id: int, epoch: int, topic_epoch: int) -> bool:
        return await self.pool.fetchval(
            Q["set_topic_epoch"], topic_id, self.broker_id, epoch, topic_epoch) is not None

    async def expire_idle_producers(self, topic_id: int, epoch: int, idle_s: float,
                                    connected: list[str]) -> list[str]:
        """Forget the dedup state of producer names idle for ``idle_s`` and not in
        ``connected`` (nothing unless this broker holds the lease); the names forgotten."""
        rows = await self.pool.fetch(Q["expire_idle_producers"], topic_id, self.broker_id, epoch,
                                     float(idle_s), connected)
        return [r[0] for r in rows]

    async def read_entries(self, topic_id: int, start: int, end: int, limit: int) -> list[Entry]:
        rows = await self.pool.fetch(Q["read_entries_full"], topic_id, start, end, limit)
        out = []
        for r in rows:
            if r[5] is None:
                out.append(Entry(r[0], r[1], r[2], r[3], r[4], deliver_at=r[7] or 0))
            else:
                txn = TxnID(r[5], r[6])
                out.append(Entry(r[0], r[1], r[2], r[3], await self.txn_payload(topic_id, txn), txn))
        return out

    async def txn_payload(self, topic_id: int, txn: TxnID) -> bytes:
        rows = await self.pool.fetch(Q["txn_payloads"], topic_id, *txn)
        return b"".join(r[0] for r in rows)

    # ---------------------------------------------------------------- transactions

    async def txn_state(self, topic_id: int, txn: TxnID, subscription: str = "") -> TxnState:
        row = await self.pool.fetchrow(Q["txn_state"], topic_id, *txn, subscription)
        return TxnState(row["batches"], row["messages"], row["committed"])

    async def txn_expired(self, txn: TxnID) -> bool:
        return bool(await self.pool.fetchval(Q["txn_expired"], *txn))

    async def outcome(self, topic_id: int, subscription: str, txn: TxnID, conn=None) -> bool | None:
        return await (conn or self.pool).fetchval(Q["get_outcome"], topic_id, subscription, *txn)

    async def write_txn_group(self, topic_id: int, epoch: int, exclusive_epoch: int | None,
                              rows: GroupRows, topic: str = "", conn: Any = None) -> GroupWritten:
        """One statement for a transactional group (queries.sql ``write_txn_group``)
        writing ``rows`` (as the planner planned them):
        whether this broker still owns the lease and the exclusive producer's epoch held,
        and the answer to each registration; nothing is written unless both hold, and
        nothing of a refused registration's transaction.  The registrations
        are for ``topic``.  ``conn``: run it in that connection's transaction (a one-phase
        commit's)."""
        row = await (conn or self.pool).fetchrow(*Q.bind("write_txn_group",
            topic_id=topic_id, broker_id=self.broker_id, epoch=epoch, exclusive_epoch=exclusive_epoch,
            topic=topic, **named_columns("entry_", rows.entries, EntryRow),
            **named_columns("buffered_", rows.txn_entries, BufferedRow),
            **named_columns("sequence_", rows.sequences, SequenceRow),
            **named_columns("outcome_", rows.outcomes, OutcomeRow),
            **named_columns("discard_", rows.discards, TxnID),
            **named_columns("registration_", rows.registrations, RegistrationRow),
            delays=rows.delays))
        registered = [Registration(*r) for r in zip(row["reg_ok"], row["reg_batches"], row["reg_messages"],
                                                    row["reg_status"], row["reg_expired"], row["reg_owner"])]
        return GroupWritten(bool(row["owned"]), bool(row["allowed"]), registered)

    async def commit_one_request(self, tcid: int, fence_epoch: int, rows: OneRequestRows,
                                 conn: Any = None) -> OneRequestWritten:
        """Commit a group of one-request transactions in one statement (queries.sql
        ``commit_one_request``): all written, or nothing and why.  ``conn``: run it in that
        connection's transaction (else it is a SQL transaction of its own: one round trip
        and one commit)."""
        row = await (conn or self.pool).fetchrow(
            Q["commit_one_request"], tcid, fence_epoch, self.broker_id, rows.txn_ids,
            *columns(rows.leases, 3), *columns(rows.entries, 8), *columns(rows.sequences, 3),
            *columns(rows.cursors, 4))
        statuses = {i: (s, e, k) for i, s, e, k in zip(row["ids"], row["statuses"], row["expired"],
                                                       row["key_ok"])}
        return OneRequestWritten(bool(row["ok"]), bool(row["fence_ok"]), set(row["leased"]), statuses)

    async def record_pending_acks(self, topic_id: int, epoch: int, subscription: str,
                                  rows: list[PendingAckRow], registrations: Sequence[RegistrationRow] = (),
                                  topic: str = "") -> AcksWritten:
        """Transactional acks in one statement, with the registrations of first acks here
        on ``topic``: whether the lease held, and the answer to each registration.
        Nothing is written when the lease moved, nor for a refused transaction."""
        row = await self.pool.fetchrow(*Q.bind("record_pending_acks",
            topic_id=topic_id, broker_id=self.broker_id, epoch=epoch, subscription=subscription, topic=topic,
            **named_columns("ack_", rows, PendingAckRow),
            **named_columns("registration_", registrations, RegistrationRow)))
        registered = [AckRegistration(*r) for r in zip(row["reg_ok"], row["reg_outcome"], row["reg_status"],
                                                       row["reg_expired"], row["reg_owner"])]
        return AcksWritten(bool(row["owned"]), registered)

    async def end_subscription_txns(self, topic_id: int, epoch: int, subscription: str,
                                    cursor: tuple[int, bytes] | None,
                                    ended: list[OutcomeRow], conn=None) -> bool:
        """EndTxnOnSubscription of a group in one statement: the cursor (if given), the
        pending acks and the outcomes; False (nothing written) when the lease moved.
        ``conn``: run it in that connection's transaction (a one-phase commit's)."""
        mark_delete, state = cursor if cursor is not None else (0, b"")
        return bool(await (conn or self.pool).fetchval(*Q.bind("end_subscription_txns",
            topic_id=topic_id, broker_id=self.broker_id, epoch=epoch, subscription=subscription,
            move_cursor=cursor is not None, mark_delete=mark_delete, acked_state=state,
            **named_columns("ended_", ended, OutcomeRow))))

    async def load_pending_acks(self, topic_id: int, subscription: str) -> list[tuple]:
        return [tuple(r) for r in await self.pool.fetch(Q["load_pending_acks"], topic_id, subscription)]

    async def first_entry_since(self, topic_id: int, publish_time: int) -> int | None:
        return await self.pool.fetchval(Q["first_entry_since"], topic_id, publish_time)

    async def message_counts(self, topic_id: int, entry_ids: list[int]) -> dict[int, int]:
        """{entry id: its number of messages} of those entries that exist."""
        return dict(await self.pool.fetch(Q["message_counts"], topic_id, entry_ids))

    async def first_entry_id(self, topic_id: int) -> int | None:
        return await self.pool.fetchval(Q["first_entry_id"], topic_id)

    async def entry_sizes_from(self, topic_id: int, start: int, end: int, limit: int) -> list[tuple[int, int]]:
        rows = await self.pool.fetch(Q["entry_sizes_from"], topic_id, start, end, limit)
        return [(r[0], r[1]) for r in rows]

    async def storage_stats(self, topic_id: int) -> tuple[int, int]:
        """(stored bytes, stored messages) of a partition."""
        row = await self.pool.fetchrow(Q["storage_stats"], topic_id)
        return row["bytes"], row["messages"]

    async def backlog_since(self, topic_id: int, mark_delete: int) -> tuple[int, int]:
        """(messages, bytes) stored after ``mark_delete``."""
        row = await self.pool.fetchrow(Q["backlog_since"], topic_id, mark_delete)
        return row["messages"], row["bytes"]

    async def subscription_backlogs(self, topic_id: int) -> dict[str, SubscriptionBacklog]:
        rows = await self.pool.fetch(Q["subscription_backlogs"], topic_id)
        return {r["subscription"]: SubscriptionBacklog(r["mark_delete_entry"], r["messages"], r["bytes"],
                                                       bytes(r["acked_state"]))
                for r in rows}

    async def subscription_state(self, topic_id: int, name: str) -> StoredCursor | None:
        row = await self.pool.fetchrow(Q["get_subscription"], topic_id, name)
        return StoredCursor(row["mark_delete_entry"], bytes(row["acked_state"])) if row else None

    # ---------------------------------------------------------------- cursors

    async def open_subscription(
        self, topic_id: int, epoch: int, name: str, initial_mark_delete: int
    ) -> StoredCursor | None:
        async with self.pool.acquire() as conn:
            await conn.execute(
                Q["create_subscription"], topic_id, self.broker_id, epoch, name, initial_mark_delete
            )
            row = await conn.fetchrow(Q["get_subscription"], topic_id, name)
        return StoredCursor(row["mark_delete_entry"], bytes(row["acked_state"])) if row else None

    async def save_cursor(self, topic_id: int, epoch: int, name: str, mark_delete: int,
                          state: bytes) -> bool:
        return await self.pool.fetchval(
            Q["save_cursor"], topic_id, self.broker_id, epoch, name, mark_delete, state
        ) is not None

    async def save_cursor_for(self, conn: Any, topic_id: int, broker_id: str, epoch: int, name: str,
                              mark_delete: int, state: bytes) -> bool:
        """``save_cursor`` in ``conn``'s transaction, checked against ``broker_id``'s lease
        (a dead-letter move written by the destination's owner for the source's)."""
        return await conn.fetchval(Q["save_cursor"], topic_id, broker_id, epoch, name, mark_delete,
                                   state) is not None

    async def create_subscription_in(self, conn: Any, topic_id: int, epoch: int, name: str,
                                     mark_delete: int) -> None:
        """A durable subscription at ``mark_delete`` unless it exists (lease-checked), in
        ``conn``'s transaction."""
        await conn.execute(Q["create_subscription"], topic_id, self.broker_id, epoch, name, mark_delete)

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        """A connection in a SQL transaction of its own, for writes of several parts that
        must commit together (a dead-letter move); committed when the block ends, rolled
        back when it raises."""
        async with self.pool.acquire() as conn, conn.transaction():
            yield conn

    async def delete_subscription(self, topic_id: int, epoch: int, name: str) -> bool:
        """Delete a durable subscription's row; False when the lease has moved."""
        return await self.pool.fetchval(Q["delete_subscription"], topic_id, self.broker_id, epoch, name)

    # ---------------------------------------------------------------- delayed delivery (0011)

    async def save_cursor_with_delays(self, topic_id: int, epoch: int, name: str, mark_delete: int, state: bytes,
                                      upserts: list[tuple[int, int, bytes, int]], deletes: list[tuple[int, int]],
                                      clear_through: int | None) -> bool:
        """``save_cursor`` and the subscription's delayed rows in one statement (queries.sql
        ``save_cursor_with_delays``); False when this broker no longer holds the lease."""
        return bool(await self.pool.fetchval(
            Q["save_cursor_with_delays"], topic_id, self.broker_id, epoch, name, mark_delete, state,
            *columns(upserts, 4), *columns(deletes, 2), clear_through))

    async def due_delays(self, topic_id: int, name: str, until_ms: int, after: tuple[int, int],
                         limit: int) -> list[tuple[int, int, bytes, int]]:
        """(deliver_at, entry, indices, messages) of the rows due by ``until_ms`` after the
        key ``after``, in key order."""
        rows = await self.pool.fetch(Q["due_delays"], topic_id, name, until_ms, *after, limit)
        return [(r[0], r[1], bytes(r[2]), r[3]) for r in rows]

    async def next_delay(self, topic_id: int, name: str, after: tuple[int, int]) -> int | None:
        return await self.pool.fetchval(Q["next_delay"], topic_id, name, *after)

    async def delayed_count(self, topic_id: int, name: str, now_ms: int) -> int:
        return await self.pool.fetchval(Q["delayed_count"], topic_id, name, now_ms)

    async def delayed_delivery_policies(self, namespaces: list[str]) -> list[tuple[tuple[str, str, str], Row]]:
        """The delayed_delivery policy rows of the namespaces ("tenant/namespace"), as
        ((tenant, namespace, topic), Row)."""
        rows = await self.pool.fetch(Q["delayed_delivery_policies"], namespaces)
        return [((r[0], r[1], r[2]), Row(delayed_delivery_active=r[3], delayed_delivery_tick_ms=r[4],
                                         delayed_delivery_max_delay_ms=r[5])) for r in rows]

    async def dead_letter_policies(self, topics: list[str]) -> list[DeadLetterRow]:
        """The operators' dead-letter policies of ``topics`` (full names: partitions and
        their partitioned topics)."""
        return [DeadLetterRow(*r.values()) for r in await self.pool.fetch(Q["dead_letter_policies"], topics)]

    # ---------------------------------------------------------------- storage lifecycle

    async def storage_policies(self, tenant: str, namespace: str, topic: str) -> tuple:
        """(namespace row, topic row) of storage_policies, each a policies.Row or None."""
        rows = await self.pool.fetch(Q["storage_policies"], tenant, namespace, topic)
        found = {r["topic"]: Row(*list(r.values())[1:]) for r in rows}
        return found.get(""), found.get(topic) if topic else None

    # ---------------------------------------------------------------- compaction

    async def compaction_state(self, topic_id: int) -> CompactionState | None:
        row = await self.pool.fetchrow(Q["compaction_state"], topic_id)
        return None if row is None else CompactionState(*row)

    async def start_compaction(self, topic_id: int, epoch: int) -> tuple[int, int] | None:
        """Mark a run begun (lease-checked): the view's (generation, horizon), or None
        when this broker no longer holds the lease."""
        row = await self.pool.fetchrow(Q["start_compaction"], topic_id, self.broker_id, epoch)
        return None if row is None else (row[0], row[1])

    async def drop_compacted(self, topic_id: int, epoch: int, keep_generation: int, limit: int) -> tuple[bool, int]:
        """Delete at most ``limit`` rows of every other generation: (the lease held, rows)."""
        row = await self.pool.fetchrow(Q["drop_compacted"], topic_id, self.broker_id, epoch, keep_generation, limit)
        return bool(row["owned"]), row["deleted"]

    async def write_compacted(self, topic_id: int, epoch: int, generation: int,
                              rows: Sequence[CompactedRow]) -> bool:
        """One page of a run's view; False when this broker no longer holds the lease."""
        row = await self.pool.fetchrow(
            Q["write_compacted"], topic_id, self.broker_id, epoch, generation,
            [r.entry_id for r in rows], [r.producer_name for r in rows], [r.num_messages for r in rows],
            [r.publish_time for r in rows], ["{" + ",".join(map(str, r.kept)) + "}" for r in rows],
            [r.payload for r in rows])
        return bool(row["owned"])

    async def finish_compaction(self, topic_id: int, epoch: int, generation: int, horizon: int,
                                previous: int) -> bool:
        """Switch the view to ``generation`` (lease-checked, and only from ``previous``)."""
        return await self.pool.fetchval(Q["finish_compaction"], topic_id, self.broker_id, epoch, generation,
                                        horizon, previous) is not None

    async def fail_compaction(self, topic_id: int, epoch: int, error: str) -> bool:
        return await self.pool.fetchval(Q["fail_compaction"], topic_id, self.broker_id, epoch, error) is not None

    async def read_compacted(self, topic_id: int, generation: int, start: int, end: int,
                             limit: int) -> list[CompactedRow]:
        rows = await self.pool.fetch(Q["read_compacted"], topic_id, generation, start, end, limit)
        return [CompactedRow(r[0], r[1], r[2], r[3], tuple(r[4]), r[5]) for r in rows]

    async def last_compacted(self, topic_id: int, generation: int) -> tuple[int, tuple[int, ...]] | None:
        row = await self.pool.fetchrow(Q["last_compacted"], topic_id, generation)
        return None if row is None else (row[0], tuple(row[1]))

    async def trim_floor(self, topic_id: int) -> tuple[list[int], int | None]:
        """(every durable subscription's mark-delete, the lowest entry pending in a
        transaction's ack or None)."""
        row = await self.pool.fetchrow(Q["trim_floor"], topic_id)
        return list(row["mark_deletes"]), row["pending_min"]

    async def entry_metas(self, topic_id: int, start: int, end: int, limit: int) -> list[EntryMeta]:
        rows = await self.pool.fetch(Q["entry_metas"], topic_id, start, end, limit)
        return [EntryMeta(r[0], r[1], r[2]) for r in rows]

    async def log_bytes(self, topic_id: int, start: int = 0) -> int:
        return await self.pool.fetchval(Q["log_bytes"], topic_id, start)

    async def trim_txn_outcomes(self, topic_id: int, epoch: int, limit: int) -> tuple[bool, int]:
        """Delete at most ``limit`` txn_outcomes rows nothing can need (queries.sql says
        which); (the lease held, rows deleted)."""
        row = await self.pool.fetchrow(Q["trim_txn_outcomes"], topic_id, self.broker_id, epoch, limit)
        return bool(row["owned"]), row["deleted"]

    async def trim_entries(self, topic_id: int, epoch: int, below: int) -> tuple[bool, int, int]:
        """Delete the entries below ``below`` (and their commit markers' buffered
        batches) while this broker holds the lease: (owned, entries, bytes)."""
        row = await self.pool.fetchrow(Q["trim_entries"], topic_id, self.broker_id, epoch, below)
        return bool(row["owned"]), row["entries"], row["bytes"]

    async def subscription_names(self, topic_id: int) -> list[str]:
        return [r[0] for r in await self.pool.fetch(Q["subscription_names"], topic_id)]

    # ---------------------------------------------------------------- schema registry

    async def schema_versions(self, topic: str) -> list[Stored]:
        """Every version of ``topic``'s schema (a topic's or partitioned topic's full name),
        oldest first; a deletion has no schema."""
        return [Stored(r["version"], None if r["deleted"] else
                       Schema(r["type"], r["data"], json.loads(r["properties"])), r["hash"], r["timestamp"])
                for r in await self.pool.fetch(Q["schema_versions"], topic)]

    async def add_schema(self, topic: str, version: int, schema: Schema | None) -> bool:
        """Store ``schema`` (None: a deletion) as ``version``; False when that version was
        taken meanwhile."""
        if schema is None:
            args = ("NONE", b"", "{}", b"", True)
        else:
            args = (schema.type, schema.data, json.dumps(schema.properties), schema.hash, False)
        return await self.pool.fetchval(Q["add_schema"], topic, version, *args) is not None

    async def delete_schemas(self, topic: str) -> None:
        await self.pool.execute(Q["delete_schemas"], topic)

    async def schema_policies(self, tenant: str, namespace: str) -> SchemaPolicies | None:
        """The namespace's schema policies; None when it does not exist."""
        row = await self.pool.fetchrow(Q["schema_policies"], tenant, namespace)
        if row is None:
            return None
        return SchemaPolicies(row["schema_compatibility_strategy"], row["is_allow_auto_update_schema"],
                              row["schema_validation_enforced"])
