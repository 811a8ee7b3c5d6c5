"""The examples run as documented, against real processes."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_produce_consume_tour(cluster):
    out = subprocess.run([sys.executable, str(EXAMPLES / "produce_consume.py"), cluster.service_url],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("invoiced") == 3
    assert [line for line in out.stdout.splitlines() if line.startswith("read")] == [
        "read invoice for order-0", "read invoice for order-1", "read invoice for order-2"]


def _spawn(cluster, name: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-u", str(EXAMPLES / "leader_election.py"), name, "--service-url",
         ",".join(cluster.broker_urls), "--interval", "0.1"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for(proc: subprocess.Popen, text: str) -> str:
    for line in proc.stdout:
        if text in line:
            return line.strip()
    raise AssertionError(f"{text!r} never printed (exit {proc.poll()})")


def test_killing_the_leader_promotes_the_next_with_its_state(cluster):
    first = _spawn(cluster, "alpha")
    try:
        assert _wait_for(first, "leader,") == "alpha: leader, state rebuilt at 0"
        _wait_for(first, "wrote 5")
        second = _spawn(cluster, "beta")
        try:
            _wait_for(second, "waiting to become the leader")
            first.send_signal(signal.SIGKILL)
            first.wait()
            line = _wait_for(second, "leader, state rebuilt")
            rebuilt = int(line.rsplit(" ", 1)[1])
            assert rebuilt >= 5  # every write of the dead leader is in the state
            assert _wait_for(second, "wrote") == f"beta: wrote {rebuilt + 1}"
        finally:
            second.kill()
            second.wait()
    finally:
        first.kill()
        first.wait()
