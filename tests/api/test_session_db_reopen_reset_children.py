"""``reopen_session`` stamps ``_reset_from`` on the pre-marker reset children of the session it
reopens (iot 0.22.2's reopen; side by side in
``tests/hermes/test_real_iot_reopen_reset_children.py``), on SQLite and PostgreSQL: whatever a
child's ``model_config`` holds, the reopen goes on, a JSON object gets the marker and keeps
every key, anything else is left byte for byte."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessionstore.api.session_db import SessionDB

HYPOTHESIS = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
SET = ("UPDATE sessions SET started_at = :started, session_key = 'k', ended_at = :ended, "
       "end_reason = :reason, model_config = :config WHERE id = :id")  # fmt: skip
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=6,
)
CONFIGS = st.none() | st.text() | st.dictionaries(st.text(), JSON_VALUES).map(json.dumps)


def write(db: SessionDB, statement: str, **params: Any) -> None:
    db.store.write(lambda conn: conn.execute(sa.text(statement), params))


def test_a_hostile_config_never_stops_the_reopen_nor_loses_a_key(db: SessionDB) -> None:
    db.create_session("p", "telegram")
    db.create_session("c", "telegram", parent_session_id="p")
    # PostgreSQL's text refuses NUL outright, so no stored config there can hold one.
    configs = CONFIGS
    if db.store.dialect.name == "postgresql":
        configs = configs.filter(lambda config: config is None or "\x00" not in config)

    @HYPOTHESIS
    @given(config=configs)
    def check(config: str | None) -> None:
        write(db, SET, id="p", started=100.0, ended=200.0, reason="idle", config=None)
        write(db, SET, id="c", started=300.0, ended=None, reason=None, config=config)
        db.reopen_session("p")
        parent, child = db.get_session("p"), db.get_session("c")
        assert parent is not None and child is not None and parent["end_reason"] is None
        stored = db.store.read(lambda conn: conn.execute(
            sa.text("SELECT model_config FROM sessions WHERE id = 'c'")).scalar_one())  # fmt: skip
        try:
            before = json.loads(config) if config else {}
        except ValueError:
            before = None
        markers = ("_reset_from", "_branched_from", "_delegate_from")
        if isinstance(before, dict) and all(before.get(m) is None for m in markers):
            assert json.loads(stored) == {**before, "_reset_from": "p"}
        else:
            assert stored == config

    check()


def test_only_a_reset_boundary_parent_stamps_and_a_second_reopen_changes_nothing(
    db: SessionDB,
) -> None:
    db.create_session("p", "telegram")
    db.create_session("c", "telegram", parent_session_id="p")
    write(db, SET, id="c", started=300.0, ended=None, reason=None, config='{"a":1}')
    write(db, SET, id="p", started=100.0, ended=200.0, reason="agent_close", config=None)
    db.reopen_session("p")
    write(db, SET, id="p", started=100.0, ended=200.0, reason="daily", config=None)
    db.reopen_session("p")
    write(db, SET, id="p", started=100.0, ended=200.0, reason="daily", config=None)
    db.reopen_session("p")
    stored = db.store.read(lambda conn: conn.execute(
        sa.text("SELECT model_config FROM sessions WHERE id = 'c'")).scalar_one())  # fmt: skip
    assert stored == '{"a":1,"_reset_from":"p"}'
    db.reopen_session("nobody")  # an unknown id: nothing to stamp, nothing raised
