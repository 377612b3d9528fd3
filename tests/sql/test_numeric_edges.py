"""Poisoned and extreme numbers (issue 10, items 3 and 4), on SQLite and PostgreSQL.

NaN and infinities are refused before they reach a total; integers are 64-bit on both
databases; an addition that would pass 2**63 - 1 is a clear ``ValueError`` and leaves the
counter, and its integer type, as it was. Revision 0009 widens PostgreSQL's counters.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_library import engine_like_the_store, plain_transaction

from sessionstore import Store, ValueOutOfRangeError
from sessionstore.api.session_db import SessionDB
from sessionstore.ops.transfer import copy_store
from sessionstore.schema import migrate
from sessionstore.sql import validation

INT64_MAX = 2**63 - 1
TOKEN_COLUMNS = (
    "input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
    "reasoning_tokens",
)  # fmt: skip
SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=store_url)
    database.create_session("s", "cli")
    yield database
    database.close()


def stored(db: SessionDB, column: str) -> tuple[object, str]:
    """The raw stored value of a sessions column, and its SQL type as the database sees it."""
    typeof = "typeof" if db.store.dialect.name == "sqlite" else "pg_typeof"
    with db.store.engine.connect() as conn:
        row = conn.execute(
            sa.text(f"SELECT {column}, CAST({typeof}({column}) AS TEXT) FROM sessions "
                    "WHERE id = 's'")
        ).one()
    return row[0], str(row[1])


# -- item 3: NaN and infinity --------------------------------------------------------------
NON_FINITE = [math.nan, math.inf, -math.inf]


@pytest.mark.parametrize("bad", NON_FINITE, ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("absolute", [False, True], ids=["delta", "absolute"])
@pytest.mark.parametrize("argument", ["estimated_cost_usd", "actual_cost_usd"])
def test_non_finite_cost_is_refused_and_the_total_kept(
    db: SessionDB, bad: float, absolute: bool, argument: str
) -> None:
    db.update_token_counts("s", estimated_cost_usd=1.25, actual_cost_usd=2.5)
    with pytest.raises(ValueError, match="finite"):
        db.update_token_counts("s", absolute=absolute, **{argument: bad})
    session = db.get_session("s")
    assert session is not None
    assert session["estimated_cost_usd"] == 1.25
    assert session["actual_cost_usd"] == 2.5


@given(value=st.floats(allow_nan=True, allow_infinity=True))
def test_optional_number_accepts_exactly_the_finite_floats(value: float) -> None:
    if math.isfinite(value):
        assert validation.optional_number(value, "x") == value
    else:
        with pytest.raises(ValueError):
            validation.optional_number(value, "x")


def test_huge_python_int_as_cost_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        validation.optional_number(10**400, "x")


@SETTINGS
@given(costs=st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), max_size=6))
def test_cost_total_is_always_finite_and_the_sum_of_accepted_costs(
    db: SessionDB, costs: list[float]
) -> None:
    db.update_token_counts("s", estimated_cost_usd=0.0, absolute=True)
    accepted = 0.0
    for cost in costs:
        try:
            db.update_token_counts("s", estimated_cost_usd=cost)
        except ValueError:
            continue
        accepted += cost
    value, _ = stored(db, "estimated_cost_usd")
    assert isinstance(value, float) and math.isfinite(value)
    assert value == pytest.approx(accepted, rel=1e-9, abs=1e-300)


# -- item 4: integer edges -------------------------------------------------------------------
@pytest.mark.parametrize("too_big", [2**63, -(2**63) - 1, 10**30])
def test_integer_beyond_64_bits_is_a_clear_value_error(db: SessionDB, too_big: int) -> None:
    with pytest.raises(ValueOutOfRangeError, match="64-bit"):
        db.update_token_counts("s", output_tokens=too_big)
    with pytest.raises(ValueError):
        db.append_message("s", "user", "hi", token_count=too_big)
    assert db.get_session("s")["output_tokens"] == 0  # type: ignore[index]
    assert db.message_count("s") == 0


@pytest.mark.parametrize("column", TOKEN_COLUMNS)
def test_two_additions_of_2_62_stay_an_integer(db: SessionDB, column: str) -> None:
    db.update_token_counts("s", **{column: 2**62})
    db.update_token_counts("s", **{column: 2**62 - 1})
    with pytest.raises(ValueOutOfRangeError):
        db.update_token_counts("s", **{column: 1})
    with pytest.raises(ValueOutOfRangeError):
        db.update_token_counts("s", **{column: 2**62})
    value, sql_type = stored(db, column)
    assert value == INT64_MAX and isinstance(value, int)
    assert sql_type in ("integer", "bigint")
    # The refused addition wrote nothing else either.
    db.update_token_counts("s", input_tokens=0)


@SETTINGS
@given(deltas=st.lists(st.integers(min_value=-(2**64), max_value=2**64), max_size=6))
def test_token_total_is_the_exact_sum_of_accepted_deltas(
    db: SessionDB, deltas: list[int]
) -> None:
    db.update_token_counts("s", cache_read_tokens=0, absolute=True)
    total = 0
    for delta in deltas:
        try:
            db.update_token_counts("s", cache_read_tokens=delta)
        except ValueError:
            assert not -(2**63) <= total + delta <= INT64_MAX or abs(delta) > INT64_MAX
            continue
        total += delta
    value, sql_type = stored(db, "cache_read_tokens")
    assert value == total and isinstance(value, int)
    assert sql_type in ("integer", "bigint")


def test_a_reset_total_takes_deltas_its_usage_row_cannot_hold(db: SessionDB) -> None:
    """The per-model usage row outlives an absolute reset (Hermes 0.19.0): a delta the
    session's reset total takes is taken, the row saturating (sessions/usage.py)."""
    db.update_token_counts("s", cache_read_tokens=INT64_MAX)
    db.update_token_counts("s", cache_read_tokens=0, absolute=True)
    db.update_token_counts("s", cache_read_tokens=1)
    assert stored(db, "cache_read_tokens")[0] == 1
    assert [row["cache_read_tokens"] for row in db.get_model_usage("s")] == [INT64_MAX]


def test_cache_reads_past_2_31_keep_updating(db: SessionDB) -> None:
    for _ in range(3):
        db.update_token_counts("s", cache_read_tokens=1_500_000_000)
    assert db.get_session("s")["cache_read_tokens"] == 4_500_000_000  # type: ignore[index]
    ids = db.append_messages("s", [{"role": "user", "content": "x", "token_count": 3 * 10**9}])
    assert db.get_messages("s")[0]["token_count"] == 3 * 10**9 and len(ids) == 1


def test_message_counter_at_its_limit_refuses_the_append(db: SessionDB) -> None:
    with db.store.engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE sessions SET message_count = {INT64_MAX}"))
    with pytest.raises(ValueOutOfRangeError):
        db.append_message("s", "user", "one too many")
    assert db.message_count("s") == 0
    value, sql_type = stored(db, "message_count")
    assert value == INT64_MAX and sql_type in ("integer", "bigint")


def test_copy_of_a_sqlite_store_holding_3e9_tokens(tmp_path: Path, store_url: str) -> None:
    source_url = f"sqlite:///{tmp_path}/source.db"
    with SessionDB(url=source_url) as source:
        source.create_session("big", "cli")
        source.update_token_counts("big", cache_read_tokens=3 * 10**9, input_tokens=2**40)
        source.append_message("big", "user", "hello", token_count=3 * 10**9)
    with Store.open(source_url) as source_store, Store.open(store_url) as target:
        result = copy_store(source_store, target)
    assert result.sessions == 1 and result.messages == 1
    with SessionDB(url=store_url) as target_db:
        session = target_db.get_session("big")
        assert session is not None
        assert session["cache_read_tokens"] == 3 * 10**9
        assert session["input_tokens"] == 2**40
        assert target_db.get_messages("big")[0]["token_count"] == 3 * 10**9


# -- revision 0009 on PostgreSQL ---------------------------------------------------------
def _column_types(conn: sa.Connection) -> dict[tuple[str, str], str]:
    rows = conn.execute(
        sa.text(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_name IN ('sessions', 'messages')"
        )
    ).all()
    return {(str(t), str(c)): str(d) for t, c, d in rows}


def pg_column_types(url: str) -> dict[tuple[str, str], str]:
    """Every column's type, read once (a new connection and an ``information_schema`` read
    each: the set comprehensions below used to ask again for every key)."""
    with plain_transaction(url) as conn:
        return _column_types(conn)


COUNTERS = [("sessions", name) for name in ("message_count", "tool_call_count", *TOKEN_COLUMNS)]
COUNTERS.append(("messages", "token_count"))


def pg_counter_types(url: str) -> set[str]:
    """The types of every counter of ``COUNTERS``."""
    types = pg_column_types(url)
    return {types[key] for key in COUNTERS}


def test_revision_0009_widens_every_postgresql_counter_and_narrows_back(
    empty_pg_url: str,
) -> None:
    migrate.upgrade(empty_pg_url, "0008")
    assert pg_counter_types(empty_pg_url) == {"integer"}
    with plain_transaction(empty_pg_url) as conn:
        conn.execute(sa.text("INSERT INTO sessions (id, source, started_at, input_tokens) "
                             "VALUES ('a', 'cli', 1, 7)"))
    migrate.upgrade(empty_pg_url)
    assert pg_counter_types(empty_pg_url) == {"bigint"}
    migrate.downgrade(empty_pg_url, "0008")
    assert pg_counter_types(empty_pg_url) == {"integer"}
    with plain_transaction(empty_pg_url) as conn:
        assert conn.execute(sa.text("SELECT input_tokens FROM sessions")).scalar_one() == 7


def test_revision_0009_downgrade_refuses_values_beyond_32_bits(fresh_migrated_pg_url: str) -> None:
    url = fresh_migrated_pg_url  # at head: a copy of the migrated template
    with SessionDB(url=url) as db:
        db.create_session("big", "cli")
        db.update_token_counts("big", cache_read_tokens=3 * 10**9)
    with pytest.raises(RuntimeError, match=r"sessions\.cache_read_tokens.*nothing was changed"):
        migrate.downgrade(url, "0008")
    # The whole downgrade is refused: the store is still at head (the later revisions' steps
    # down were rolled back with it).
    assert migrate.current(url) == migrate.HEAD_REVISION
    assert pg_counter_types(url) == {"bigint"}
    with SessionDB(url=url) as db:
        assert db.get_session("big")["cache_read_tokens"] == 3 * 10**9  # type: ignore[index]


@pytest.mark.parametrize(("below", "revision"), [("0008", "0009"), ("0022", "0023")])
def test_postgresql_only_revisions_change_nothing_on_sqlite(
    tmp_path: Path, below: str, revision: str
) -> None:
    """0009 (64-bit counters) and 0023 (64-bit message ids) are PostgreSQL's alone: SQLite's
    INTEGER already is 64 bits, and its DDL stays Hermes's."""
    url = f"sqlite:///{tmp_path}/s.db"
    migrate.upgrade(url, below)
    engine = engine_like_the_store(url)

    def ddl() -> list[str]:
        with engine.connect() as conn:
            return [str(row[0]) for row in conn.execute(
                sa.text("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name"))]

    before = ddl()
    migrate.upgrade(url, revision)
    assert ddl() == before
    migrate.downgrade(url, below)
    assert ddl() == before
    engine.dispose()



# -- revision 0023: 64-bit message ids on PostgreSQL ---------------------------------------
BIG_ID = 3 * 10**9


def pg_message_id_types(url: str) -> tuple[str, str]:
    """``messages.id``'s type and its sequence's."""
    with plain_transaction(url) as conn:
        sequence_type = conn.execute(
            sa.text(
                "SELECT data_type FROM pg_sequences "
                "WHERE sequencename = (SELECT split_part(pg_get_serial_sequence('messages', "
                "'id'), '.', 2))"
            )
        ).scalar_one()
        return _column_types(conn)[("messages", "id")], str(sequence_type)


def test_copy_of_a_sqlite_store_with_message_ids_past_2_31(tmp_path: Path, store_url: str) -> None:
    # SQLite never reuses a rowid: a long-lived file passes 2**31 ids without holding that
    # many rows. Its copy keeps the ids, and the next append gets a larger one.
    source_url = f"sqlite:///{tmp_path}/source.db"
    with SessionDB(url=source_url) as source:
        source.create_session("old", "cli")
        source.append_message("old", "user", "first words")
    with plain_transaction(source_url) as conn:
        conn.execute(
            sa.text(
                "INSERT INTO messages (id, session_id, role, content, timestamp) "
                "VALUES (:id, 'old', 'assistant', 'a reply far down the ids', 2.0)"
            ),
            {"id": BIG_ID},
        )
    with Store.open(source_url) as source_store, Store.open(store_url) as target:
        result = copy_store(source_store, target)
    assert result.messages == 2
    with SessionDB(url=store_url) as target_db:
        assert [m["id"] for m in target_db.get_messages("old")] == [1, BIG_ID]
        new_id = target_db.append_message("old", "user", "and after the copy")
        assert new_id > BIG_ID
        assert [hit["id"] for hit in target_db.search_messages("reply")] == [BIG_ID]


def test_revision_0023_widens_postgresql_message_ids_and_narrows_back(
    empty_pg_url: str,
) -> None:
    migrate.upgrade(empty_pg_url, "0022")
    assert pg_message_id_types(empty_pg_url) == ("integer", "integer")
    with SessionDB(url=empty_pg_url) as db:
        db.create_session("s", "cli")
        kept = db.append_message("s", "user", "kept through both steps")
    migrate.upgrade(empty_pg_url)
    assert pg_message_id_types(empty_pg_url) == ("bigint", "bigint")
    migrate.downgrade(empty_pg_url, "0022")
    assert pg_message_id_types(empty_pg_url) == ("integer", "integer")
    # Read as it is: at 0022 the store lacks the Hermes v18+ columns, which read as defaults.
    with SessionDB(url=empty_pg_url, read_only=True) as db:
        assert [m["id"] for m in db.get_messages("s")] == [kept]
        assert db.get_messages("s")[0]["content"] == "kept through both steps"
        assert db.get_messages("s")[0]["api_content"] is None


@pytest.mark.parametrize("where", ["row", "sequence"])
def test_revision_0023_downgrade_refuses_ids_beyond_32_bits(
    fresh_migrated_pg_url: str, where: str
) -> None:
    url = fresh_migrated_pg_url  # at head: a copy of the migrated template
    with SessionDB(url=url) as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", "small id")
    with plain_transaction(url) as conn:
        if where == "row":
            conn.execute(
                sa.text(
                    "INSERT INTO messages (id, session_id, role, content, timestamp) "
                    "VALUES (:id, 's', 'user', 'big id', 2.0)"
                ),
                {"id": BIG_ID},
            )
        else:
            conn.execute(
                sa.text("SELECT setval(pg_get_serial_sequence('messages', 'id'), :id)"),
                {"id": BIG_ID},
            )
    with pytest.raises(RuntimeError, match=r"below revision 0023.*nothing was changed"):
        migrate.downgrade(url, "0022")
    assert migrate.current(url) == migrate.HEAD_REVISION
    assert pg_message_id_types(url) == ("bigint", "bigint")
