"""Session fixtures that start the real thing (after temporal sdk-python's): one private
PostgreSQL server per test session, a fresh migrated database per test that wants one.

The migrations run once per session, into a template database; each test's database is
a copy of it (CREATE DATABASE ... TEMPLATE: a file copy, instead of every migration
again per test).
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


MIGRATED_TEMPLATE = "magnetar_migrated_template"


@pytest.fixture(scope="session")
def migrated_template(postgres) -> str:
    """The name of a database holding every migration, to copy (nobody stays connected)."""
    asyncio.run(migrate(postgres.create_database(MIGRATED_TEMPLATE)))
    return MIGRATED_TEMPLATE


@pytest.fixture
def empty_database_url(postgres, request) -> str:
    """A brand-new database with no schema."""
    return postgres.create_database(_db_name(request.node.nodeid))


@pytest.fixture
def database_url(postgres, migrated_template, request) -> str:
    """A brand-new database with every migration applied."""
    return postgres.create_database(_db_name(request.node.nodeid), template=migrated_template)
