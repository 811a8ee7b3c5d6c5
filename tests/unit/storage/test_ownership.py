"""Table ownership (magnetar_storage/ownership.py): every service's SQL writes only the
tables it owns or has a declared exception for, every table has an owner, and every
exception is still needed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from magnetar_storage import ownership
from magnetar_storage.queries import parse_queries

ROOT = Path(__file__).resolve().parents[3]
SQL = {
    "admin": ["services/admin/src/magnetar_admin/queries.sql"],
    "broker": ["services/broker/src/magnetar_broker/queries.sql"],
    "coordinator": ["services/coordinator/src/magnetar_coordinator/queries.sql"],
    "registry": ["services/registry/src/magnetar_registry/queries.sql"],
    "storage": ["libs/storage/src/magnetar_storage/listeners.sql"],
}
MIGRATIONS = ROOT / "libs/storage/src/magnetar_storage/migrations"


def queries(service: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for path in SQL[service]:
        found |= {f"{path}:{name}": sql for name, sql in parse_queries((ROOT / path).read_text()).items()}
    return found


def test_every_sql_file_of_a_service_is_checked():
    on_disk = {str(p.relative_to(ROOT)) for top in ("services", "libs")
               for p in (ROOT / top).rglob("*.sql") if "migrations" not in p.parts and ".venv" not in p.parts}
    assert on_disk == {path for paths in SQL.values() for path in paths}


@pytest.mark.parametrize("service", sorted(SQL))
def test_a_service_writes_only_what_it_owns_or_declares(service):
    assert ownership.violations(service, queries(service)) == []


def test_every_table_has_an_owner():
    created = set(re.findall(r"CREATE TABLE (?:\w+\.)?(\w+)", "".join(p.read_text() for p in MIGRATIONS.glob("*.sql"))))
    assert created == set(ownership.OWNER)
    assert set(ownership.OWNER.values()) <= set(ownership.SERVICES)


def test_every_exception_is_used_and_has_a_reason():
    written = {(service, table) for service in SQL
               for sql in queries(service).values() for table in ownership.written_tables(sql)}
    for (writer, table), reason in ownership.EXCEPTIONS.items():
        assert (writer, table) in written, f"stale exception: {writer} no longer writes {table}"
        assert ownership.OWNER[table] != writer and len(reason) > 20


@pytest.mark.parametrize("sql, tables", [
    ("INSERT INTO t (a) VALUES (1) ON CONFLICT (a) DO UPDATE SET a = 2", {"t"}),
    ("SELECT * FROM t FOR UPDATE", set()),
    ("SELECT * FROM t FOR NO KEY UPDATE SKIP LOCKED", set()),
    ("WITH gone AS (DELETE FROM public.a RETURNING x) UPDATE b SET y = 1 FROM gone", {"a", "b"}),
    ("TRUNCATE TABLE a, b", {"a", "b"}),
    ("merge into m USING s ON true WHEN MATCHED THEN DELETE", {"m"}),
    ("-- UPDATE c SET\nSELECT 1", set()),
])
def test_written_tables(sql, tables):
    assert ownership.written_tables(sql) == tables


def test_an_undeclared_write_is_named_with_its_owner_and_the_fix():
    found = ownership.violations("registry", {"q": "WITH x AS (UPDATE coordinators SET url = '') SELECT 1"})
    assert len(found) == 1 and "'coordinators', owned by coordinator" in found[0]
    assert "ownership.py" in found[0]
