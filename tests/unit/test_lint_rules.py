"""`make lint`'s ruff rules catch what they are there for: a dropped asyncio task
reference (RUF006, issue #30: the event loop holds tasks weakly, so an unheld task can be
garbage-collected mid-flight; the coordinator dropped five)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

DROPPED = """import asyncio


async def work() -> None:
    await asyncio.sleep(0)


async def main() -> None:
    asyncio.create_task(work())
"""

HELD = """import asyncio

background: set[asyncio.Task] = set()


async def work() -> None:
    await asyncio.sleep(0)


async def main() -> None:
    task = asyncio.create_task(work())
    background.add(task)
    task.add_done_callback(background.discard)
"""


def ruff(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    path = tmp_path / "snippet.py"
    path.write_text(source)
    return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--config",
                           str(ROOT / "pyproject.toml"), str(path)], capture_output=True, text=True)


def test_a_dropped_task_reference_fails_lint(tmp_path):
    dropped = ruff(tmp_path, DROPPED)
    assert dropped.returncode == 1 and "RUF006" in dropped.stdout, dropped.stdout + dropped.stderr
    held = ruff(tmp_path, HELD)
    assert held.returncode == 0, held.stdout + held.stderr
