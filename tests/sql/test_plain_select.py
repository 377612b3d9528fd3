"""The one-table reads written as text (``statements.plain_select``) are the Core selects they
replace: the same SQL on both dialects, once the table prefixes (and psycopg's bind casts)
SQLAlchemy adds are dropped."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Dialect

from sessionstore.sessions import lifecycle
from sessionstore.sessions import messages as message_part
from sessionstore.sql.read_shape import FULL, ReadShape
from sessionstore.sql.records import CONVERSATION_FIELDS, MESSAGE_FIELDS, SESSION_FIELDS
from sessionstore.sql.statements import plain_select
from sessionstore.sql.tables import messages_table as messages
from sessionstore.sql.tables import sessions_table as sessions


def _core_messages(fields: tuple[str, ...], live_only: bool) -> sa.Select[Any]:
    condition = messages.c.session_id == sa.bindparam("session_id")
    if live_only:
        condition = condition & (messages.c.active == sa.literal_column("1"))
    return sa.select(*[messages.c[name] for name in fields]).where(condition).order_by(
        messages.c.id
    )


CASES: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
    ("session by id", lambda: lifecycle._session_by_id(FULL),
     # The prompt columns are read through system_prompts (``ReadShape.resolves``).
     lambda: sa.select(*FULL.columns(sessions, SESSION_FIELDS)).where(
         sessions.c.id == sa.bindparam("id"))),
    ("messages", lambda: message_part._messages_of_session(FULL),
     lambda: _core_messages(MESSAGE_FIELDS, live_only=False)),
    ("live messages", lambda: message_part._messages_of_session(FULL, live_only=True),
     lambda: _core_messages(MESSAGE_FIELDS, live_only=True)),
    ("conversation", lambda: message_part._conversation_of_session(FULL),
     lambda: _core_messages(CONVERSATION_FIELDS, live_only=False)),
    ("live conversation",
     lambda: message_part._conversation_of_session(FULL, live_only=True),
     lambda: _core_messages(CONVERSATION_FIELDS, live_only=True)),
]


def _normalized(statement: Any, dialect: Dialect) -> tuple[str, tuple[str, ...] | None]:
    compiled = statement.compile(dialect=dialect)
    sql = re.sub(r"\b(?:messages|sessions)\.", "", str(compiled))
    # psycopg's dialect casts Core's string binds; a text column compared with an untyped
    # parameter is the same comparison, on the same index.
    sql = sql.replace("::VARCHAR", "")
    positions = tuple(compiled.positiontup) if compiled.positional else None
    return " ".join(sql.split()), positions


@pytest.mark.parametrize("dialect", [sqlite.dialect(), postgresql.psycopg.dialect()],
                         ids=["sqlite", "postgresql"])
@pytest.mark.parametrize(("name", "as_text", "as_core"), CASES, ids=[case[0] for case in CASES])
def test_text_read_is_the_core_select(name: str, as_text: Callable[[], Any],
                                      as_core: Callable[[], Any], dialect: Dialect) -> None:
    assert _normalized(as_text(), dialect) == _normalized(as_core(), dialect)


def test_names_that_would_need_quoting_are_refused() -> None:
    table = sa.Table("t", sa.MetaData(), sa.Column("order", sa.Integer),
                     sa.Column("Mixed", sa.Integer), sa.Column("fine", sa.Integer))
    assert str(plain_select(table, ["fine"], "fine = :x")) == "SELECT fine FROM t WHERE fine = :x"
    for name in ("order", "Mixed"):
        with pytest.raises(ValueError, match="quoting"):
            plain_select(table, [name], "fine = :x")
    with pytest.raises(KeyError):
        plain_select(table, ["misspelt"], "fine = :x")


def test_a_column_the_store_lacks_is_selected_as_its_default() -> None:
    """A store read as it is (``sql.read_shape``): an absent later column reads as Hermes's
    default, in its place, so the record keeps its fields; the rest is unchanged."""
    shape = ReadShape(frozenset({("sessions", "display_name"), ("sessions", "expiry_finalized"),
                                 ("messages", "api_content")}))  # fmt: skip
    session_sql = str(lifecycle._session_by_id(shape))
    assert ", NULL AS display_name, " in session_sql and ", 0 AS expiry_finalized, " in session_sql
    assert session_sql.replace("NULL AS display_name", "display_name").replace(
        "0 AS expiry_finalized", "expiry_finalized") == str(lifecycle._session_by_id(FULL))
    assert str(message_part._messages_of_session(shape)).startswith("SELECT id, ")
    assert ", NULL AS api_content, display_kind, " in str(
        message_part._messages_of_session(shape)
    )


def test_a_store_without_system_prompts_reads_the_prompt_column_alone() -> None:
    """Before v25 (no ``system_prompts``, no hash column) the prompt is its column; from v25
    it is read through the table, the hash first (``ReadShape.resolves``)."""
    shape = ReadShape(frozenset({("sessions", "system_prompt_hash"), ("sessions", "tool_names")}),
                      frozenset({"system_prompts"}))  # fmt: skip
    old = str(lifecycle._session_by_id(shape))
    assert ", model_config, system_prompt, NULL AS system_prompt_hash, " in old
    assert "system_prompts" not in old and ", NULL AS tool_names FROM sessions " in old
    head = str(lifecycle._session_by_id(FULL))
    assert (", coalesce((SELECT system_prompts.prompt FROM system_prompts WHERE "
            "system_prompts.hash = sessions.system_prompt_hash), sessions.system_prompt) AS "
            "system_prompt, system_prompt_hash, ") in head  # fmt: skip
    assert ("system_prompts.hash = sessions.tool_names), sessions.tool_names) AS tool_names "
            "FROM sessions ") in head  # fmt: skip
