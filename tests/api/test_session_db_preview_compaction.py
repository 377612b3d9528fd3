"""A session's preview skips compaction summaries as iot 0.22.2's does (issue 29), on SQLite
and PostgreSQL, in ``list_sessions_rich`` and the bounded browse alike
(``listing.first_user_text``); the last test asks the real iot wheel the same."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from real_hermes import RealHermesFork
from real_hermes_driver import SQL_STEP

from sessionstore.api.session_db import SessionDB
from sessionstore.sessions.listing import SUMMARY_SIGN
from sessionstore.sql.compaction_handoff import (
    MERGED_PRIOR_CONTEXT_HEADER,
    MERGED_SUMMARY_DELIMITER,
    PREVIEW_SUMMARY_PREFIXES,
    SUMMARY_END_MARKER,
    SUMMARY_OPENING,
    SUMMARY_PREFIXES,
)

LONG, LEGACY = PREVIEW_SUMMARY_PREFIXES
Step = tuple[str, list[Any], dict[str, Any]]


def say(session_id: str, text: str, at: float, role: str = "user") -> Step:
    return ("append_message", [session_id, role, text], {"timestamp": at})


SCENARIO: list[Step] = [
    *[("create_session", [sid, "cli"], {}) for sid in
      ("plain", "summary-only", "forced", "merged", "merged-empty", "hidden", "legacy",
       "indented", "bracketed")],
    say("plain", "just a question\nwith two lines", 1.0),
    say("summary-only", LONG + "Do NOT answer ... the summary", 1.0),
    say("summary-only", "the first real question", 2.0),
    say("forced", f"{LONG}the summary\n{SUMMARY_END_MARKER}\n\n  keep going please", 1.0),
    say("merged", f"{MERGED_PRIOR_CONTEXT_HEADER}\n  earlier words\n{MERGED_SUMMARY_DELIMITER}"
                  f"\n{LEGACY} the summary", 1.0),
    say("merged-empty", f"{MERGED_PRIOR_CONTEXT_HEADER}\n \n{MERGED_SUMMARY_DELIMITER}\n"
                        f"{LONG}the summary", 1.0),
    say("merged-empty", "after the merge", 2.0),
    say("hidden", "scaffolding nobody sees", 1.0),
    say("hidden", "what the user typed", 2.0),
    (SQL_STEP, ["UPDATE messages SET display_kind = 'hidden' "
                "WHERE content = 'scaffolding nobody sees'"], {}),
    say("legacy", f"{LEGACY} old summary, {SUMMARY_END_MARKER}   ", 1.0),
    say("indented", f" \t\n{LEGACY} x {SUMMARY_END_MARKER} after", 1.0),
    # Holds SUMMARY_SIGN without being a summary: the rules' long way round, to the same text.
    say("bracketed", "  see [this] and [CONTEXT] first\r\n", 1.0),
]  # fmt: skip
EXPECTED = {
    "plain": "just a question with two lines",
    "summary-only": "the first real question",
    "forced": "keep going please",
    "merged": "earlier words",
    "merged-empty": "after the merge",
    "hidden": "what the user typed",
    "legacy": "",
    "indented": "after",
    "bracketed": "see [this] and [CONTEXT] first",
}


def play(db: SessionDB) -> None:
    for name, args, kwargs in SCENARIO:
        if name == SQL_STEP:
            db.store.write(lambda conn, a=args: conn.exec_driver_sql(a[0]))
        else:
            getattr(db, name)(*args, **kwargs)


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=store_url)
    play(database)
    yield database
    database.close()


def previews(rows: list[dict[str, Any]]) -> dict[str, str]:
    return {row["id"]: row["preview"] for row in rows}


def test_every_summary_form_holds_the_summary_sign() -> None:
    # The preview decides a text without the sign is no summary, in one search.
    forms = (*PREVIEW_SUMMARY_PREFIXES, *SUMMARY_PREFIXES, MERGED_SUMMARY_DELIMITER)
    assert all(SUMMARY_SIGN in form for form in forms)


def test_the_preview_rule_knows_every_prefix_iot_recognises() -> None:
    # The SQL compares the two short openings only; every full prefix (current, legacy,
    # historical) opens with one of them, so no summary iot's Python knows escapes it.
    assert all(prefix.startswith(PREVIEW_SUMMARY_PREFIXES) for prefix in SUMMARY_PREFIXES)
    # ... and every opening starts with the cheap prefilter the user-turn reader uses.
    assert all(form.startswith(SUMMARY_OPENING)
               for form in (*PREVIEW_SUMMARY_PREFIXES, *SUMMARY_PREFIXES))  # fmt: skip


def test_the_preview_skips_compaction_summaries(db: SessionDB) -> None:
    assert previews(db.list_sessions_rich()) == EXPECTED
    assert previews(db.list_sessions_rich(order_by_last_active=True)) == EXPECTED
    assert previews(db.list_recent_sessions_bounded(limit=20)) == {
        key: value for key, value in EXPECTED.items()}  # fmt: skip


@pytest.mark.slow  # the real iot runs in a side interpreter
def test_the_preview_matches_iot(tmp_path: Any, db: SessionDB) -> None:
    hermes = RealHermesFork("iot-0.22.2", tmp_path / "home")
    theirs = hermes.calls(tmp_path / "preview.db", [*SCENARIO, ("list_sessions_rich", [], {})])
    assert previews(theirs[-1]) == EXPECTED == previews(db.list_sessions_rich())
