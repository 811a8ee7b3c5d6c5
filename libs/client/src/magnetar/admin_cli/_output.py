"""Output: aligned tables for people (the default) or, with ``--output json``, the
service's answer as it came, for scripts."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any


class Out:
    def __init__(self, mode: str):
        self.json = mode == "json"

    def emit(self, data: Any, render: Callable[[Any], None]) -> None:
        if self.json:
            print(json.dumps(data, indent=2, ensure_ascii=False))
        else:
            render(data)

    def done(self, message: str, **fields) -> None:
        """The answer to a change: a sentence, or {"result": "ok", fields} in JSON."""
        self.emit({"result": "ok", **fields}, lambda _: print(message))


def table(headers: list[str], rows: list[list[Any]]) -> None:
    cells = [[cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    for row in [headers] + cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip())


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def column(header: str) -> Callable[[list], None]:
    return lambda values: table([header], [[v] for v in values])


def key_values(data: dict, keys: list[str] | None = None) -> None:
    """FIELD/VALUE rows of ``keys`` (default: every key, in the answer's order)."""
    keys = list(data) if keys is None else [k for k in keys if k in data]
    table(["FIELD", "VALUE"], [[k, data.get(k)] for k in keys])


def timestamp(ms: int | None) -> str | None:
    """Epoch milliseconds as UTC ISO 8601 to the second (None stays None)."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
