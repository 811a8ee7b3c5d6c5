"""Migrations: idempotent, safe concurrently, and in agreement with the SQLAlchemy model."""

import asyncio

import asyncpg
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateIndex, CreateTable

from magnetar_storage.migrate import migrate, migration_files
from magnetar_storage.model import metadata

# Tables only: the model describes tables; a view (0015's app_commit_predecessors) is a
# query kept in the database, checked by the tests of the service that reads it.
_COLUMNS = """
SELECT c.table_name, c.column_name, c.data_type, c.is_nullable, c.column_default IS NOT NULL AS has_default
FROM information_schema.columns c
JOIN information_schema.tables t USING (table_schema, table_name)
WHERE c.table_schema IN ('public', 'magnetar_app') AND c.table_name <> 'magnetar_migrations'
  AND t.table_type = 'BASE TABLE'
ORDER BY 1, 2
"""
_CONSTRAINTS = """
SELECT conrelid::regclass::text AS tbl, contype::text,
       (SELECT array_agg(a.attname ORDER BY a.attname) FROM pg_attribute a
        WHERE a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)) AS cols,
       confrelid::regclass::text AS ref
FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace
WHERE n.nspname IN ('public', 'magnetar_app') AND conrelid::regclass::text <> 'magnetar_migrations'
  AND contype IN ('p', 'u', 'f')
ORDER BY 1, 2, 3
"""
_INDEXES = """
SELECT tablename, array_agg(regexp_replace(indexdef, 'INDEX \\S+ ON', 'INDEX ON') ORDER BY indexdef)
FROM pg_indexes WHERE schemaname IN ('public', 'magnetar_app') AND tablename <> 'magnetar_migrations'
GROUP BY tablename ORDER BY tablename
"""


async def _describe(url: str):
    conn = await asyncpg.connect(url)
    try:
        return [
            [tuple(r) for r in await conn.fetch(q)] for q in (_COLUMNS, _CONSTRAINTS, _INDEXES)
        ]
    finally:
        await conn.close()


async def test_migrations_match_model(postgres, request):
    migrated = postgres.create_database("schema_from_migrations")
    modelled = postgres.create_database("schema_from_model")
    await migrate(migrated)
    conn = await asyncpg.connect(modelled)
    dialect = postgresql.dialect()
    await conn.execute("CREATE SCHEMA magnetar_app")  # migration 0014's; the model names it
    for table in metadata.sorted_tables:
        await conn.execute(str(CreateTable(table).compile(dialect=dialect)))
        for index in table.indexes:
            await conn.execute(str(CreateIndex(index).compile(dialect=dialect)))
    await conn.close()
    got_columns, got_constraints, got_indexes = await _describe(migrated)
    want_columns, want_constraints, want_indexes = await _describe(modelled)
    assert got_columns == want_columns
    assert got_constraints == want_constraints
    assert got_indexes == want_indexes


async def test_migrate_twice_and_concurrently(empty_database_url):
    results = await asyncio.gather(*(migrate(empty_database_url) for _ in range(4)))
    applied = [v for r in results for v in r]
    assert sorted(applied) == sorted(v for v, _ in migration_files())  # each file once
    assert await migrate(empty_database_url) == []
