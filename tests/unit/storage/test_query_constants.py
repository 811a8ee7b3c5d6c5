"""A transaction's status has one definition (magnetar.proto's TxnStatus): the SQL names it
({TXN_OPEN}) and the loader writes the value in, so no statement can disagree with the
code about what 0 or 3 means."""

import re
from pathlib import Path

import pytest

from magnetar_protocol import magnetar_pb2 as pb
from magnetar_storage.queries import CONSTANTS, parse_queries

ROOT = Path(__file__).resolve().parents[3]


def test_named_statuses_become_the_protocols_values():
    [query] = parse_queries("-- name: q\nSELECT 1 WHERE status IN ({TXN_OPEN}, {TXN_ABORTING}) "
                            "AND a = '{}'::int[]").values()
    assert query == f"SELECT 1 WHERE status IN ({pb.TXN_OPEN}, {pb.TXN_ABORTING}) AND a = '{{}}'::int[]"
    assert CONSTANTS["TXN_COMMITTED"] == pb.TXN_COMMITTED


def test_an_unknown_name_fails_the_load():
    with pytest.raises(ValueError, match="unknown constant {TXN_DONE}"):
        parse_queries("-- name: q\nSELECT {TXN_DONE}")


def test_no_statement_writes_a_status_as_a_number():
    # Migrations before 0014 are frozen as they shipped (index predicates with numbers).
    migrations = [f for f in sorted(ROOT.glob("libs/storage/src/magnetar_storage/migrations/*.sql"))
                  if f.name >= "0014"]
    files = sorted(ROOT.glob("services/*/src/*/queries.sql")) + migrations
    assert files and migrations
    numeric = re.compile(r"\bstatus\s*(?:=|<>|IN\s*\()\s*\d")
    found = [f"{f.relative_to(ROOT)}:{n}" for f in files
             for n, line in enumerate(f.read_text().splitlines(), 1) if numeric.search(line)]
    assert found == []
