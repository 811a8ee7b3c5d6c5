"""How fast trimming deletes: the batch plan and the pacing between batches.  Pure: the
lifecycle loop (lifecycle.py) measures each batch's duration and passes it in.

Why pace at all: a trim batch is one DELETE of entries rows and their TOAST chunks,
committed with fsync, on the same PostgreSQL a produce commits to.  Run back to back, a
large deletable backlog (the soak's round after a trimming-off round: ~20k entries)
kept PostgreSQL's CPU and WAL busy for seconds and the sends behind it waited (p99
113 ms against ~10 ms otherwise).  So a batch is small in entries AND in bytes (one
batched entry can carry a megabyte), and after each batch trimming pauses in proportion
to how long the batch took: with a duty of 25% trimming takes at most a quarter of the
database's time however large the backlog, and a send waits at most about one batch.
A budget per pass bounds how long one pass runs; what is left waits for the next pass
(the backlog is deleted a little later, never more than it may be).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrimPace:
    batch_entries: int      # entries per DELETE at most
    batch_bytes: int        # payload bytes per DELETE at most (a batch has at least one entry)
    duty: float             # share of wall time spent deleting while a backlog remains, (0, 1]
    min_pause_s: float      # pause after a batch at least (yields to sends even for a tiny batch)
    max_pause_s: float      # ... and at most (a slow batch under load does not stall trimming)
    partition_batches: int  # batches per partition per pass (the others get their turn)
    pass_batches: int       # batches per pass over all partitions (the next pass goes on)


def batch_cut(sizes: list[int], pace: TrimPace) -> int:
    """How many of the oldest candidates (their ``sizes``, oldest first) one DELETE takes:
    at most ``batch_entries``, and no more bytes than ``batch_bytes`` unless the first
    entry alone is larger (it must go some time; alone it is the smallest batch)."""
    taken = 0
    total = 0
    for size in sizes[:pace.batch_entries]:
        if taken and total + size > pace.batch_bytes:
            break
        total += size
        taken += 1
    return taken


def pause_after(batch_s: float, pace: TrimPace) -> float:
    """Seconds to wait after a batch that took ``batch_s``, so trimming keeps to its duty."""
    pause = max(batch_s, 0.0) * (1 - pace.duty) / pace.duty
    return min(max(pause, pace.min_pause_s), pace.max_pause_s)


@dataclass
class TrimBudget:
    """Batches left in one pass: over all partitions, and for the partition at hand."""
    pace: TrimPace
    used: int = 0

    def partition(self) -> int:
        """Batches the next partition may use (0: the pass is spent)."""
        return max(0, min(self.pace.partition_batches, self.pace.pass_batches - self.used))

    def spend(self) -> None:
        self.used += 1
