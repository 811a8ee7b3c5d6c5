"""Which coordinator a transaction key is bound to.  Pure: no I/O.

A new key is bound by a stable hash of its identity over the live coordinator ids; once
bound it stays there ("sticky": the binding is stored with the key), so scaling the
coordinators up never moves an existing key.  A key bound to a TCID whose own process is
gone (scaled down, or dead: a live coordinator adopted it) is re-bound, on its next
connect, the way a new key is bound; the binding only routes NewTxn, fencing is the
key's epoch, so moving it never lets two holders act.
"""

from __future__ import annotations

import zlib


def choose_coordinator(identity: str, live_ids: list[int]) -> int:
    """The coordinator a new key ``identity`` (``owner&key``) is bound to."""
    if not live_ids:
        raise ValueError("no live coordinator to bind a transaction key to")
    ids = sorted(live_ids)
    return ids[zlib.crc32(identity.encode()) % len(ids)]


def connect_outcome(current_epoch: int | None, deleted: bool, presented: int) -> str:
    """What a connect presenting epoch ``presented`` does to a key now at
    ``current_epoch`` (None: never connected): ``"new"`` (bump the epoch and fence the
    previous holder), ``"resume"`` (the same client reconnecting), or ``"refuse"``."""
    if presented == -1:
        return "new"
    if current_epoch is not None and not deleted and presented == current_epoch:
        return "resume"
    return "refuse"
