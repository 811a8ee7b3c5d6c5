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

import pytest

from magnetar_runtime.local.postgres import LocalPostgres, find_pg_bin, free_port
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


@pytest.fixture(scope="module")
def password_server():
    """A PostgreSQL that checks passwords (scram-sha-256) for role `app`, as the chart's
    bundled one does for every TCP client; `magnetar` stays trusted to set it up."""
    folder = Path(tempfile.mkdtemp(prefix="magnetar-test-pg-"))
    hba = folder / "pg_hba.conf"
    hba.write_text("host all magnetar 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 scram-sha-256\n")
    hba.chmod(0o644)
    pg = LocalPostgres(folder / "pg", durable=False, settings={"hba_file": str(hba)}).start()
    admin = [str(find_pg_bin() / "psql"), "-h", "127.0.0.1", "-p", str(pg.port), "-U", "magnetar",
             "-d", "postgres", "-c"]
    subprocess.run([*admin, "CREATE ROLE app LOGIN PASSWORD 'Right-pw-1'"], check=True, capture_output=True)
    subprocess.run([*admin, "CREATE DATABASE appdb OWNER app"], check=True, capture_output=True)
    yield f"postgresql://app@127.0.0.1:{pg.port}/appdb"
    pg.stop()
    shutil.rmtree(folder, ignore_errors=True)


def run_migrate(url: str, **env) -> tuple[int, str]:
    result = subprocess.run([MIGRATE], env={**os.environ, "MAGNETAR_DATABASE_URL": url,
                                            "MAGNETAR_DATABASE_WAIT_S": "60", **env},
                            capture_output=True, text=True, timeout=120)
    return result.returncode, result.stdout + result.stderr


def test_the_password_in_pgpassword_as_the_chart_gives_it(password_server):
    """The chart hands pods a URL without the password and PGPASSWORD beside it."""
    code, text = run_migrate(password_server, PGPASSWORD="Right-pw-1")
    assert code == 0, text
    assert "Right-pw-1" not in text


@pytest.mark.parametrize("how", ["PGPASSWORD", "in the URL"])
def test_a_wrong_password_fails_at_once_with_the_fix_and_is_never_printed(password_server, how):
    if how == "PGPASSWORD":
        code, text = run_migrate(password_server, PGPASSWORD="Wrong-pw-2")
    else:
        code, text = run_migrate(password_server.replace("app@", "app:Wrong-pw-2@"))
    assert code == 1
    assert 'password authentication failed for user "app"' in text
    assert "Reinstalling over kept data" in text       # the likely cause, on Kubernetes
    assert "waiting for PostgreSQL" not in text         # permanent: not retried
    assert "Wrong-pw-2" not in text
