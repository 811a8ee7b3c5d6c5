"""The coordinator's database access.  SQL text lives in queries.sql."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import asyncpg

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_protocol.errors import NotAllowedError, NotOwner, TransactionNotFound
from magnetar_protocol.txnid import TxnID
from magnetar_runtime.groupcommit import GroupCommit
from magnetar_storage.queries import load_queries

Q = load_queries("magnetar_coordinator")


class Fenced(NotOwner):
    """Another process claimed this coordinator id: this one must stop acting."""


@dataclass(frozen=True)
class TxnRecord:
    txn_id: int
    status: pb.TxnStatus  # an int from the table; the values are the proto's (statemachine)
    timeout_ms: int
    opened_at: datetime
    deadline_at: datetime
    ended_at: datetime | None
    owner: str | None
    timed_out: bool
    expired: bool
    transaction_key: str | None
    # Its place in the commit order of its partitions when an application's SQL
    # transaction committed it (migration 0015); None otherwise.
    app_commit_order: int | None = None


class TxnParticipants(NamedTuple):
    partitions: list[str]
    subscriptions: list[tuple[str, str]]  # (topic, subscription)


class GoneCoordinator(NamedTuple):
    tcid: int
    stale_s: float  # seconds since its last heartbeat


class Orphans(NamedTuple):
    gone: list[GoneCoordinator]  # TCIDs nobody heartbeats
    live_owners: list[int]       # live TCIDs served by their own process


class LiveCoordinator(NamedTuple):
    tcid: int
    url: str


class EndingTxn(NamedTuple):
    txn_id: int
    status: int  # COMMITTING or ABORTING (OPEN too, for expired())


# magnetar_app.commit_transaction's notification channel (migration 0014).
APP_COMMITS_CHANNEL = "magnetar_txn_committing"


class AppCommitListener:
    """A pool connection held for LISTEN; ``alive`` false once it broke (take another)."""

    def __init__(self, pool: asyncpg.Pool, conn: Any, callback: Callable[..., None]) -> None:
        self._pool, self._conn, self._callback = pool, conn, callback

    @property
    def alive(self) -> bool:
        return not self._conn.is_closed()

    async def close(self) -> None:
        try:
            if self.alive:
                await self._conn.remove_listener(APP_COMMITS_CHANNEL, self._callback)
        finally:
            await self._pool.release(self._conn)


class EndingStarted(NamedTuple):
    moved: bool   # the compare-and-set took: this call moved it out of OPEN
    key_ok: bool  # its transaction key's epoch was still current


def _by_txn(txn_ids: list[int], rows: list[Any]) -> dict[int, TxnParticipants]:
    """``txns_participants`` rows (txn id, topic, subscription or NULL for a partition),
    grouped by transaction; every id of ``txn_ids`` present."""
    found = {txn_id: TxnParticipants([], []) for txn_id in txn_ids}
    for txn_id, topic, sub in rows:
        if sub:
            found[txn_id].subscriptions.append((topic, sub))
        else:
            found[txn_id].partitions.append(topic)
    return found


class CoordinatorStore:
    def __init__(self, pool: asyncpg.Pool, coordinator_id: int, instance: str):
        self.pool = pool
        self.tcid = coordinator_id
        self.instance = instance
        self.fence_epoch = 0
        # The statements every transaction makes, shared by the transactions queued while
        # the previous one ran (one round trip and commit for the group).
        # Their items are independent (distinct inserts, reads, compare-and-sets), so two
        # groups may run at once (GroupCommit's max_in_flight).
        self._new_txns = GroupCommit(self._insert_new_txns, max_in_flight=2)
        self._transitions: GroupCommit[tuple[int, int, int], bool] = GroupCommit(
            self._apply_transitions, max_in_flight=2)
        self._participants: GroupCommit[int, TxnParticipants] = GroupCommit(
            self._read_participants, max_in_flight=2)
        self._registrations: GroupCommit[tuple[int, list[str], list[str], list[str]], int | None] = GroupCommit(
            self._register, max_in_flight=2)
        self._endings = GroupCommit(self._start_endings, max_in_flight=2)

    async def claim(self, url: str, ttl_s: float) -> bool:
        epoch = await self.pool.fetchval(Q["claim"], self.tcid, self.instance, url, ttl_s)
        if epoch is None:
            return False
        self.fence_epoch = epoch
        return True

    async def adopt(self, url: str, ttl_s: float, adopter_tcid: int) -> bool:
        """Take this (gone) TCID's row for the live coordinator ``adopter_tcid``; False
        when someone heartbeats it (its owner came back, or another adopter won)."""
        epoch = await self.pool.fetchval(Q["adopt"], self.tcid, self.instance, url, adopter_tcid,
                                         ttl_s)
        if epoch is None:
            return False
        self.fence_epoch = epoch
        return True

    async def orphans(self, ttl_s: float) -> Orphans:
        rows = await self.pool.fetch(Q["orphans"], ttl_s)
        return Orphans([GoneCoordinator(r["coordinator_id"], r["stale_s"]) for r in rows if r["stale_s"] > ttl_s],
                       [r["coordinator_id"] for r in rows if r["owner_live"]])

    async def heartbeat(self) -> bool:
        return await self.pool.fetchval(Q["heartbeat"], self.tcid, self.fence_epoch) is not None

    async def release(self) -> None:
        await self.pool.execute(Q["release"], self.tcid, self.fence_epoch)

    async def live_coordinators(self, ttl_s: float) -> list[LiveCoordinator]:
        return [LiveCoordinator(r[0], r[1]) for r in await self.pool.fetch(Q["live_coordinators"], ttl_s)]

    async def live_brokers(self, ttl_s: float) -> list[str]:
        return [r[0] for r in await self.pool.fetch(Q["live_brokers"], ttl_s)]

    def fenced(self) -> Fenced:
        return Fenced(f"coordinator {self.tcid} was claimed by another process")

    async def allocate_ids(self, count: int) -> int:
        first: int | None = await self.pool.fetchval(Q["allocate_ids"], self.tcid, self.fence_epoch, count)
        if first is None:
            raise self.fenced()
        return first

    async def new_txn(self, txn_id: int, timeout_ms: int, owner: str | None, hold_ms: int = 0) -> None:
        """An OPEN transaction whose deadline is ``timeout_ms + hold_ms`` from now."""
        await self._new_txns.submit((txn_id, timeout_ms, owner, hold_ms))

    async def _insert_new_txns(self, items: list[tuple[int, int, str | None, int]]) -> list[None]:
        ids, timeouts, owners, holds = (list(column) for column in zip(*items))
        created = await self.pool.fetch(Q["new_txns"], self.tcid, self.fence_epoch, ids, timeouts,
                                        owners, holds)
        if not created:  # not even one: this process lost its TCID
            raise self.fenced()
        return [None] * len(items)

    async def new_keyed_txn(self, txn_id: int, timeout_ms: int, owner: str, key: str,
                            epoch: int) -> None:
        """Open a keyed transaction; NotAllowedError when the epoch is stale or the key
        already has an OPEN transaction."""
        row = await self.pool.fetchrow(Q["new_keyed_txn"], self.tcid, self.fence_epoch, txn_id,
                                       timeout_ms, owner, key, epoch)
        if not row["fenced_ok"]:
            raise self.fenced()
        if row["created"]:
            return
        ident = f"{owner}&{key}"
        if row["epoch"] is None or row["deleted"]:
            raise NotAllowedError(f"transaction key {ident!r} is not connected (or was deleted): "
                                  "connect through the registry first")
        if row["epoch"] != epoch:
            raise NotAllowedError(
                f"transaction key {ident!r} is now at epoch {row['epoch']}, this client holds "
                f"epoch {epoch}: a newer connection fenced it")
        raise NotAllowedError(
            f"transaction key {ident!r} already has an open transaction "
            f"{TxnID(row['active_txn_most'], row['active_txn_least'])}: commit or abort it first")

    async def start_ending(self, txn_id: int, target: int, timed_out: bool,
                           expired: bool) -> EndingStarted:
        """OPEN -> COMMITTING/ABORTING by compare-and-set.
        Transactions without a key that arrive together share one statement; the rest
        (keyed, or not OPEN) take the one-at-a-time statement that checks the key."""
        if await self._endings.submit((txn_id, target, timed_out, expired)):
            return EndingStarted(True, True)
        row = await self.pool.fetchrow(Q["start_ending"], self.tcid, self.fence_epoch, txn_id,
                                       target, timed_out, expired)
        if not row["fenced_ok"]:
            raise self.fenced()
        return EndingStarted(bool(row["moved"]), bool(row["key_ok"]))

    async def _start_endings(self, items: list[tuple[int, int, bool, bool]]) -> list[bool]:
        # One move per transaction: of a commit and an abort of one id queued together,
        # only the first is tried here; the other finds it no longer OPEN.
        first: dict[int, int] = {}
        for i, (txn_id, *_) in enumerate(items):
            first.setdefault(txn_id, i)
        tried = [items[i] for i in first.values()]
        ids, targets, timed_out, expired = (list(column) for column in zip(*tried))
        moved = {r["txn_id"] for r in await self.pool.fetch(
            Q["start_ending_unkeyed"], self.tcid, self.fence_epoch, ids, targets, timed_out,
            expired)}
        return [first[txn_id] == i and txn_id in moved for i, (txn_id, *_) in enumerate(items)]

    async def add_participants(self, txn_id: int, topics: list[str], sub_topics: list[str],
                               subs: list[str]) -> int:
        """Register partitions and subscriptions if OPEN; return the transaction's status."""
        status = await self._registrations.submit((txn_id, topics, sub_topics, subs))
        if status is None:
            raise TransactionNotFound(f"transaction {TxnID(self.tcid, txn_id)} does not exist")
        return status

    async def _register(self, items: list[tuple[int, list[str], list[str], list[str]]]) -> list[int | None]:
        rows = [(txn_id, topic, "") for txn_id, partitions, _, _ in items for topic in partitions]
        rows += [(txn_id, topic, sub) for txn_id, _, sub_topics, subs in items
                 for topic, sub in zip(sub_topics, subs)]
        ids, topics, names = (list(column) for column in zip(*rows))
        row = await self.pool.fetchrow(Q["add_participants"], self.tcid, self.fence_epoch, ids,
                                       topics, names)
        if not row["fenced_ok"]:
            raise self.fenced()
        statuses = dict(zip(row["ids"], row["statuses"]))
        return [statuses.get(txn_id) for txn_id, *_ in items]

    async def add_partitions(self, txn_id: int, topics: list[str]) -> int:
        return await self.add_participants(txn_id, topics, [], [])

    async def transition(self, txn_id: int, current: int, target: int) -> bool:
        """Compare-and-set the status; False if it was no longer ``current``."""
        return await self._transitions.submit((txn_id, current, target))

    async def _apply_transitions(self, items: list[tuple[int, int, int]]) -> list[bool]:
        ids, currents, targets = (list(column) for column in zip(*items))
        async with self.pool.acquire() as conn:
            moved = {r[0] for r in await conn.fetch(
                Q["transitions"], self.tcid, self.fence_epoch, ids, currents, targets)}
            if not moved and not await conn.fetchval(Q["holds_fence"], self.tcid, self.fence_epoch):
                raise self.fenced()
        return [txn_id in moved for txn_id in ids]

    # ---------------------------------------------------------------- one-phase commit

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        """One SQL transaction (a one-phase commit's): committed when the block ends,
        rolled back when it raises.  Yields the connection, for the ``*_in`` methods and
        the hosting broker's writes."""
        async with self.pool.acquire() as conn, conn.transaction():
            yield conn

    async def start_endings_in(self, conn: Any, items: list[tuple[int, int, bool, bool]],
                               decided: Collection[int] = ()) -> bool:
        """OPEN -> COMMITTING/ABORTING of every (txn, target, timed out, expired) of
        ``items`` (distinct ids) in ``conn``'s transaction, so their rows stay locked
        until it ends: a registration racing it waits, then finds it no longer OPEN.
        A commit already COMMITTING (decided by an application's SQL transaction) is
        locked as it is; those of ``decided`` are known to be, so no compare-and-set
        from OPEN is tried for them.
        Those without a key in one statement, keyed ones one at a time (their key's
        epoch checked in the statement).  False unless every one moved."""
        tried = [item for item in items if item[0] not in decided]
        moved: set[int] = set()
        if tried:
            ids, targets, timed_out, expired = (list(column) for column in zip(*tried))
            moved = {r["txn_id"] for r in await conn.fetch(
                Q["start_ending_unkeyed"], self.tcid, self.fence_epoch, ids, targets, timed_out,
                expired)}
        for txn_id, target, out, exp in items:
            if txn_id in moved:
                continue
            if target == pb.TXN_COMMITTING and await conn.fetchval(
                    Q["lock_committing"], self.tcid, self.fence_epoch, txn_id) is not None:
                continue  # an application committed it: finished here like the rest
            if txn_id in decided:
                return False  # finished already (or not in one phase): planned from its record
            row = await conn.fetchrow(Q["start_ending"], self.tcid, self.fence_epoch, txn_id,
                                      target, out, exp)
            if not row["fenced_ok"]:
                raise self.fenced()
            if not (row["moved"] and row["key_ok"]):
                return False
        return True

    async def participants_in(self, conn: Any, txn_ids: list[int]) -> dict[int, TxnParticipants]:
        """Each transaction's participants as ``conn``'s transaction sees them (after its
        row locks)."""
        return _by_txn(txn_ids, await conn.fetch(Q["txns_participants"], self.tcid, txn_ids))

    async def transitions_in(self, conn: Any, txn_ids: list[int], current: Sequence[int],
                             target: Sequence[int]) -> None:
        moved = await conn.fetch(Q["transitions"], self.tcid, self.fence_epoch, txn_ids,
                                 current, target)
        if len(moved) != len(txn_ids):  # rows locked by this transaction: only a lost fence
            raise self.fenced()

    async def get(self, txn_id: int) -> TxnRecord | None:
        row = await self.pool.fetchrow(Q["get_txn"], self.tcid, txn_id)
        return TxnRecord(txn_id, *row) if row else None

    async def participants(self, txn_id: int) -> TxnParticipants:
        """The partitions and subscriptions registered for the transaction."""
        return await self._participants.submit(txn_id)

    async def _read_participants(self, txn_ids: list[int]) -> list[TxnParticipants]:
        found = _by_txn(txn_ids, await self.pool.fetch(Q["txns_participants"], self.tcid, txn_ids))
        return [found[txn_id] for txn_id in txn_ids]

    async def app_predecessors(self, txn_id: int) -> list[tuple[int, int, int, str]]:
        """The earlier application commits still COMMITTING on the partitions
        ``txn_id`` sent to: (tcid, txn id, order, shared partition) rows, oldest first
        (``commitorder.earlier_commits`` groups them)."""
        return [tuple(r) for r in await self.pool.fetch(Q["app_predecessors"], self.tcid, txn_id)]

    async def ending(self) -> list[EndingTxn]:
        """This TCID's COMMITTING/ABORTING transactions (to drive on after a restart)."""
        return [EndingTxn(r[0], r[1]) for r in await self.pool.fetch(Q["ending_txns"], self.tcid)]

    async def expired(self) -> list[EndingTxn]:
        """Transactions past their deadline and their status (OPEN, or ending)."""
        return [EndingTxn(r[0], r[1]) for r in await self.pool.fetch(Q["expired_txns"], self.tcid)]

    async def listen_app_commits(self, callback: Callable[[int, int], None]) -> AppCommitListener:
        """Hold a connection that LISTENs for the transactions applications commit in
        their own SQL transactions (magnetar_app.commit_transaction's pg_notify, delivered
        at their COMMIT); ``callback(most, least)`` for each."""
        conn = await self.pool.acquire()

        def heard(_conn: Any, _pid: int, _channel: str, payload: str) -> None:
            most, _, least = payload.partition(",")
            callback(int(most), int(least))

        try:
            await conn.add_listener(APP_COMMITS_CHANNEL, heard)
        except BaseException:
            await self.pool.release(conn)
            raise
        return AppCommitListener(self.pool, conn, heard)

    async def active_count(self) -> int:
        return int(await self.pool.fetchval(Q["active_count"], self.tcid))

    async def open_by_owner(self) -> dict[str, int]:
        """This TCID's OPEN transactions counted by owner (role)."""
        return {r["owner"]: r["n"] for r in await self.pool.fetch(Q["open_by_owner"], self.tcid)}

    async def purge_ended(self, retention_s: float) -> int:
        result = await self.pool.execute(Q["purge_ended"], self.tcid, retention_s, self.fence_epoch)
        return int(result.split()[-1])
