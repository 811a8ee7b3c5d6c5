"""Named SQL queries kept in plain ``.sql`` files.

A file holds blocks introduced by ``-- name: some_query``; the block's text up to the
next such line is the query.  Services keep their SQL in ``queries.sql`` beside their
``store.py`` and load it once with :func:`load_queries`.
"""

from __future__ import annotations

import re
from importlib import resources

_HEADER = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def parse_queries(text: str) -> dict[str, str]:
    parts = _HEADER.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        queries[name] = body.strip().rstrip(";")
    return queries


def load_queries(package: str, filename: str = "queries.sql") -> dict[str, str]:
    return parse_queries((resources.files(package) / filename).read_text())
