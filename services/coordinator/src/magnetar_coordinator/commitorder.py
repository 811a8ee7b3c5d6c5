"""Which partition ends go before an application commit's own.  Pure: no I/O.

Transactions an application's SQL transaction committed (magnetar_app.commit_transaction)
carry their place in the commit order of the partitions they sent to (migration 0015,
docs/exactly-once-postgres.md "Ordering").  Their messages become visible where their
markers are written, so on a shared partition an earlier commit's marker must be
written first, whoever finishes which transaction first: the coordinator finishing a
commit first ends every earlier one still COMMITTING on the partitions they share,
oldest first.  Ending a decided transaction on a partition is idempotent, so doing it
again (or alongside that transaction's own coordinator) costs a request, never a double.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class EarlierCommit:
    """An earlier application commit, still COMMITTING, and the partitions it shares
    with the one being finished (its markers there go first)."""

    tcid: int
    txn_id: int
    order: int
    partitions: tuple[str, ...]


def earlier_commits(rows: Iterable[tuple[int, int, int, str]]) -> list[EarlierCommit]:
    """``app_predecessors`` rows (tcid, txn id, order, shared partition), in any order:
    one entry per earlier commit, oldest first, its partitions sorted."""
    shared: dict[tuple[int, int, int], set[str]] = {}
    for tcid, txn_id, order, partition in rows:
        shared.setdefault((order, tcid, txn_id), set()).add(partition)
    return [EarlierCommit(tcid, txn_id, order, tuple(sorted(parts)))
            for (order, tcid, txn_id), parts in sorted(shared.items())]
