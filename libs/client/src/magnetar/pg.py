"""Exactly-once into your own PostgreSQL: acknowledge, write your rows and send in ONE
database transaction (docs/exactly-once-postgres.md).

    async with magnetar.pg.transaction(conn, client) as tx:   # asyncpg or psycopg 3 async
        await conn.execute("UPDATE balances SET ...")
        await tx.acknowledge(msg)                            # or acknowledge_cumulative
        await tx.send("persistent://acme/app/events", b"...", partition_key="k")

    with magnetar.pg.transaction(conn, client) as tx:        # psycopg 3 + magnetar.Client
        conn.execute("UPDATE ...")
        tx.acknowledge(msg)
        tx.send("events", b"...")

The block runs in one SQL transaction on ``conn`` and one Magnetar transaction.  Acks
are pending (conflicts raise at ``acknowledge``; the messages are not redelivered
meanwhile), sends are stored outside the visible log.  On leaving the block, the
Magnetar transaction's commit decision is made INSIDE the SQL transaction
(``magnetar_app.commit_transaction``, a compare-and-set on the transaction's status
that checks its deadline, its transaction key's epoch and the database role's grants),
then the SQL transaction commits: the rows, the acks and the sends commit together or
not at all.  When the block raises, or the commit decision is refused (fenced key,
timed out, not allowed: a typed ``magnetar`` error), the SQL transaction rolls back and
the Magnetar transaction is aborted, so the messages come again.  A process that dies
anywhere before its COMMIT leaves an OPEN transaction, aborted at its timeout.

It needs Magnetar's log in the same PostgreSQL database as the rows.  It works behind
pgbouncer in transaction mode (the block is one SQL transaction; its commit statement is
never a server-side prepared statement), not in statement mode: see the docs page.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from weakref import WeakKeyDictionary

from magnetar import _sync
from magnetar import asyncio as aio
from magnetar._message import Message
from magnetar._transaction import Transaction
from magnetar._types import MessageId, TransactionState
from magnetar_protocol.errors import (
    AuthorizationError,
    BadRequest,
    ExpiredTransactionError,
    InvalidTxnStatusError,
    MagnetarError,
    TransactionNotFound,
)

__all__ = ["transaction", "AsyncPgTransaction", "PgTransaction", "commit_sql"]

log = logging.getLogger("magnetar.pg")
T = TypeVar("T")

# The one statement an application's database role may run (migration 0014).  Never a
# server-side prepared statement: behind pgbouncer in transaction mode the next block may
# run on another server connection, where a statement the driver prepared (asyncpg's
# statement cache, psycopg's prepare_threshold) does not exist.  asyncpg: the two ids as
# integer literals, sent by the simple query protocol (execute without arguments);
# psycopg: execute(prepare=False).
_COMMIT_SQL_PSYCOPG = "SELECT magnetar_app.commit_transaction(%s, %s)"


def commit_sql(most: int, least: int) -> str:
    """The commit statement for transaction (most, least) as asyncpg runs it."""
    return f"SELECT magnetar_app.commit_transaction(({int(most)})::bigint, ({int(least)})::bigint)"

# magnetar_app.commit_transaction's SQLSTATEs -> the client's errors.
_REFUSALS: dict[str, type[MagnetarError]] = {
    "MGX01": ExpiredTransactionError,
    "MGX02": InvalidTxnStatusError,
    "MGX03": TransactionNotFound,
    "MGX04": BadRequest,  # not READ COMMITTED (migration 0015)
    "42501": AuthorizationError,
}

# Producers the blocks of one client send with, by topic (one name and sequence per
# topic: deduplication as for any producer).
_producers: WeakKeyDictionary[aio.Client, dict[str, aio.Producer]] = WeakKeyDictionary()


def transaction(conn: Any, client: Any, timeout_ms: int = 60000) -> Any:
    """The exactly-once block for ``conn`` (asyncpg, psycopg 3 async or sync) and
    ``client`` (``magnetar.asyncio.Client`` for the async ones, ``magnetar.Client`` for a
    sync psycopg connection).  ``timeout_ms``: the Magnetar transaction's timeout; the
    block must reach its end within it, or its commit is refused."""
    if isinstance(client, _sync.Client):
        if _kind(conn) != "psycopg":
            raise TypeError("a magnetar.Client (sync) goes with a psycopg.Connection; use "
                            "magnetar.asyncio.Client with asyncpg or psycopg.AsyncConnection")
        return PgTransaction(conn, client, timeout_ms)
    if isinstance(client, aio.Client):
        if _kind(conn) not in ("asyncpg", "psycopg-async"):
            raise TypeError("a magnetar.asyncio.Client goes with an asyncpg connection or a "
                            "psycopg.AsyncConnection; use magnetar.Client with psycopg.Connection")
        return AsyncPgTransaction(conn, client, timeout_ms)
    raise TypeError(f"expected a magnetar.Client or magnetar.asyncio.Client, not {type(client).__name__}")


def _kind(conn: Any) -> str:
    for cls in type(conn).__mro__:  # the driver's own class, or an application's subclass
        if cls.__module__.startswith("asyncpg"):
            return "asyncpg"
        if cls.__module__.startswith("psycopg"):
            return "psycopg-async" if "Async" in cls.__name__ else "psycopg"
    raise TypeError(f"expected an asyncpg or psycopg 3 connection, not {type(conn).__name__}")


def _refusal(exc: Exception) -> MagnetarError | None:
    """The client's error for a refused commit decision (None: another database error)."""
    sqlstate = getattr(exc, "sqlstate", None)
    kind = _REFUSALS.get(sqlstate or "")
    if kind is None:
        return None
    message = getattr(getattr(exc, "diag", None), "message_primary", None) or str(exc)
    return kind(f"the application's commit was refused: {message}")


def _closed(conn: Any) -> bool:
    is_closed = getattr(conn, "is_closed", None)  # asyncpg
    return bool(is_closed()) if callable(is_closed) else bool(getattr(conn, "closed", False))


class _Core:
    """What both blocks share: the Magnetar side, on the client's event loop."""

    def __init__(self, client: aio.Client, timeout_ms: int) -> None:
        self.client = client
        self.timeout_ms = timeout_ms
        self.txn: Transaction | None = None

    async def begin(self) -> None:
        self.txn = await self.client.new_transaction(self.timeout_ms)
        # Classic from the start: each ack is pending on its broker (durable, conflicts
        # raised at acknowledge) and each send stored before the commit decision, which
        # is the application's, not a one-request commit of this client's.
        self.txn.spill()

    async def acknowledge(self, msg: Message | MessageId, consumer: aio.Consumer | None,
                          cumulative: bool) -> None:
        assert self.txn is not None
        if consumer is None:
            source = msg._info.source if isinstance(msg, Message) else None
            if source is None:
                raise TypeError("acknowledge: pass consumer= with a MessageId (a Message "
                                "knows the consumer it came from)")
            consumer = source.consumer  # type: ignore[attr-defined]  # a PartitionConsumer
        await consumer.acknowledge(msg, self.txn, cumulative=cumulative)

    async def send(self, topic: str | aio.Producer, data: bytes, properties: dict[str, str] | None,
                   partition_key: str | None, **options: Any) -> MessageId:
        assert self.txn is not None
        producer = topic if isinstance(topic, aio.Producer) else await self._producer(topic)
        return await producer.send(data, properties=properties, partition_key=partition_key,
                                   txn=self.txn, **options)

    async def _producer(self, topic: str) -> aio.Producer:
        mine = _producers.setdefault(self.client, {})
        producer = mine.get(topic)
        if producer is None:
            producer = await self.client.create_producer(topic)
            mine[topic] = mine.get(topic) or producer  # two blocks raced: keep the first
            if mine[topic] is not producer:
                await producer.close()
        return mine[topic]

    async def settle(self) -> tuple[int, int]:
        """Wait for the sends (a spoiled or timed-out transaction is aborted and raises);
        the (most, least) bits the commit decision names."""
        assert self.txn is not None
        await self.txn.settle()
        return self.txn.txn_id.most_bits, self.txn.txn_id.least_bits

    async def committed(self) -> None:
        """The SQL COMMIT took: have the coordinator finish (markers, settled acks) now
        rather than on its notification; a failure here changes nothing decided."""
        assert self.txn is not None
        try:
            await self.txn.finish_commit()
        except MagnetarError as exc:
            log.warning("transaction %s is committed; its coordinator finishes it (%s)",
                        self.txn.txn_id, exc)

    async def abort(self) -> None:
        """The SQL transaction rolled back: abort, so the acked messages come again now
        rather than at the timeout."""
        txn = self.txn
        if txn is None or txn.state not in (TransactionState.OPEN, TransactionState.ERROR):
            return
        try:
            await txn.abort()
        except MagnetarError as exc:  # ended already (fenced, timed out): nothing to undo
            log.info("aborting %s after the application's rollback: %s", txn.txn_id, exc)


class AsyncPgTransaction:
    """``async with magnetar.pg.transaction(conn, client) as tx`` (asyncpg, psycopg async)."""

    def __init__(self, conn: Any, client: aio.Client, timeout_ms: int) -> None:
        self.conn = conn
        self._kind = _kind(conn)
        self._core = _Core(client, timeout_ms)
        self._sql_txn: Any = None

    @property
    def txn(self) -> Transaction:
        """The Magnetar transaction underneath (its ``txn_id``, ``state``)."""
        assert self._core.txn is not None, "the block has not started"
        return self._core.txn

    async def acknowledge(self, msg: Message | MessageId, consumer: aio.Consumer | None = None) -> None:
        """Acknowledge ``msg`` as part of the block (TransactionConflict raises here)."""
        await self._core.acknowledge(msg, consumer, cumulative=False)

    async def acknowledge_cumulative(self, msg: Message | MessageId,
                                     consumer: aio.Consumer | None = None) -> None:
        """Acknowledge everything up to ``msg`` (Exclusive and Failover subscriptions)."""
        await self._core.acknowledge(msg, consumer, cumulative=True)

    async def send(self, topic: str | aio.Producer, data: bytes, properties: dict[str, str] | None = None,
                   partition_key: str | None = None, **options: Any) -> MessageId:
        """Send as part of the block: visible, once, if and only if the block commits."""
        return await self._core.send(topic, data, properties, partition_key, **options)

    async def __aenter__(self) -> AsyncPgTransaction:
        if self._kind == "asyncpg":
            if self.conn.is_in_transaction():
                raise InvalidTxnStatusError(
                    "magnetar.pg.transaction must own the SQL transaction: the connection is "
                    "already in one (a savepoint's commit is not the database's commit)")
            self._sql_txn = self.conn.transaction()
            await self._sql_txn.start()
        else:
            _require_idle(self.conn)
            self._sql_txn = self.conn.transaction()
            await self._sql_txn.__aenter__()
        try:
            await self._core.begin()
        except BaseException as exc:
            await self._rollback(exc)
            raise
        return self

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is not None:
            await self._rollback(exc)
            await self._core.abort()
            return
        try:
            most, least = await self._core.settle()
        except BaseException as failure:
            await self._rollback(failure)
            raise
        try:
            if self._kind == "asyncpg":
                await self.conn.execute(commit_sql(most, least))
            else:
                await self.conn.execute(_COMMIT_SQL_PSYCOPG, (most, least), prepare=False)
        except Exception as refused:
            await self._rollback(refused)
            await self._core.abort()
            if (error := _refusal(refused)) is not None:
                raise error from refused
            raise
        try:
            if self._kind == "asyncpg":
                await self._sql_txn.commit()
            else:
                await self._sql_txn.__aexit__(None, None, None)
        except Exception:
            if not _closed(self.conn):  # rolled back (e.g. a deferred constraint): undo
                await self._core.abort()
            raise  # closed: its outcome is unknown; either way rows and acks agree
        await self._core.committed()

    async def _rollback(self, exc: BaseException) -> None:
        if _closed(self.conn):
            return
        try:
            if self._kind == "asyncpg":
                await self._sql_txn.rollback()
            else:
                await self._sql_txn.__aexit__(type(exc), exc, exc.__traceback__)
        except Exception as failure:  # the connection broke: nothing committed
            log.info("rolling back the application's transaction: %s", failure)


class PgTransaction:
    """``with magnetar.pg.transaction(conn, client) as tx`` (psycopg 3 sync, magnetar.Client)."""

    def __init__(self, conn: Any, client: _sync.Client, timeout_ms: int) -> None:
        self.conn = conn
        self._io = client._io
        self._core = _Core(client._client, timeout_ms)
        self._sql_txn: Any = None

    def _run(self, make: Callable[[], Awaitable[T]]) -> T:
        async def call() -> T:
            return await make()
        return self._io.run(call())

    @property
    def txn(self) -> Transaction:
        assert self._core.txn is not None, "the block has not started"
        return self._core.txn

    def acknowledge(self, msg: Message | MessageId, consumer: _sync.Consumer | None = None) -> None:
        inner = consumer._c if consumer is not None else None
        self._run(lambda: self._core.acknowledge(msg, inner, cumulative=False))

    def acknowledge_cumulative(self, msg: Message | MessageId,
                               consumer: _sync.Consumer | None = None) -> None:
        inner = consumer._c if consumer is not None else None
        self._run(lambda: self._core.acknowledge(msg, inner, cumulative=True))

    def send(self, topic: str, data: bytes, properties: dict[str, str] | None = None,
             partition_key: str | None = None, **options: Any) -> MessageId:
        return self._run(lambda: self._core.send(topic, data, properties, partition_key, **options))

    def __enter__(self) -> PgTransaction:
        _require_idle(self.conn)
        self._sql_txn = self.conn.transaction()
        self._sql_txn.__enter__()
        try:
            self._run(self._core.begin)
        except BaseException as exc:
            self._rollback(exc)
            raise
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is not None:
            self._rollback(exc)
            self._run(self._core.abort)
            return
        try:
            most, least = self._run(self._core.settle)
        except BaseException as failure:
            self._rollback(failure)
            raise
        try:
            self.conn.execute(_COMMIT_SQL_PSYCOPG, (most, least), prepare=False)
        except Exception as refused:
            self._rollback(refused)
            self._run(self._core.abort)
            if (error := _refusal(refused)) is not None:
                raise error from refused
            raise
        try:
            self._sql_txn.__exit__(None, None, None)
        except Exception:
            if not _closed(self.conn):
                self._run(self._core.abort)
            raise
        self._run(self._core.committed)

    def _rollback(self, exc: BaseException) -> None:
        if _closed(self.conn):
            return
        try:
            self._sql_txn.__exit__(type(exc), exc, exc.__traceback__)
        except Exception as failure:
            log.info("rolling back the application's transaction: %s", failure)


def _require_idle(conn: Any) -> None:
    import psycopg  # only psycopg connections come here

    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise InvalidTxnStatusError(
            "magnetar.pg.transaction must own the SQL transaction: the connection is already "
            "in one (commit or roll it back first; a savepoint's commit is not the "
            "database's commit)")
