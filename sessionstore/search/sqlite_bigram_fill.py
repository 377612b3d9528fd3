"""The CJK bigram index filled from the rows stored, as a rebuild or a repair fills it.

The index is contentless: each row's tokens must be the very ones its triggers compute
(:func:`.sqlite_ddl.row_grams`, plain SQL so that any program writing the file indexes alike),
or a later delete or update through the triggers takes out tokens the row does not hold. Run
per row with the text bound, that SQL costs ~100 µs a CJK row: a repair of a store in Chinese
held the write lock for minutes. For plain text (valid UTF-8, no NUL) the tokens are simply
every CJK character with the character after it (alone at the end of a column), computed here
with one regular expression; any other row (a BLOB, a number, a NUL, bytes that are not UTF-8)
still goes through the SQL with its values bound. Revision 0021's backfill does the same in its
frozen copy; ``tests/schema/test_revision_0021_backfill.py`` compares the fills' indexes whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any, Final

from sqlalchemy import text
from sqlalchemy.engine import Connection

from . import sqlite_ddl as ddl

_PAGE_ROWS: Final = 2000
# The triggers' WHEN, its cheap half in SQL (some column not ASCII, or holding a NUL, or a
# number or a BLOB: byte length != character length); the CJK test and the tokens in Python.
_ANY_NOT_ASCII: Final = " OR ".join(ddl.not_ascii(f"m.{column}") for column in ddl.INDEXED_COLUMNS)
_CANDIDATES: Final = (
    "SELECT m.id, "
    + ", ".join(f"typeof(m.{column}), CAST(m.{column} AS BLOB)" for column in ddl.INDEXED_COLUMNS)
    + f" FROM messages AS m WHERE m.id > :after AND ({_ANY_NOT_ASCII})"
    f" ORDER BY m.id LIMIT {_PAGE_ROWS}"
)
_ONE_ROW: Final = f"{ddl.BIGRAM_ROWS} AND m.id = :id"
_CJK_CHARACTER: Final = re.compile(ddl.CJK_CLASS)
# A lookahead, so the next match may start at the character after a CJK one.
_CJK_BIGRAM: Final = re.compile(f"(?=({ddl.CJK_CLASS}.?))", re.DOTALL)


def fill_bigrams(conn: Connection, table: str) -> None:
    """Empty ``table`` (the bigram index) and fill it from every row, in id order."""
    conn.exec_driver_sql(f"INSERT INTO {table}({table}) VALUES('delete-all')")
    # CAST(text AS BLOB) gives the file's encoding; the tokens below read it as UTF-8.
    plain_file = conn.exec_driver_sql("PRAGMA encoding").scalar() == "UTF-8"
    insert_grams = f"INSERT INTO {table}(rowid, grams) VALUES (?, ?)"
    for page in _candidate_pages(conn):
        batch: list[tuple[int, str]] = []
        for row in page:
            read = [_plain_text(row[i], row[i + 1]) if plain_file else None for i in (1, 3, 5)]
            texts = [value for value in read if value is not None]
            if len(texts) < len(read):
                if batch:  # the rows before it first: the table is filled in id order
                    conn.exec_driver_sql(insert_grams, batch)
                    batch = []
                _fill_one_by_sql(conn, row[0])
            elif any(_CJK_CHARACTER.search(value) for value in texts):
                batch.append((row[0], " ".join(_column_grams(value) for value in texts)))
        if batch:
            conn.exec_driver_sql(insert_grams, batch)


def _column_grams(value: str) -> str:
    """A plain column's tokens as :func:`.sqlite_ddl.row_grams` computes them ("" for none)."""
    return "" if value.isascii() else " ".join(_CJK_BIGRAM.findall(value))


def _plain_text(kind: str, stored: bytes | None) -> str | None:
    """A column read as (``typeof``, ``CAST AS BLOB``): its text when plain, ``""`` for NULL,
    None when only the SQL can say what it indexes."""
    if kind == "null":
        return ""
    if kind != "text" or stored is None or b"\0" in stored:
        return None
    try:
        return stored.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _candidate_pages(conn: Connection) -> Iterator[Sequence[Any]]:
    query, after = text(_CANDIDATES), -(2**63)
    while True:
        page = conn.execute(query, {"after": after}).all()
        if not page:
            return
        yield page
        after = page[-1][0]


def _fill_one_by_sql(conn: Connection, message_id: int) -> None:
    for found in conn.execute(text(_ONE_ROW), {"id": message_id}).all():
        values = dict(zip(("id", *ddl.INDEXED_COLUMNS), found, strict=True))
        conn.execute(text(ddl.BIGRAM_INSERT_ONE), values)
