"""iot 0.22.2's latency-bounded recent browse (``list_recent_sessions_bounded``), its
``session_count(sources=...)`` and ``session_count_ge``, on SQLite and PostgreSQL: which
conversations are shown and as which tip, the row ceiling, the deadline (the dialect's
interrupt, always removed), and what hostile inputs give. The release itself is the oracle in
``tests/hermes/test_real_hermes_fork_files.py``; these pin the rules on both dialects.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text, update
from sqlalchemy.engine import Connection

from sessionstore.api.session_db import SessionDB
from sessionstore.sessions import recent
from sessionstore.sessions.recent import browse_bounds, browse_timeout
from sessionstore.sql.tables import messages_table as messages
from sessionstore.sql.tables import sessions_table as sessions

KEYS = [
    "id", "source", "model", "title", "started_at", "ended_at", "end_reason", "message_count",
    "tool_call_count", "last_active", "_lineage_root_id", "preview", "unread",
]  # fmt: skip


FAMILY: list[tuple[str, dict[str, Any]]] = [
    ("chain-root", {"title": "The chain", "end_reason": "compression"}),
    ("chain-tool", {"source": "tool", "parent_session_id": "chain-root"}),
    ("chain-mid", {"parent_session_id": "chain-root", "end_reason": "compression"}),
    ("chain-tip", {"parent_session_id": "chain-mid", "last_activity_at": 800.0}),
    ("fork-root", {"end_reason": "compression"}),
    ("fork-a", {"parent_session_id": "fork-root", "last_activity_at": 600.0}),
    ("fork-b", {"parent_session_id": "fork-root", "last_activity_at": 700.0}),
    ("fork-branch", {"parent_session_id": "fork-root",
                     "model_config": '{"_branched_from": "fork-root"}'}),
    ("reset-parent", {"end_reason": "session_reset"}),
    ("reset-child", {"parent_session_id": "reset-parent",
                     "model_config": '{"_reset_from": "reset-parent"}'}),
    ("plain", {"source": "telegram", "text": "line one\nline two " + "x" * 80}),
    ("delegate", {"parent_session_id": "plain", "model_config": '{"_delegate_from": "plain"}',
                  "last_activity_at": 9500.0}),
    ("archived", {"archived": 1, "last_activity_at": 9600.0}),
    ("hidden", {"hidden": 1, "last_activity_at": 9700.0}),
    ("cyc-a", {"end_reason": "compression"}),  # its parent, cyc-b, is set once both exist
    ("cyc-b", {"parent_session_id": "cyc-a", "end_reason": "compression"}),
]  # fmt: skip
"""Oldest first (started_at 100, 110, ...; each session's one user message a second later):

- ``chain-root`` (titled) -> ``chain-mid`` -> ``chain-tip``, ended ``compression`` each,
  with a tool run ``chain-tool`` under the root (never walked into);
- ``fork-root`` ended ``compression`` with two continuations, ``fork-a`` and the more
  recently active ``fork-b``, and a branch ``fork-branch`` (its own conversation);
- ``reset-parent`` ended ``session_reset`` and its marked reset child ``reset-child``;
- ``plain`` (a telegram session) and its delegate run ``delegate``;
- ``archived``, ``hidden``;
- ``cyc-a`` and ``cyc-b``, each the other's compression parent (a corrupt cycle).

Written as rows, in one transaction: the browse is under test here, not the writes."""


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=store_url)

    def write(conn: Connection) -> None:
        rows = []
        for index, (session_id, fields) in enumerate(FAMILY):
            row = {"id": session_id, "source": "cli", "started_at": 100.0 + 10 * index,
                   "message_count": 1, **fields}  # fmt: skip
            row.pop("text", None)
            rows.append(row)
        keys = sorted({key for row in rows for key in row})
        conn.execute(sessions.insert(), [
            {key: row.get(key, _DEFAULTS.get(key)) for key in keys} for row in rows
        ])  # fmt: skip
        conn.execute(messages.insert(), [
            {"session_id": session_id, "role": "user",
             "content": fields.get("text", f"hello from {session_id}"),
             "timestamp": 101.0 + 10 * index}
            for index, (session_id, fields) in enumerate(FAMILY)
        ])  # fmt: skip
        conn.execute(
            update(sessions).where(sessions.c.id == "cyc-a").values(parent_session_id="cyc-b")
        )

    database._repo.store.write(write)
    yield database
    database.close()


_DEFAULTS: dict[str, Any] = {"archived": 0, "hidden": 0, "source": "cli"}


def ids(rows: list[dict[str, Any]]) -> list[str]:
    return [row["id"] for row in rows]


def test_each_conversation_is_shown_once_as_its_freshest_tip_newest_first(db: SessionDB) -> None:
    rows = db.list_recent_sessions_bounded()
    assert ids(rows) == [
        "chain-tip", "fork-b", "plain", "reset-child", "reset-parent", "fork-branch"
    ]  # fmt: skip
    assert all(list(row) == KEYS for row in rows)
    tip = rows[0]
    # The tip's identity and counts, the root's start and (the tip has none) title.
    assert tip["_lineage_root_id"] == "chain-root" and tip["title"] == "The chain"
    assert tip["started_at"] == 100.0 and tip["last_active"] == 800.0
    assert tip["preview"] == "hello from chain-tip" and tip["unread"] is False
    assert rows[1]["_lineage_root_id"] == "fork-root" and rows[1]["last_active"] == 700.0
    plain = rows[2]
    assert plain["_lineage_root_id"] is None and plain["source"] == "telegram"
    assert plain["preview"] == ("line one line two " + "x" * 80)[:60] + "..."
    # No activity stamp: the newest message (started_at + 1) is the activity.
    assert rows[3]["last_active"] == rows[3]["started_at"] + 1


def test_limits_and_excluded_sources(db: SessionDB) -> None:
    assert ids(db.list_recent_sessions_bounded(limit=2)) == ["chain-tip", "fork-b"]
    assert ids(db.list_recent_sessions_bounded(limit=0)) == ["chain-tip"]  # at least one
    assert "plain" not in ids(db.list_recent_sessions_bounded(exclude_sources=["telegram"]))
    assert ids(db.list_recent_sessions_bounded(exclude_sources=[])) == ids(
        db.list_recent_sessions_bounded()
    )


def test_a_lineage_cut_by_the_row_ceiling_is_left_out(db: SessionDB) -> None:
    # Two candidates (chain-tip, fork-b) and room for two rows: neither ancestry reaches
    # its root, so neither conversation is shown half-resolved.
    assert db.list_recent_sessions_bounded(limit=1, candidate_limit=2, lineage_limit=2) == []
    # Room for the chain's three ancestors and their three-deep chain back down.
    shown = db.list_recent_sessions_bounded(limit=1, candidate_limit=1, lineage_limit=3)
    assert ids(shown) == ["chain-tip"]
    # One candidate, no room to walk: chain-tip's root is out of reach.
    assert db.list_recent_sessions_bounded(limit=1, candidate_limit=1, lineage_limit=1) == []


def test_browses_build_no_statement_after_the_first_of_their_shape(db: SessionDB) -> None:
    """Rebuilding the walk's aliases and the preview rule at every call cost ~20 ms a call
    (docs/performance.md, "The recent browse"): later browses, whatever their values, reuse
    the statements of the first."""
    builders = [getattr(recent, name) for name in dir(recent) if name.endswith("_statement")]
    assert len(builders) == 5
    first = db.list_recent_sessions_bounded(exclude_sources=["telegram"])
    db.list_recent_sessions_bounded()
    built = [builder.cache_info().misses for builder in builders]
    assert db.list_recent_sessions_bounded(exclude_sources=["telegram"]) == first
    db.list_recent_sessions_bounded(exclude_sources=["cron", "cli"], limit=1, candidate_limit=3)
    db.list_recent_sessions_bounded(limit=100, lineage_limit=9)
    assert [builder.cache_info().misses for builder in builders] == built


def test_the_cycle_is_never_shown_and_ends(db: SessionDB) -> None:
    everything = db.list_recent_sessions_bounded(limit=100)
    assert not {"cyc-a", "cyc-b"} & set(ids(everything))


def test_a_zero_timeout_always_times_out(db: SessionDB) -> None:
    with pytest.raises(TimeoutError):
        db.list_recent_sessions_bounded(timeout_seconds=0)
    with pytest.raises(TimeoutError):
        db.list_recent_sessions_bounded(timeout_seconds=-5)
    # The store is fine afterwards, and an endless deadline never passes.
    assert ids(db.list_recent_sessions_bounded(timeout_seconds=math.inf, limit=1)) == [
        "chain-tip"
    ]


def test_the_database_interrupts_a_running_statement_and_the_interrupt_goes(
    db: SessionDB,
) -> None:
    store = db._repo.store
    sqlite = store.dialect.name == "sqlite"
    heavy = (
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000000)"
        " SELECT count(*) FROM c"
        if sqlite
        else "SELECT pg_sleep(5)"
    )

    def past_deadline(conn: Connection) -> None:
        if not sqlite:
            conn.execute(text("SET LOCAL statement_timeout = '7s'"))
        with store.dialect.statement_deadline(conn, 0.0 if sqlite else 0.001) as deadline:
            if not sqlite:
                deadline.check()  # hands the server its 1 ms
            conn.execute(text(heavy))  # no check: the database itself must stop it

    with pytest.raises(TimeoutError):
        store.read(past_deadline)

    def within_deadline(conn: Connection) -> str:
        if not sqlite:
            conn.execute(text("SET LOCAL statement_timeout = '7s'"))
        with store.dialect.statement_deadline(conn, 60.0) as deadline:
            deadline.check()
            conn.execute(text("SELECT 1"))
        # The block put the transaction's own timeout back; the next statement runs free.
        small = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000)"
        conn.execute(text(f"{small} SELECT count(*) FROM c"))
        return "" if sqlite else str(
            conn.execute(text("SELECT current_setting('statement_timeout')")).scalar_one()
        )

    assert store.read(within_deadline) == ("" if sqlite else "7s")
    # SQLite: the reader connection that was interrupted has no handler left on it.
    for _ in range(3):
        assert store.read(lambda conn: conn.execute(text(
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 20000)"
            " SELECT count(*) FROM c"
        )).scalar_one()) == 20000  # fmt: skip


def test_session_count_by_sources_and_count_ge(db: SessionDB) -> None:
    assert db.session_count(sources=["telegram"]) == 1
    assert db.session_count(sources=["telegram", "tool"]) == 2
    assert db.session_count(sources=[]) == db.session_count()  # no filter
    assert db.session_count("cli", sources=["telegram"]) == db.session_count("cli")  # wins
    assert db.session_count(sources=["tool"], exclude_children=True) == 0
    with pytest.raises(TypeError):
        db.session_count(sources="telegram")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        db.session_count(sources=[1])  # type: ignore[list-item]
    total = db.session_count(include_archived=True)
    assert total == 16
    assert db.session_count_ge() and db.session_count_ge(total)
    assert not db.session_count_ge(total + 1)
    assert db.session_count_ge(0) and db.session_count_ge(-3)
    assert not db.session_count_ge(2**70)
    for bad in (1.0, "1", None, True):
        with pytest.raises(TypeError):
            db.session_count_ge(bad)  # type: ignore[arg-type]


def test_bounds_are_clamped_as_iot_clamps_them() -> None:
    assert browse_bounds(20, None, None) == (20, 160, 1280)
    assert browse_bounds(1, None, None) == (1, 128, 1024)
    assert browse_bounds(-7, None, None) == (1, 128, 1024)
    assert browse_bounds(500, None, None) == (500, 2048, 8192)
    assert browse_bounds(20, 10**9, 10**9) == (20, 2048, 8192)
    assert browse_bounds(20, 1, 1) == (20, 20, 20)  # never fewer than the rows asked
    assert browse_bounds(5000, None, None) == (5000, 5000, 8192)
    assert browse_bounds(2**80, None, None)[0] == 2**63 - 1
    assert browse_timeout(2**1100) == math.inf and browse_timeout(-(2**1100)) == 0.0
    assert browse_timeout(-1.5) == 0.0 and browse_timeout(2) == 2.0


@pytest.fixture
def empty_db(migrated_sqlite_url: str) -> Iterator[SessionDB]:
    with SessionDB(url=migrated_sqlite_url) as database:
        yield database


HOSTILE = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(limit=HOSTILE, candidates=HOSTILE, lineage=HOSTILE, timeout=HOSTILE, excluded=HOSTILE)
def test_hostile_inputs_give_a_typed_error_or_a_clamped_answer(
    empty_db: SessionDB, limit: Any, candidates: Any, lineage: Any, timeout: Any,
    excluded: Any,
) -> None:  # fmt: skip
    db = empty_db
    if True:
        try:
            rows = db.list_recent_sessions_bounded(
                limit=limit, candidate_limit=candidates, lineage_limit=lineage,
                timeout_seconds=timeout, exclude_sources=excluded,
            )  # fmt: skip
        except TypeError:
            typed = [
                isinstance(limit, int) and not isinstance(limit, bool),
                candidates is None or (isinstance(candidates, int)
                                       and not isinstance(candidates, bool)),
                lineage is None or (isinstance(lineage, int) and not isinstance(lineage, bool)),
                isinstance(timeout, (int, float)) and not isinstance(timeout, bool),
                excluded is None or (isinstance(excluded, list) and all(
                    isinstance(item, str) for item in excluded)),
            ]  # fmt: skip
            assert not all(typed)
            return
        except ValueError:
            assert (isinstance(timeout, float) and math.isnan(timeout)) or (
                isinstance(excluded, list) and any("\x00" in item for item in excluded))
            return
        except TimeoutError:
            # A finite deadline may pass on a loaded machine (a tiny positive one too); an
            # endless one never does.
            assert math.isfinite(browse_timeout(timeout))
            return
        assert rows == []  # an empty store, whatever the bounds
