"""Named SQL queries kept in plain ``.sql`` files.

A file holds blocks introduced by ``-- name: some_query``; the block's text up to the
next such line is the query.  Services keep their SQL in ``queries.sql`` beside their
``store.py`` and load it once with :func:`load_queries`.

Codes that Python and SQL share are written by name in the SQL, ``{TXN_OPEN}``, and
replaced by their values when the file is loaded (:data:`CONSTANTS`): one definition,
the protocol's enum, so a status can never mean one thing in a statement and another
in the code that reads it.  An unknown name fails the load.
"""

from __future__ import annotations

import re
from importlib import resources

from magnetar_protocol import magnetar_pb2 as pb

_HEADER = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
_CONSTANT = re.compile(r"\{([A-Z][A-Z0-9_]*)\}")

# The names a query may use: a transaction's status (transactions.status) as
# magnetar.proto's TxnStatus defines it.
CONSTANTS: dict[str, int] = dict(pb.TxnStatus.items())


def substitute(text: str) -> str:
    """``text`` with each ``{NAME}`` of :data:`CONSTANTS` replaced by its value."""
    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in CONSTANTS:
            raise ValueError(f"unknown constant {{{name}}} in SQL (known: {', '.join(sorted(CONSTANTS))})")
        return str(CONSTANTS[name])
    return _CONSTANT.sub(value, text)


def parse_queries(text: str) -> dict[str, str]:
    parts = _HEADER.split(text)
    queries: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        queries[name] = substitute(body.strip().rstrip(";"))
    return queries


def load_queries(package: str, filename: str = "queries.sql") -> dict[str, str]:
    return parse_queries((resources.files(package) / filename).read_text())
