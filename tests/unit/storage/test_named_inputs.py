"""Statements that name their inputs (magnetar_storage.queries): numbered in order of
first use, casts and comments left alone, every input passed exactly once by name."""

import pytest

from magnetar_storage.queries import parse_queries


def test_named_inputs_are_numbered_in_order_of_first_use_and_reused():
    q = parse_queries("-- name: q\nSELECT :b::bigint, :a::text[] -- :c is not an input\n"
                      "WHERE x = :b AND t = 'persistent://t:x' AND arr[1:2] = '{}'")
    sql = q["q"]
    assert type(sql) is str  # asyncpg takes exactly a str
    assert sql.startswith("SELECT $1::bigint, $2::text[] -- :c is not an input\nWHERE x = $1 ")
    assert "'persistent://t:x'" in sql and "arr[1:2]" in sql
    assert q.bind("q", a="A", b=7) == [sql, 7, "A"]


def test_an_input_missing_or_unknown_is_refused_by_name():
    q = parse_queries("-- name: q\nSELECT :topic_id, :epoch")
    with pytest.raises(TypeError, match=r"missing \['epoch'\], unknown \['epochs'\]"):
        q.bind("q", topic_id=1, epochs=2)


def test_a_statement_with_numbered_inputs_is_not_bound_by_name():
    q = parse_queries("-- name: q\nSELECT $1::bigint")
    assert q["q"] == "SELECT $1::bigint"
    with pytest.raises(TypeError, match="does not name its inputs"):
        q.bind("q", x=1)


def test_a_statement_mixing_both_styles_fails_the_load():
    with pytest.raises(ValueError, match="mixes named"):
        parse_queries("-- name: q\nSELECT :a, $2")
