"""A dialect's pair aggregate (``json_pairs_sql``) and its reader (``json_pairs``): what a
listing reads each projected root's chain through, in the tip rows' own statement."""

from __future__ import annotations

import sqlalchemy as sa

from sessionstore.dialects import dialect_for_url, json_pairs
from sessionstore.storage.engine import create_store_engine

# Ids as a foreign file may hold them: the chain walk's separator, quotes, JSON's own
# characters, text beyond the BMP.
IDS = ["root|1", 'a"quoted\\one', "中文 ✓", "[1, 2]", "𝄞tip"]


def test_the_pairs_come_back_whole_and_in_order_on_each_dialect(store_url: str) -> None:
    dialect = dialect_for_url(store_url)
    engine = create_store_engine(store_url)
    try:
        with engine.connect() as conn:
            # Rows fed to the aggregate out of order: the reader sorts them by their first.
            rows = " UNION ALL ".join(
                f"SELECT {depth} AS depth, :id{depth} AS id"
                for depth in (3, 0, 4, 1, 2)
            )
            aggregate = dialect.json_pairs_sql("member.depth", "member.id")
            value = conn.execute(
                sa.text(f"SELECT {aggregate} FROM ({rows}) AS member"),
                {f"id{depth}": session_id for depth, session_id in enumerate(IDS)},
            ).scalar_one()
    finally:
        engine.dispose()
    assert json_pairs(value) == list(enumerate(IDS))


def test_a_blob_value_comes_back_as_its_bytes(migrated_sqlite_url: str) -> None:
    # A salvaged SQLite file can hold an id as a BLOB; JSON holds none, and the aggregate
    # must not fail the statement that reads it (a listing of a chain through such a session).
    dialect = dialect_for_url(migrated_sqlite_url)
    engine = create_store_engine(migrated_sqlite_url)
    try:
        with engine.connect() as conn:
            aggregate = dialect.json_pairs_sql("member.depth", "member.id")
            value = conn.execute(
                sa.text(
                    f"SELECT {aggregate} FROM (SELECT 1 AS depth, :blob AS id"
                    " UNION ALL SELECT 0, 'root') AS member"
                ),
                {"blob": b"\x00\xffc1"},
            ).scalar_one()
    finally:
        engine.dispose()
    assert json_pairs(value) == [(0, "root"), (1, b"\x00\xffc1")]


def test_an_aggregate_of_no_row_is_no_pair() -> None:
    assert json_pairs(None) == []
    assert json_pairs("[]") == []
    assert json_pairs('[[1, "b"], [0, "a"]]') == [(0, "a"), (1, "b")]
    assert json_pairs([[1, "b"], [0, "a"]]) == [(0, "a"), (1, "b")]
