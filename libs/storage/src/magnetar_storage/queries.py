"""Named SQL queries kept in plain ``.sql`` files.

A file holds blocks introduced by ``-- name: some_query``; the block's text up to the
next such line is the query.  Services keep their SQL in ``queries.sql`` beside their
``store.py`` and load it once with :func:`load_queries`.

Codes that Python and SQL share are written by name in the SQL, ``{TXN_OPEN}``, and
replaced by their values when the file is loaded (:data:`CONSTANTS`): one definition,
the protocol's enum, so a status can never mean one thing in a statement and another
in the code that reads it.  An unknown name fails the load.

A statement with many inputs names them, ``:topic_id``, instead of numbering them
(``$1``); the loader numbers them in order of first use and the store passes them by
name (:meth:`Queries.bind`), so a caller can neither swap two inputs nor forget one.
A statement uses one style or the other, never both.
"""

from __future__ import annotations

import re
from importlib import resources

from magnetar_protocol import magnetar_pb2 as pb

_HEADER = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
_CONSTANT = re.compile(r"\{([A-Z][A-Z0-9_]*)\}")
# ``:name``, not a cast's ``::type`` (a colon before) nor ``a:b`` (a word character before).
_PARAM = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")
_NUMBERED = re.compile(r"\$\d")

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


class Queries(dict[str, str]):
    """A file's queries by name (the SQL as the driver takes it, numbered parameters),
    and the inputs of those that name them."""

    def __init__(self) -> None:
        super().__init__()
        self.params: dict[str, tuple[str, ...]] = {}

    def bind(self, name: str, **values: object) -> list[object]:
        """``[sql, *args]`` for a statement whose inputs are given by name (every input
        exactly once): ``await conn.fetchrow(*Q.bind("q", topic_id=1, ...))``."""
        params = self.params.get(name)
        if params is None:
            raise TypeError(f"query {name!r} does not name its inputs")
        missing = [p for p in params if p not in values]
        unknown = sorted(set(values) - set(params))
        if missing or unknown:
            raise TypeError(f"query {name!r}: inputs missing {missing}, unknown {unknown}")
        return [self[name], *(values[p] for p in params)]


def _numbered(name: str, body: str) -> tuple[str, tuple[str, ...]]:
    """A statement with its ``:name`` inputs numbered in order of first use, and their
    names; comments (after ``--``) are left as written."""
    code = "\n".join(line.split("--", 1)[0] for line in body.splitlines())
    names = list(dict.fromkeys(_PARAM.findall(code)))
    if not names:
        return body, ()
    if _NUMBERED.search(code):
        raise ValueError(f"query {name!r} mixes named (:{names[0]}) and numbered ($n) inputs")
    number = {n: i + 1 for i, n in enumerate(names)}
    lines = []
    for line in body.splitlines():
        sql, sep, comment = line.partition("--")
        lines.append(_PARAM.sub(lambda m: f"${number[m.group(1)]}", sql) + sep + comment)
    return "\n".join(lines), tuple(names)


def parse_queries(text: str) -> Queries:
    parts = _HEADER.split(text)
    queries = Queries()
    for name, body in zip(parts[1::2], parts[2::2]):
        if name in queries:
            raise ValueError(f"query {name!r} is defined twice")
        queries[name], params = _numbered(name, substitute(body.strip().rstrip(";")))
        if params:
            queries.params[name] = params
    return queries


def load_queries(package: str, filename: str = "queries.sql") -> Queries:
    return parse_queries((resources.files(package) / filename).read_text())
