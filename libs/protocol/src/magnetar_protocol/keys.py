"""Transaction key names (seed 000).  Pure.

A key is named by its owner (the authenticated role) and its name; the identity is
``owner&name``, so a name may not contain ``&``.  Names are 1 to 255 UTF-8 bytes and
may contain anything else printable ('/', spaces, unicode): the admin API takes them
URL-encoded.
"""

from __future__ import annotations

MAX_KEY_BYTES = 255
SEPARATOR = "&"


def key_problem(name: object) -> str | None:
    """Why ``name`` is not a valid transaction key, or None when it is."""
    if not isinstance(name, str):
        return f"a transaction key is a string, got {type(name).__name__}"
    if not name:
        return "a transaction key may not be empty"
    if SEPARATOR in name:
        return f"a transaction key may not contain {SEPARATOR!r} (it separates owner and key): {name!r}"
    if len(name.encode()) > MAX_KEY_BYTES:
        return f"a transaction key is at most {MAX_KEY_BYTES} bytes (UTF-8), got {len(name.encode())}"
    if any(not ch.isprintable() for ch in name):
        return f"a transaction key may not contain control characters: {name!r}"
    return None


def identity(owner: str, name: str) -> str:
    """The seed's ``owner&key`` identity (metrics labels, logs)."""
    return f"{owner}{SEPARATOR}{name}"
