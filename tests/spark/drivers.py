"""A Spark job of spark-jobs/ as a real separate process, started with spark-submit
exactly as spark-jobs/README.md documents, so a test can SIGKILL or freeze the whole
driver (JVM, the Python driver program and PySpark's Python workers) at any instruction.

PySpark's worker daemon puts itself in a process group of its own (pyspark/daemon.py),
so signals go to the process tree found with psutil, not to one process group.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import psutil

from magnetar_runtime.local.processes import SETPRIV

SPARK_JOBS = Path(__file__).resolve().parents[2] / "spark-jobs"
SPARK_SUBMIT = Path(sys.executable).parent / "spark-submit"


def checkpoint_batches(checkpoint: Path) -> tuple[set[int], set[int]]:
    """(batches planned, batches committed) in a Spark checkpoint: Spark writes
    offsets/N before it runs batch N and commits/N after its sink committed."""
    def ids(folder: str) -> set[int]:
        try:
            return {int(name) for name in os.listdir(checkpoint / folder) if name.isdigit()}
        except FileNotFoundError:
            return set()
    return ids("offsets"), ids("commits")


def batch_in_flight(checkpoint: Path, after_committed: int = 1) -> int | None:
    """The batch running now (planned, not committed), once at least
    ``after_committed`` batches were committed; else None."""
    planned, committed = checkpoint_batches(checkpoint)
    running = planned - committed
    if len(committed) >= after_committed and running:
        return max(running)
    return None


def open_sink_transactions(admin_url: str) -> list[str]:
    """The open transactions of the streaming sinks' transaction keys (``spark-sink-*``,
    derived from checkpoint locations), from the admin API."""
    with urllib.request.urlopen(f"{admin_url}/admin/v2/transactions/transaction-keys",
                                timeout=10) as answer:
        keys = json.load(answer)["transactionKeys"]
    return [txn for key in keys if key["transactionKey"].startswith("spark-sink-")
            for txn in key["transactions"]]


def mid_batch(checkpoint: Path, admin_url: str) -> int | None:
    """The batch id while a batch runs inside its open transaction, after one batch
    committed: the moment a crash or stall hurts most."""
    batch = batch_in_flight(checkpoint)
    if batch is not None and open_sink_transactions(admin_url):
        return batch
    return None


class SparkDriver:
    """``spark-submit --master local[2] spark-jobs/<job> <args>``, output in ``log_path``."""

    def __init__(self, job: str, args: list[str], log_path: Path):
        self.job, self.args, self.log_path = job, args, log_path
        self.process: subprocess.Popen | None = None

    def start(self) -> SparkDriver:
        env = os.environ | {"PYSPARK_PYTHON": sys.executable,
                            "PYSPARK_DRIVER_PYTHON": sys.executable}
        command = [str(SPARK_SUBMIT), "--master", "local[2]", "--conf", "spark.ui.enabled=false",
                   str(SPARK_JOBS / self.job), *self.args]
        if SETPRIV:  # dies with the test run instead of lingering if pytest is killed
            command = [SETPRIV, "--pdeathsig", "KILL", *command]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                            env=env, start_new_session=True)
        return self

    def _tree(self) -> list[psutil.Process]:
        try:
            root = psutil.Process(self.process.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def signal(self, sig: int) -> None:
        for proc in self._tree():
            try:
                proc.send_signal(sig)
            except psutil.NoSuchProcess:
                pass

    def kill(self) -> None:
        """SIGKILL every process of the driver (children first found, all at once)."""
        if self.process is None:
            return
        tree = self._tree()
        self.signal(signal.SIGKILL)
        self.process.wait()
        psutil.wait_procs(tree, timeout=10)

    def freeze(self) -> None:
        self.signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.signal(signal.SIGCONT)

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.job} still running after {timeout} s\n{self.log_tail()}") from None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"
        return f"---- last {lines} lines of {self.log_path}\n" + "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> SparkDriver:
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.running:
            self.kill()
