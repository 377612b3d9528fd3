"""LIMIT and OFFSET written into a statement as numbers (``statements.literal_count``): only
plain ints in 0..2**63 - 1 reach the text, the other parameters stay bound, and rows come back
as a bound LIMIT would give them, on both databases."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy as sa

from sessionstore.sql.statements import (
    INT64_MAX,
    CompiledStatement,
    HotReads,
    count_literal,
    literal_count,
)

_NUMBERS = sa.table("numbers", sa.column("n", sa.Integer))
_PAGE = (
    sa.select(_NUMBERS.c.n)
    .where(_NUMBERS.c.n >= sa.bindparam("least"))
    .order_by(_NUMBERS.c.n)
    .limit(literal_count("limit"))
    .offset(literal_count("offset"))
)


@pytest.mark.parametrize("value", [True, False, "5", 5.0, -1, INT64_MAX + 1, None, "1; DROP"])
def test_only_plain_ints_in_range_are_written(value: Any) -> None:
    with pytest.raises((TypeError, ValueError)):
        count_literal(value)


def test_a_true_limit_is_refused_after_1_was_written() -> None:
    statement = CompiledStatement(_PAGE, sa.create_engine("sqlite://").dialect)
    assert statement.sql_for({"least": 0, "limit": 1, "offset": 0}).endswith("LIMIT 1 OFFSET 0")
    with pytest.raises(TypeError):
        statement.sql_for({"least": 0, "limit": True, "offset": 0})


@pytest.mark.parametrize("url", ["sqlite://", "postgresql+psycopg://"])
def test_the_numbers_are_written_and_the_rest_bound(url: str) -> None:
    statement = CompiledStatement(_PAGE, sa.create_engine(url).dialect)
    values = {"least": 3, "limit": 5, "offset": INT64_MAX}
    sql = statement.sql_for(values)
    assert sql.endswith(f"LIMIT 5 OFFSET {INT64_MAX}") and "POSTCOMPILE" not in sql
    parameters = statement.parameters(values)
    assert (list(parameters.values()) if isinstance(parameters, dict) else list(parameters)) == [3]


def test_rows_match_a_bound_limit(store_url: str) -> None:
    engine = sa.create_engine(store_url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TEMPORARY TABLE numbers (n INTEGER)"))
            conn.execute(sa.text("INSERT INTO numbers VALUES (:n)"), [{"n": n} for n in range(10)])
            hot = HotReads(conn.dialect, _PAGE)
            bound = (
                sa.select(_NUMBERS.c.n).where(_NUMBERS.c.n >= sa.bindparam("least"))
                .order_by(_NUMBERS.c.n).limit(sa.bindparam("limit"))
                .offset(sa.bindparam("offset"))
            )
            for limit, offset in [(0, 0), (3, 0), (3, 4), (INT64_MAX, 2), (5, INT64_MAX)]:
                values = {"least": 1, "limit": limit, "offset": offset}
                expected = [tuple(row) for row in conn.execute(bound, values)]
                assert hot.rows(conn, values) == expected
                # SQLAlchemy's own execution writes the numbers in as well.
                assert [tuple(row) for row in conn.execute(_PAGE, values)] == expected
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "value", ["it's ? 50% -- not a comment", "a\x00NUL", 3, -7, INT64_MAX, 2.5, True, b"x"]
)
def test_a_statements_constants_read_back_as_bound(tmp_path: Any, value: Any) -> None:
    """On SQLite a statement's own constants are written into it where a literal holds them
    (``statements._compile``); rows are what the bound value gives, NUL, bool and bytes stay
    bound."""
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'c.db'}")
    try:
        with engine.connect() as conn:
            statement = sa.select(sa.literal(value).label("v"), sa.literal(1).label("one"))
            hot = HotReads(conn.dialect, statement)
            assert hot.rows(conn, {}) == [tuple(conn.execute(statement).one())]
            sql = CompiledStatement(statement, conn.dialect).sql
            assert ("?" in sql.replace("'it''s ? 50% -- not a comment'", "")) == (
                type(value) not in (int, float, str) or "\x00" in str(value)
            )
    finally:
        engine.dispose()
