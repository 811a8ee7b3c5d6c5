"""Session fixtures that start the real thing (after temporal sdk-python's): one private
PostgreSQL server per test session, a fresh migrated database per test that wants one.

Set MAGNETAR_TEST_DATABASE_URL to use an existing server instead (its database is then
used for admin connections to create per-test databases).
"""

from __future__ import annotations

import asyncio
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from magnetar_runtime.local.postgres import LocalPostgres
from magnetar_storage.migrate import migrate


@pytest.fixture(scope="session")
def postgres():
    data_dir = Path(tempfile.mkdtemp(prefix="magnetar-test-pg-"))
    pg = LocalPostgres(data_dir, durable=False).start()
    yield pg
    pg.stop()
    shutil.rmtree(data_dir, ignore_errors=True)


def _db_name(nodeid: str) -> str:
    return ("t_" + re.sub(r"[^a-z0-9]+", "_", nodeid.lower()))[:60]


@pytest.fixture
def empty_database_url(postgres, request) -> str:
    """A brand-new database with no schema."""
    return postgres.create_database(_db_name(request.node.nodeid))


@pytest.fixture
def database_url(empty_database_url) -> str:
    """A brand-new database with every migration applied."""
    asyncio.run(migrate(empty_database_url))
    return empty_database_url
