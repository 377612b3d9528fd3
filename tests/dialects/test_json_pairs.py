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


def test_an_aggregate_of_no_row_is_no_pair() -> None:
    assert json_pairs(None) == []
    assert json_pairs("[]") == []
    assert json_pairs('[[1, "b"], [0, "a"]]') == [(0, "a"), (1, "b")]
    assert json_pairs([[1, "b"], [0, "a"]]) == [(0, "a"), (1, "b")]
