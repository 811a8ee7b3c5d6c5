"""The `magnetar-migrate` command as Kubernetes runs it (init container, hook Job): a real
process against a real PostgreSQL that is not there yet, never there, or refuses it.
Its output must never carry the database password (it lands in `kubectl logs`)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from magnetar_runtime.local.postgres import LocalPostgres, free_port

from tests.integration.admin.conftest import until

PASSWORD = "Hunter2-do-not-print"
MIGRATE = str(Path(sys.executable).parent / "magnetar-migrate")


def start_migrate(url: str, wait_s: str, out: Path) -> subprocess.Popen:
    env = {**os.environ, "MAGNETAR_DATABASE_URL": url, "MAGNETAR_DATABASE_WAIT_S": wait_s}
    handle = out.open("w")
    return subprocess.Popen([MIGRATE], env=env, stdout=handle, stderr=subprocess.STDOUT)


def finish(proc: subprocess.Popen, out: Path, timeout: float = 60) -> tuple[int, str]:
    return proc.wait(timeout=timeout), out.read_text()


def test_waits_for_postgresql_with_a_line_per_attempt_then_migrates(tmp_path):
    port = free_port()
    # The local server trusts every loopback connection, so the password is only there
    # to be (not) printed.  Database "postgres": initdb makes it, while LocalPostgres
    # creates "magnetar" only after the server listens (the postgres image creates its
    # database before it listens on TCP, so that gap exists only here).
    url = f"postgresql://magnetar:{PASSWORD}@127.0.0.1:{port}/postgres"
    out = tmp_path / "migrate.log"
    proc = start_migrate(url, "120", out)
    pg = None
    try:
        until(lambda: "waiting for PostgreSQL (attempt 2" in out.read_text(),
              "magnetar-migrate to retry while nothing listens", timeout=30)
        assert proc.poll() is None  # still waiting, not crashed
        # Not under tmp_path: a parallel pytest session resets /tmp/pytest-of-<user> to
        # 0700, and the server may run as another user (as the session fixture does).
        pg_dir = Path(tempfile.mkdtemp(prefix="magnetar-test-pg-"))
        pg = LocalPostgres(pg_dir, port=port, durable=False).start()
        code, text = finish(proc, out)
    finally:
        proc.kill()
        if pg:
            pg.stop()
            shutil.rmtree(pg.data_dir, ignore_errors=True)
    assert code == 0, text
    assert "schema is current" in text
    assert f"postgresql://magnetar:***@127.0.0.1:{port}/postgres" in text  # where it waits
    assert "Connect call failed" in text or "refused" in text.lower()      # and why
    assert PASSWORD not in text


def test_gives_up_after_the_wait_with_a_clear_message(tmp_path):
    port = free_port()  # nothing will ever listen here
    url = f"postgresql://magnetar:{PASSWORD}@127.0.0.1:{port}/magnetar"
    out = tmp_path / "migrate.log"
    code, text = finish(start_migrate(url, "3", out), out)
    assert code == 1
    assert "PostgreSQL not reachable after" in text
    assert "MAGNETAR_DATABASE_WAIT_S=3" in text
    assert f"127.0.0.1:{port}" in text
    assert PASSWORD not in text


def test_a_refusal_fails_at_once_naming_the_fix_without_the_password(postgres, tmp_path):
    url = f"postgresql://magnetar:{PASSWORD}@127.0.0.1:{postgres.port}/no_such_database"
    out = tmp_path / "migrate.log"
    code, text = finish(start_migrate(url, "120", out), out)
    assert code == 1
    assert "no_such_database" in text and "create the database" in text
    assert "waiting for PostgreSQL" not in text  # permanent: no retries
    assert PASSWORD not in text


def test_a_bad_wait_is_a_usage_error():
    result = subprocess.run([MIGRATE, "--database-url", "postgresql://x@127.0.0.1/x",
                             "--wait-s", "soon"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "not a number of seconds" in result.stderr


async def test_a_service_pool_that_cannot_connect_says_where_without_the_password():
    from magnetar_storage.db import DatabaseUnavailable, create_pool

    port = free_port()
    url = f"postgresql://magnetar:{PASSWORD}@127.0.0.1:{port}/magnetar"
    try:
        await create_pool(url)
    except DatabaseUnavailable as exc:
        text = str(exc)
    assert f"postgresql://magnetar:***@127.0.0.1:{port}/magnetar" in text
    assert PASSWORD not in text


def test_services_that_cannot_reach_the_database_exit_naming_it_without_the_password(tmp_path):
    from magnetar_runtime.local.cluster import command_path

    url = f"postgresql://magnetar:{PASSWORD}@127.0.0.1:{free_port()}/magnetar"
    for command in ("magnetar-broker", "magnetar-coordinator", "magnetar-registry",
                    "magnetar-admin-service"):
        env = {**os.environ, "MAGNETAR_DATABASE_URL": url, "MAGNETAR_PORT": str(free_port()),
               "MAGNETAR_COORDINATOR_ID": "0"}
        result = subprocess.run([command_path(command)], env=env, capture_output=True, text=True,
                                timeout=60)
        output = result.stdout + result.stderr
        assert result.returncode != 0, command
        assert "cannot open a connection pool to postgresql://magnetar:***@127.0.0.1" in output, command
        assert PASSWORD not in output, command
