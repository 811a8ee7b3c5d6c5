"""Which live coordinator adopts a TCID whose process is gone.  Pure: no I/O.

A gone TCID (heartbeat older than the lease TTL) must not strand its transactions: a
live coordinator adopts it (docs/transactions.md, "A coordinator that disappears").  The
adopter is chosen by rendezvous hashing over the coordinators serving their own TCID, so
the gone TCIDs of a scale-down spread over the survivors and a coordinator joining or
leaving moves only its share.  Every candidate computes the same choice; the database's
compare-and-set on the TCID's row decides anyway, so a disagreement (two views of who is
live) costs one refused update, never two adopters.
"""

from __future__ import annotations

import hashlib

# After this many lease TTLs without an adopter, any live coordinator may take the TCID:
# the chosen one may be a version without adoption (rolling upgrade) or about to die.
FALLBACK_TTLS = 3


def _weight(orphan: int, candidate: int) -> int:
    digest = hashlib.blake2b(f"{orphan}/{candidate}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def choose_adopter(orphan: int, live_owners: list[int]) -> int | None:
    """The live coordinator (by its own TCID) that should adopt ``orphan``; None when no
    coordinator is live."""
    candidates = [c for c in live_owners if c != orphan]
    if not candidates:
        return None
    return max(candidates, key=lambda c: (_weight(orphan, c), c))


def should_adopt(me: int, orphan: int, stale_s: float, ttl_s: float,
                 live_owners: list[int]) -> bool:
    """Whether coordinator ``me`` (live, serving its own TCID) tries to adopt ``orphan``,
    whose last heartbeat is ``stale_s`` old."""
    if orphan == me or stale_s <= ttl_s:
        return False
    return choose_adopter(orphan, live_owners) == me or stale_s > FALLBACK_TTLS * ttl_s
