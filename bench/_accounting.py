"""Per-transaction accounting from PostgreSQL's own counters (issue 26): what one
transaction of a benchmark costs the database, read as deltas of

- ``pg_stat_database``: commits and rollbacks (every SQL transaction, read-only ones too);
- ``pg_stat_user_tables``: tuples inserted, updated (HOT or not) and deleted, per table;
- index entries, derived: each insert and each non-HOT update adds one entry to every
  index of its table; partial indexes are counted apart, as if every row matched them
  (an upper bound: e.g. `entries_txn_marker` holds commit markers only);
- ``pg_stat_wal``: WAL records, full-page images and bytes;
- ``pg_stat_statements`` (when the server loaded it): statements executed;
- the rows left in the transaction bookkeeping tables, which trimming and the
  coordinator's purge delete later (a deferred cost the window does not see);

divided by the transactions measured.  The cumulative statistics reach the shared views
when a backend goes idle, but a backend that flushed less than a second before keeps
them up to 10 s (PostgreSQL 15's PGSTAT_MIN_INTERVAL and PGSTAT_IDLE_INTERVAL), so a
reading is taken after a ``SETTLE_S`` pause at each end of the measured window; the
services' background loops (heartbeats, lease checks) during the window are counted too
(a few statements a second)."""

from __future__ import annotations

import asyncio

import asyncpg

# Longer than PGSTAT_IDLE_INTERVAL (10 s): every backend that went idle has flushed
# (a 1.2 s pause missed ~20% of the ceiling's tuples).
SETTLE_S = 10.5

# Tables whose rows a transaction leaves for later deletion (trimming of outcomes and
# buffers, the coordinator's purge of ended transactions after MAGNETAR_ENDED_RETENTION_S).
BOOKKEEPING = ("transactions", "txn_partitions", "txn_subscriptions", "txn_entries",
               "txn_outcomes", "pending_acks")

# Each reading is tagged, so that pg_stat_statements' count leaves it out.
_DATABASE = """
SELECT /* bench-accounting */ xact_commit, xact_rollback FROM pg_stat_database WHERE datname = current_database()
"""
_TABLES = """
SELECT /* bench-accounting */ s.relname, s.n_tup_ins, s.n_tup_upd, s.n_tup_hot_upd, s.n_tup_del,
       (SELECT count(*) FROM pg_index i WHERE i.indrelid = s.relid AND i.indpred IS NULL) AS indexes,
       (SELECT count(*) FROM pg_index i WHERE i.indrelid = s.relid AND i.indpred IS NOT NULL)
           AS partial_indexes
FROM pg_stat_user_tables s
"""
_WAL = "SELECT /* bench-accounting */ wal_records, wal_fpi, wal_bytes FROM pg_stat_wal"
_STATEMENTS = """
SELECT /* bench-accounting */ coalesce(sum(calls), 0) FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND query !~ 'bench-accounting'
"""


async def _has_statements(conn) -> bool:
    try:
        await conn.fetchval("SELECT /* bench-accounting */ 1 FROM pg_stat_statements LIMIT 1")
        return True
    except asyncpg.PostgresError:
        return False


async def snapshot(database_url: str, settle: bool = True) -> dict:
    """The counters now (after a pause that lets every backend flush its statistics)."""
    if settle:
        await asyncio.sleep(SETTLE_S)
    conn = await asyncpg.connect(database_url)
    try:
        # One SQL transaction (one commit of our own), its BEGIN and COMMIT tagged too.
        await conn.execute("BEGIN /* bench-accounting */")
        db = await conn.fetchrow(_DATABASE)
        tables = {r["relname"]: dict(r) for r in await conn.fetch(_TABLES)}
        wal = dict(await conn.fetchrow(_WAL))
        statements = await conn.fetchval(_STATEMENTS) if await _has_statements(conn) else None
        counts = {}
        for name in BOOKKEEPING:
            if name in tables:  # exact counts: n_live_tup lags and estimates
                counts[name] = await conn.fetchval(f"SELECT /* bench-accounting */ count(*) FROM {name}")
        await conn.execute("COMMIT /* bench-accounting */")
    finally:
        await conn.close()
    return {"db": dict(db), "tables": tables, "wal": wal, "statements": statements, "rows": counts}


def per_transaction(before: dict, after: dict, transactions: int) -> dict:
    """The accounting between two snapshots, per transaction."""
    n = max(transactions, 1)
    names = sorted(after["tables"])
    ins = upd = hot = dele = idx = pidx = 0
    by_table = {}
    for name in names:
        a = after["tables"].get(name)
        if a is None:
            continue
        b = before["tables"].get(name, {"n_tup_ins": 0, "n_tup_upd": 0, "n_tup_hot_upd": 0, "n_tup_del": 0})
        d_ins = a["n_tup_ins"] - b["n_tup_ins"]
        d_upd = a["n_tup_upd"] - b["n_tup_upd"]
        d_hot = a["n_tup_hot_upd"] - b["n_tup_hot_upd"]
        d_del = a["n_tup_del"] - b["n_tup_del"]
        d_idx = (d_ins + d_upd - d_hot) * a["indexes"]
        d_pidx = (d_ins + d_upd - d_hot) * a["partial_indexes"]
        ins, upd, hot, dele = ins + d_ins, upd + d_upd, hot + d_hot, dele + d_del
        idx, pidx = idx + d_idx, pidx + d_pidx
        if d_ins or d_upd or d_del:
            by_table[name] = (d_ins / n, d_upd / n, d_hot / n, d_del / n, d_idx / n, d_pidx / n)
    commits = after["db"]["xact_commit"] - before["db"]["xact_commit"] - 1  # our own snapshot's
    figures = {
        "commits": commits / n,
        "rollbacks": (after["db"]["xact_rollback"] - before["db"]["xact_rollback"]) / n,
        "statements": (None if after["statements"] is None or before["statements"] is None
                       else float(after["statements"] - before["statements"]) / n),
        "tuples inserted": ins / n,
        "tuples updated (HOT)": f"{upd / n:.2f} ({hot / n:.2f})",
        "tuples deleted": dele / n,
        "index entries": idx / n,
        "partial-index entries (<=)": pidx / n,
        "WAL records": (after["wal"]["wal_records"] - before["wal"]["wal_records"]) / n,
        "WAL full-page images": (after["wal"]["wal_fpi"] - before["wal"]["wal_fpi"]) / n,
        "WAL bytes": (int(after["wal"]["wal_bytes"]) - int(before["wal"]["wal_bytes"])) / n,
    }
    left = {name: (after["rows"].get(name, 0) - before["rows"].get(name, 0)) / n
            for name in BOOKKEEPING if name in after["rows"]}
    figures["rows left to delete later"] = round(sum(left.values()), 2)
    return {"figures": {k: (round(v, 2) if isinstance(v, float) else v) for k, v in figures.items()},
            "by_table": by_table, "left": left}


def print_accounting(title: str, accounts: dict[str, dict]) -> None:
    """One table: a column per measured part (the ceiling, (c)), a row per figure; then
    (c)'s tuples by table."""
    names = list(accounts)
    rows = list(next(iter(accounts.values()))["figures"])
    print(f"\n== {title}: PostgreSQL's own counters per transaction")
    print(f"  {'':<28}" + "".join(f"{n:>16}" for n in names))
    for row in rows:
        cells = []
        for n in names:
            value = accounts[n]["figures"].get(row)
            cells.append(f"{'n/a' if value is None else value:>16}")
        print(f"  {row:<28}" + "".join(cells))
    for n in names:
        by_table = accounts[n]["by_table"]
        if not by_table:
            continue
        print(f"  {n}, by table (inserted / updated / of which HOT / deleted / index entries / "
              "partial-index entries <=):")
        for name, (i, u, h, d, x, p) in sorted(by_table.items(), key=lambda kv: -sum(kv[1])):
            if max(i, u, d) >= 0.005:
                print(f"    {name:<24} {i:7.2f} {u:7.2f} {h:7.2f} {d:7.2f} {x:7.2f} {p:7.2f}")
        left = {k: v for k, v in accounts[n]["left"].items() if v}
        if left:
            print(f"  {n}, rows left for later deletion: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in left.items()))


async def top_statements(database_url: str, order_by: str = "calls", limit: int = 15,
                         width: int = 100) -> list[dict]:
    """pg_stat_statements' statements (calls, plans, exec_ms, plan_ms, query: its first
    ``width`` characters, whitespace squeezed), this accounting's own left out, the
    first ``limit`` by ``order_by``: "calls" or "time" (execution + planning)."""
    order = {"calls": "calls", "time": "total_exec_time + total_plan_time"}[order_by]
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT /* bench-accounting */ calls, plans, total_exec_time AS exec_ms, "
            "total_plan_time AS plan_ms, left(regexp_replace(query, '\\s+', ' ', 'g'), $2) AS query "
            f"FROM pg_stat_statements WHERE query !~ 'bench-accounting' ORDER BY {order} DESC LIMIT $1",
            limit, width)
        return [dict(r) for r in rows]
    finally:
        await conn.close()
