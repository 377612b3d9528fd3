"""Message rows as any program may have stored them, for comparing index fills.

Text mixing CJK of 3 and 4 UTF-8 bytes across the 96-byte chunk edges of revision 0021's token
SQL with ASCII, other scripts, NUL and the code points around the surrogates and at the ends
of the CJK ranges; numbers; BLOBs; TEXT holding bytes that are not UTF-8 (encoded surrogates,
overlong and cut sequences), which only a program other than Python can write.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import sqlalchemy as sa
from hypothesis import strategies as st

from sessionstore.dialects.sqlite_library import library

MESSAGES_DDL = (
    "CREATE TABLE messages (id INTEGER PRIMARY KEY, content TEXT, tool_name TEXT, "
    "tool_calls TEXT)"
)
# CJK of 3 and 4 UTF-8 bytes, Hangul (U+1100, U+D7FF), the edges of the CJK ranges and what
# lies next to them (U+E000 after the surrogates, U+FFEF..U+FFFF, U+40000), full-width forms,
# other multi-byte text, ASCII a token may join ("数a" is one token, "数," is "数"), NUL and runs
# long enough that characters straddle the 96-byte chunk edges in every way.
PIECES = [
    "数", "据库", "迁移", "検索", "세션", "ｄａｔａ", "Ａ", "𠀀", "𪚥", "\U0003ffff", "\U00040000",
    "\u1100", "\u11ff", "\u10ff", "\ud7ff", "\ue000", "\uffef", "\ufffd", "\uffff", "é", "😀",
    "ß", "a", "B ", "\n", ",", "\x00", "x" * 37, "数据库" * 11, "é" * 47, "数x" * 20, "😀" * 23,
]  # fmt: skip
# Bytes stored as they are: CJK, an encoded surrogate (U+D800, U+DFFF), an overlong NUL, a cut
# CJK character, stray continuation and lead bytes.
RAW_PIECES = [
    "数据".encode(), b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xc0\x80", b"\xe6\x95", b"\x80",
    b"\xe4", b"\xff", b"\x00", b"a", "𠀀".encode(),
]  # fmt: skip


class Raw(NamedTuple):
    """A value stored as a BLOB, or as TEXT holding exactly these bytes (``CAST(? AS TEXT)``)."""

    data: bytes
    as_text: bool


Value = str | int | Raw | None
Row = tuple[Value, Value, Value]
texts = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=30).map("".join),
    st.text(st.characters(codec="utf-8"), max_size=120),
)
raws = st.builds(Raw, st.lists(st.sampled_from(RAW_PIECES), max_size=12).map(b"".join),
                 st.booleans())  # fmt: skip
values: st.SearchStrategy[Value] = st.one_of(
    st.none(), texts, texts, texts, st.integers(-5, 10**12), raws
)
rows: st.SearchStrategy[list[Row]] = st.lists(
    st.tuples(values, values, values), min_size=1, max_size=8
)


@contextmanager
def memory_store(stored: list[Row]) -> Iterator[sa.Connection]:
    """An in-memory database on the stores' SQLite library, its ``messages`` holding
    ``stored`` (ids 1, 2, ...), in an open transaction."""
    engine = sa.create_engine("sqlite://", module=library().module)
    try:
        with engine.connect() as conn, conn.begin():
            conn.exec_driver_sql(MESSAGES_DDL)
            for number, row in enumerate(stored, start=1):
                slots, params = [], [number]
                for value in row:
                    if isinstance(value, Raw):
                        slots.append("CAST(? AS TEXT)" if value.as_text else "?")
                        params.append(value.data)
                    else:
                        slots.append("?")
                        params.append(value)
                conn.exec_driver_sql(
                    f"INSERT INTO messages VALUES (?, {', '.join(slots)})", tuple(params)
                )
            yield conn
    finally:
        engine.dispose()


