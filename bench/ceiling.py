"""The baseline every produce figure is compared with: bare asyncpg COPY of the same
messages, 1,000-row transactions, one connection, fsync on.

    .venv/bin/python bench/ceiling.py [--messages 200000] [--size 100]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import copy_ceiling, durable_postgres, report  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100)
    args = parser.parse_args()
    with durable_postgres() as url:
        figures = asyncio.run(copy_ceiling(url, args.messages, args.size))
    report(f"COPY ceiling ({args.size} B rows, 1,000-row transactions)", figures)


if __name__ == "__main__":
    main()
