"""Hermes 0.18's later methods through the facade, on SQLite and PostgreSQL.

Listing and lineage (``resolve_resume_session_id``, ``get_messages_around``,
``get_anchored_view``, ``search_sessions_by_id``, ``list_cron_job_runs``), cleanup
(``finalize_orphaned_compression_sessions``, ``count_empty_sessions``,
``delete_empty_sessions``, the ``sessions_dir`` of every delete), maintenance (``optimize_fts``,
``vacuum``, ``maybe_auto_prune_and_vacuum``), and the arguments Hermes 0.18 names differently
(``cooldown_until``, ``cwd_to_root``, the keywords of ``create_session``/``ensure_session``).
Every public method of the newest Hermes's ``SessionDB`` (hermes-agent 0.19.0; its source, read
with ``ast``) is checked to exist here with arguments a Hermes caller can use (its 0.18.1 and
0.19.0 methods are tested in ``tests/api/test_session_db_hermes_019_methods.py``). Rules are
tables of cases; hostile inputs are property tests. The same operations side by side with the
real Hermes are in ``tests/hermes/test_real_hermes_methods.py``.
"""

from __future__ import annotations

import ast
import inspect
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st
from store_library import connect_like_the_store, needs_wal
from test_lookup_inputs import HOSTILE, SETTINGS

from sessionstore.api.async_session_db import AsyncSessionDB
from sessionstore.api.session_db import SessionDB
from sessionstore.errors import ReadOnlyStoreError, UnknownSessionError
from sessionstore.hermes import state as hermes_state

NOW = time.time()
DAY = 86_400.0


def execute(db: SessionDB, sql: str, **params: Any) -> None:
    db.store.write(lambda conn: conn.execute(sa.text(sql), params))


def session(
    db: SessionDB,
    session_id: str,
    *,
    started_at: float = NOW - 10 * DAY,
    parent: str | None = None,
    model_config: dict[str, Any] | None = None,
    source: str = "cli",
    ended_at: float | None = None,
    end_reason: str | None = None,
    title: str | None = None,
    archived: int = 0,
    api_call_count: int = 0,
) -> None:
    db.create_session(session_id, source, model_config=model_config, parent_session_id=parent)
    execute(
        db,
        "UPDATE sessions SET started_at = :s, ended_at = :e, end_reason = :r, title = :t, "
        "archived = :a, api_call_count = :c WHERE id = :id",
        s=started_at, e=ended_at, r=end_reason, t=title, a=archived, c=api_call_count,
        id=session_id,
    )  # fmt: skip


def say(db: SessionDB, session_id: str, *texts: str, role: str = "user") -> list[int]:
    return [db.append_message(session_id, role, text) for text in texts]


def ids_of(rows: list[dict[str, Any]]) -> list[Any]:
    return [row["id"] for row in rows]


def all_ids(db: SessionDB) -> set[str]:
    return {row["id"] for row in db.search_sessions(limit=10_000)}


# -- the surface: every Hermes 0.18 method, with arguments a Hermes caller can use ----------

OUT_OF_SCOPE: set[str] = set()
"""Hermes 0.19 methods we do not carry (none since the Telegram topic methods landed)."""
V6_POSITIONAL_ORDER = {"append_message", "list_sessions_rich", "session_count"}
"""Hermes 0.18 and 0.19 put new arguments between v6's (``reasoning_content`` before
``reasoning_details``, ``cwd_prefix`` third in the listing, ``effect_disposition`` before
``timestamp``); ours keeps v6's order (SPEC §5) and appends the new ones, so only keyword
callers of those are served (Hermes's are)."""


PARITY_RELEASE = "0.19.0"
"""The newest hermes-agent on PyPI (schema v22, our head): every public method of its
``SessionDB`` is ours."""


def hermes_methods() -> dict[str, ast.FunctionDef]:
    from real_hermes import hermes_root

    source = (hermes_root(PARITY_RELEASE) / "hermes_state.py").read_text()
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SessionDB")
    return {
        node.name: node
        for node in cls.body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
    }


def hermes_parameters(node: ast.FunctionDef) -> list[tuple[str, str, Any]]:
    """``(name, kind, default)`` of each parameter (``kind``: positional, keyword, ``**``);
    ``default`` is ``inspect.Parameter.empty`` for a required one."""
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    defaults = [inspect.Parameter.empty] * (len(positional) - len(args.defaults)) + [
        ast.literal_eval(default) for default in args.defaults
    ]
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)
    found = [(p.arg, "positional", d) for p, d in zip(positional, defaults, strict=True)]
    if not static:
        found = found[1:]
    found += [
        (p.arg, "keyword", inspect.Parameter.empty if d is None else ast.literal_eval(d))
        for p, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
    ]
    if args.kwarg is not None:
        found.append((args.kwarg.arg, "**", inspect.Parameter.empty))
    return found


def signature_problems(ours: Any, theirs: list[tuple[str, str, Any]], name: str) -> list[str]:
    parameters = [p for p in inspect.signature(ours).parameters.values() if p.name != "self"]
    by_name = {p.name: p for p in parameters}
    positional = [
        p.name for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]  # fmt: skip
    problems = []
    for index, (pname, kind, default) in enumerate(theirs):
        if kind == "**":
            if not any(p.kind is p.VAR_KEYWORD for p in parameters):
                problems.append(f"{name}: takes no **{pname}")
            continue
        mine = by_name.get(pname)
        if mine is None or mine.kind is mine.POSITIONAL_ONLY:
            problems.append(f"{name}: no keyword {pname!r}")
            continue
        if (
            kind == "positional"
            and name not in V6_POSITIONAL_ORDER
            and (index >= len(positional) or positional[index] != pname)
        ):
            problems.append(f"{name}: {pname!r} is not positional argument {index + 1}")
        if default is not inspect.Parameter.empty and mine.default != default:
            problems.append(f"{name}: {pname}={mine.default!r}, Hermes {default!r}")
    known = {pname for pname, _, _ in theirs}
    for mine in parameters:
        if mine.name not in known and mine.default is mine.empty and mine.kind not in (
            mine.VAR_KEYWORD, mine.VAR_POSITIONAL
        ):
            problems.append(f"{name}: requires {mine.name!r}, which Hermes does not pass")
    return problems


@pytest.mark.parametrize("cls", [SessionDB, hermes_state.SessionDB, AsyncSessionDB],
                         ids=["facade", "hermes_state", "async"])  # fmt: skip
def test_every_hermes_019_method_is_there_with_hermes_arguments(cls: type) -> None:
    methods = hermes_methods()
    missing = sorted(set(methods) - OUT_OF_SCOPE - set(dir(cls)))
    assert missing == []
    problems = []
    for name, node in methods.items():
        if name in OUT_OF_SCOPE or name == "close":
            continue
        problems += signature_problems(getattr(cls, name), hermes_parameters(node), name)
    assert problems == []


def test_the_signature_check_catches_a_renamed_or_missing_argument() -> None:
    def renamed(self: Any, session_id: str, until: float, error: str | None = None) -> None:
        """The facade's signature before this work."""

    def no_sessions_dir(self: Any, session_id: str) -> bool:
        return False

    node = hermes_methods()
    assert signature_problems(
        renamed, hermes_parameters(node["record_compression_failure_cooldown"]), "x"
    )
    assert signature_problems(no_sessions_dir, hermes_parameters(node["delete_session"]), "x")


# -- create_session / ensure_session keywords ------------------------------------------------

HERMES_SESSION_KEYWORDS = {
    "model": "claude", "model_config": {"temperature": 0.2}, "system_prompt": "be brief",
    "user_id": "alice", "session_key": "agent:main:tg:dm:1", "chat_id": "42", "chat_type": "dm",
    "thread_id": "7", "parent_session_id": "parent", "cwd": "/w/app",
}  # fmt: skip
"""Every keyword Hermes 0.18's ``_insert_session_row`` takes, with a value."""
FILLED_LATER = set(HERMES_SESSION_KEYWORDS) - {"user_id"}
"""What a second create fills in an existing session still lacking it (Hermes's COALESCE
upsert); ``user_id`` and ``source`` are never changed."""


def stored(value: Any) -> Any:
    return json.dumps(value) if isinstance(value, dict) else value


@pytest.mark.parametrize("method", ["create_session", "ensure_session"])
@pytest.mark.parametrize("keyword", sorted(HERMES_SESSION_KEYWORDS))
def test_each_hermes_session_keyword_is_stored(db: SessionDB, method: str, keyword: str) -> None:
    db.create_session("parent", "cli")
    value = HERMES_SESSION_KEYWORDS[keyword]
    assert getattr(db, method)("s", "telegram", **{keyword: value}) == "s"
    assert db.get_session("s")[keyword] == stored(value)  # type: ignore[index]


@pytest.mark.parametrize("method", ["create_session", "ensure_session"])
@pytest.mark.parametrize("keyword", sorted(HERMES_SESSION_KEYWORDS))
def test_a_second_create_fills_only_what_is_missing(
    db: SessionDB, method: str, keyword: str
) -> None:
    db.create_session("parent", "cli")
    db.create_session("other", "cli")
    db.create_session("s", "telegram")
    value = HERMES_SESSION_KEYWORDS[keyword]
    getattr(db, method)("s", "cli", **{keyword: value})
    row = db.get_session("s")
    assert row is not None and row["source"] == "telegram"
    assert row[keyword] == (stored(value) if keyword in FILLED_LATER else None)
    # A value already there is never overwritten.
    other = "other" if keyword == "parent_session_id" else (
        {"x": 1} if keyword == "model_config" else "second"
    )
    getattr(db, method)("s", "cli", **{keyword: other})
    assert db.get_session("s")[keyword] == row[keyword]  # type: ignore[index]


def test_an_unknown_parent_is_a_typed_error(db: SessionDB) -> None:
    with pytest.raises(UnknownSessionError):
        db.ensure_session("s", parent_session_id="nobody")
    assert db.get_session("s") is None


def test_renamed_arguments_are_taken_by_hermes_names(db: SessionDB) -> None:
    db.create_session("s", "cli")
    db.record_compression_failure_cooldown("s", cooldown_until=NOW + DAY, error="timeout")
    assert db.get_compression_failure_cooldown("s")["error"] == "timeout"  # type: ignore[index]
    db.update_session_cwd("s", "/w/app")
    db.create_session("t", "cli", cwd="")
    assert db.backfill_repo_roots(cwd_to_root={"/w/app": "/w", "": "/nowhere"}) == 1
    assert db.get_session("s")["git_repo_root"] == "/w"  # type: ignore[index]
    assert db.get_session("t")["git_repo_root"] is None  # type: ignore[index]


# -- resolve_resume_session_id ---------------------------------------------------------------

# (sessions: id -> fields, messages: ids holding messages, start, expected)
RESUME_CASES = [
    pytest.param({"a": {}}, {"a"}, "a", "a", id="lone-session"),
    pytest.param({"a": {}}, set(), "a", "a", id="lone-empty-session"),
    pytest.param({}, set(), "ghost", "ghost", id="unknown-id-as-given"),
    pytest.param({"a": {"end_reason": "compression"}, "b": {"parent": "a"}}, {"a", "b"}, "a",
                 "b", id="compression-continuation"),
    pytest.param({"a": {"end_reason": "compression"}, "b": {"parent": "a"}}, {"a"}, "a", "b",
                 id="empty-continuation-is-the-tip"),
    pytest.param({"a": {"end_reason": "compression"}, "b": {"parent": "a",
                 "end_reason": "compression"}, "c": {"parent": "b"}}, {"a", "b", "c"}, "a", "c",
                 id="chain-of-three"),
    pytest.param({"a": {"end_reason": "compression", "ended_at": NOW},
                  "b": {"parent": "a", "started_at": NOW - 5}}, {"b"}, "a", "b",
                 id="continuation-started-before-the-parent-ended"),
    pytest.param({"a": {"end_reason": "compression"},
                  "live": {"parent": "a", "started_at": NOW - 9 * DAY},
                  "stale": {"parent": "a", "started_at": NOW - 8 * DAY, "ended_at": NOW,
                            "end_reason": "ws_orphan_reap"}}, {"live", "stale"}, "a", "live",
                 id="live-continuation-beats-a-newer-stale-sibling"),
    pytest.param({"a": {"end_reason": "branched"},
                  "b": {"parent": "a", "model_config": {"_branched_from": "a"}}}, {"a", "b"},
                 "a", "a", id="branch-not-followed"),
    pytest.param({"a": {"end_reason": "compression"},
                  "d": {"parent": "a", "model_config": {"_delegate_from": "a"}}}, {"a", "d"},
                 "a", "a", id="delegate-not-followed"),
    pytest.param({"a": {"end_reason": "compression"}, "t": {"parent": "a", "source": "tool"}},
                 {"a", "t"}, "a", "a", id="tool-run-not-followed"),
    pytest.param({"a": {}, "b": {"parent": "a"}}, {"a", "b"}, "a", "b",
                 id="untagged-child-of-a-live-session-is-walked"),
    pytest.param({"a": {}, "b": {"parent": "a"}, "c": {"parent": "b"}}, {"a", "b"}, "a", "b",
                 id="deepest-with-messages"),
    pytest.param({"a": {}, "b": {"parent": "a", "started_at": NOW - 9 * DAY},
                  "c": {"parent": "a", "started_at": NOW - 8 * DAY}}, {"b"}, "a", "a",
                 id="newest-child-only"),
]  # fmt: skip


def build_family(db: SessionDB, family: dict[str, dict[str, Any]], talking: set[str]) -> None:
    for session_id, fields in family.items():
        session(db, session_id, **fields)
    for session_id in sorted(talking):
        say(db, session_id, f"hello from {session_id}")


@pytest.mark.parametrize(("family", "talking", "start", "expected"), RESUME_CASES)
def test_resume_lands_where_hermes_lands(
    db: SessionDB, family: dict[str, dict[str, Any]], talking: set[str], start: str,
    expected: str,
) -> None:  # fmt: skip
    build_family(db, family, talking)
    assert db.resolve_resume_session_id(start) == expected


def test_resume_survives_a_parent_cycle(db: SessionDB) -> None:
    session(db, "a", end_reason="compression")
    session(db, "b", parent="a", end_reason="compression")
    execute(db, "UPDATE sessions SET parent_session_id = 'b' WHERE id = 'a'")
    say(db, "a", "x")
    assert db.resolve_resume_session_id("a") in {"a", "b"}
    assert db.resolve_resume_session_id("b") in {"a", "b"}


@pytest.mark.parametrize("value", ["", None, 0, "a\x00", "\ud800", 3.5])
def test_resume_gives_an_unusable_id_back_as_it_was(db: SessionDB, value: Any) -> None:
    assert db.resolve_resume_session_id(value) == value


# -- get_messages_around / get_anchored_view ------------------------------------------------


@pytest.fixture
def talk(db: SessionDB) -> tuple[SessionDB, list[int]]:
    """Ten messages (u0 a1 u2 ... a9), tool calls on a3, a tool result t4 instead of u4."""
    db.create_session("s", "cli")
    db.create_session("other", "cli")
    ids = []
    for index in range(10):
        role = "user" if index % 2 == 0 else "assistant"
        if index == 4:
            ids.append(db.append_message("s", "tool", "result 4", tool_call_id="c1"))
        elif index == 3:
            ids.append(db.append_message(
                "s", role, "", tool_calls=[{"id": "c1", "type": "function",
                                            "function": {"name": "f", "arguments": "{}"}}],
            ))  # fmt: skip
        else:
            ids.append(db.append_message("s", role, f"m{index}"))
    say(db, "other", "elsewhere")
    return db, ids


# (anchor index, window) -> (indexes in the window, before, after)
AROUND_CASES = [
    pytest.param(5, 2, [3, 4, 5, 6, 7], 2, 2, id="middle"),
    pytest.param(0, 2, [0, 1, 2], 0, 2, id="session-start"),
    pytest.param(9, 3, [6, 7, 8, 9], 3, 0, id="session-end"),
    pytest.param(5, 0, [5], 0, 0, id="window-zero"),
    pytest.param(5, -4, [5], 0, 0, id="negative-window-is-zero"),
    pytest.param(5, 50, list(range(10)), 5, 4, id="window-wider-than-the-session"),
]


@pytest.mark.parametrize(("anchor", "window", "expected", "before", "after"), AROUND_CASES)
def test_messages_around(
    talk: tuple[SessionDB, list[int]], anchor: int, window: int, expected: list[int],
    before: int, after: int,
) -> None:  # fmt: skip
    db, ids = talk
    view = db.get_messages_around("s", ids[anchor], window=window)
    assert ids_of(view["window"]) == [ids[index] for index in expected]
    assert (view["messages_before"], view["messages_after"]) == (before, after)
    assert view["window"] == [
        row for row in db.get_messages("s", include_inactive=True) if row["id"] in
        {ids[index] for index in expected}
    ]  # every key get_messages has, decoded as there


def test_messages_around_include_rewound_rows(talk: tuple[SessionDB, list[int]]) -> None:
    db, ids = talk
    db.rewind_to_message("s", ids[6])
    assert ids_of(db.get_messages_around("s", ids[8], window=1)["window"]) == ids[7:10]


@pytest.mark.parametrize(
    ("session_id", "anchor"),
    [("s", 10**6), ("other", 0), ("nobody", 0), ("s", 2**64), ("s", -1), ("s\x00", 0)],
    ids=["unknown-id", "another-session", "unknown-session", "beyond-64-bits", "negative",
         "nul"],
)  # fmt: skip
def test_an_anchor_not_in_the_session_gives_an_empty_view(
    talk: tuple[SessionDB, list[int]], session_id: str, anchor: int
) -> None:
    db, ids = talk
    anchor = ids[0] if anchor == 0 else anchor
    empty = {"window": [], "messages_before": 0, "messages_after": 0}
    assert db.get_messages_around(session_id, anchor) == empty
    assert db.get_anchored_view(session_id, anchor) == {
        **empty, "bookend_start": [], "bookend_end": []
    }


@pytest.mark.parametrize("anchor", ["3", 2.0, None, True])
def test_an_anchor_that_is_not_an_int_is_a_type_error(
    talk: tuple[SessionDB, list[int]], anchor: Any
) -> None:
    db, _ = talk
    with pytest.raises(TypeError):
        db.get_messages_around("s", anchor)


# (anchor, window, bookend, keep_roles) -> (window, bookend_start, bookend_end) as indexes
ANCHORED_CASES = [
    pytest.param(5, 1, 2, ("user", "assistant"), [5, 6], [0, 1], [8, 9],
                 id="tool-result-and-empty-turns-left-out"),
    pytest.param(4, 1, 3, ("user", "assistant"), [3, 4, 5], [0, 1, 2], [7, 8, 9],
                 id="anchor-kept-whatever-its-role"),
    pytest.param(5, 1, 2, None, [4, 5, 6], [0, 1], [8, 9], id="no-role-filter"),
    pytest.param(5, 1, 2, ("user",), [5, 6], [0, 2], [8], id="users-only"),
    pytest.param(5, 1, 2, (), [5], [], [], id="no-roles-anchor-only"),
    pytest.param(1, 1, 3, ("user", "assistant"), [0, 1, 2], [], [7, 8, 9],
                 id="window-at-the-head-has-no-start-bookend"),
    pytest.param(5, 20, 3, ("user", "assistant"), [0, 1, 2, 3, 5, 6, 7, 8, 9], [], [],
                 id="window-covers-the-session"),
    pytest.param(8, 1, 4, ("user", "assistant"), [7, 8, 9], [0, 1, 2, 5], [],
                 id="empty-turn-never-a-bookend"),
    pytest.param(5, 1, 0, ("user", "assistant"), [5, 6], [], [], id="bookend-zero"),
    pytest.param(5, 1, -2, ("user", "assistant"), [5, 6], [], [], id="negative-bookend"),
]  # fmt: skip


@pytest.mark.parametrize(("anchor", "window", "bookend", "roles", "kept", "head", "tail"),
                         ANCHORED_CASES)  # fmt: skip
def test_anchored_view(
    talk: tuple[SessionDB, list[int]], anchor: int, window: int, bookend: int,
    roles: tuple[str, ...] | None, kept: list[int], head: list[int], tail: list[int],
) -> None:  # fmt: skip
    db, ids = talk
    # index 4 is the tool result, 3 the tool-call-only assistant turn: empty content keeps
    # it out of the bookends, not out of the window.
    view = db.get_anchored_view("s", ids[anchor], window=window, bookend=bookend,
                                keep_roles=roles)  # fmt: skip
    around = db.get_messages_around("s", ids[anchor], window=window)
    assert ids_of(view["window"]) == [ids[index] for index in kept]
    assert ids_of(view["bookend_start"]) == [ids[index] for index in head]
    assert ids_of(view["bookend_end"]) == [ids[index] for index in tail]
    assert (view["messages_before"], view["messages_after"]) == (
        around["messages_before"], around["messages_after"]
    )


def test_bookends_skip_multi_part_content(db: SessionDB) -> None:
    db.create_session("s", "cli")
    picture = db.append_message("s", "user", [{"type": "text", "text": "look"}])
    first = db.append_message("s", "user", "first words")
    middle = [db.append_message("s", "assistant", f"m{i}") for i in range(5)]
    view = db.get_anchored_view("s", middle[3], window=0, bookend=2)
    assert ids_of(view["bookend_start"]) == [first, middle[0]]
    around = db.get_messages_around("s", first, window=1)
    assert around["window"][0]["id"] == picture
    assert around["window"][0]["content"] == [{"type": "text", "text": "look"}]


# -- search_sessions_by_id -------------------------------------------------------------------


class FakeListing:
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **options: Any) -> list[dict[str, Any]]:
        self.calls.append(options)
        return self.rows


def test_search_by_id_asks_the_listing_as_hermes_does_and_ranks(
    db: SessionDB, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [
        {"id": "xx-abc-1"}, {"id": "abc-2"}, {"id": "tip", "_lineage_root_id": "ABC"},
        {"id": "abc"}, {"id": "zabc"}, {"id": "abcd"},
    ]
    fake = FakeListing(rows)
    monkeypatch.setattr(db, "list_sessions_rich", fake)
    found = db.search_sessions_by_id("  AbC ", limit=4, include_archived=False)
    assert fake.calls == [{"limit": 16, "offset": 0, "include_archived": False,
                           "order_by_last_active": True, "id_query": "abc"}]  # fmt: skip
    assert ids_of(found) == ["tip", "abc", "abc-2", "abcd"]


@pytest.mark.parametrize("query", ["", "   ", None, 5, b"abc", "ab\x00"])
def test_search_by_id_without_a_query_lists_nothing(
    db: SessionDB, monkeypatch: pytest.MonkeyPatch, query: Any
) -> None:
    fake = FakeListing([{"id": "abc"}])
    monkeypatch.setattr(db, "list_sessions_rich", fake)
    assert db.search_sessions_by_id(query) == []
    assert db.search_sessions_by_id("abc", limit=0) == []
    assert db.search_sessions_by_id("abc", limit=-3) == []
    assert fake.calls == []


def test_search_by_id_end_to_end(db: SessionDB) -> None:
    session(db, "root-abc", end_reason="compression", ended_at=NOW - 9 * DAY)
    session(db, "cont-1", parent="root-abc", started_at=NOW - 9 * DAY)
    session(db, "abc", started_at=NOW - 5 * DAY)
    session(db, "xabc", started_at=NOW - 4 * DAY, archived=1)
    found = db.search_sessions_by_id("ABC")
    assert ids_of(found) == ["abc", "xabc", "cont-1"]
    assert found[2]["_lineage_root_id"] == "root-abc"
    assert ids_of(db.search_sessions_by_id("abc", include_archived=False)) == ["abc", "cont-1"]


# -- list_cron_job_runs ----------------------------------------------------------------------


def test_cron_runs_are_one_jobs_own_newest_first(db: SessionDB) -> None:
    runs = {
        "cron_j1_300": ("cron", 300.0), "cron_j1_100": ("cron", 100.0),
        "cron_j1_200": ("cron", 200.0), "cron_j1_200b": ("cron", 200.0),
        "cron_j10_1": ("cron", 400.0), "CRON_J1_5": ("cron", 500.0),
        "cron_j1": ("cron", 600.0), "cron_j1_9": ("cli", 700.0), "cron_j1X1": ("cron", 800.0),
        "cron_j1`": ("cron", 900.0),
    }  # fmt: skip
    for session_id, (source, started) in runs.items():
        session(db, session_id, source=source, started_at=started)
    say(db, "cron_j1_300", "Run the nightly backup\nof the cluster " + "x" * 80)
    say(db, "cron_j1_300", "second", role="assistant")
    listed = db.list_cron_job_runs("j1")
    assert ids_of(listed) == ["cron_j1_300", "cron_j1_200b", "cron_j1_200", "cron_j1_100"]
    text = "Run the nightly backup of the cluster " + "x" * 80
    assert listed[0]["preview"] == text[:60] + "..."
    assert listed[1]["preview"] == "" and listed[1]["last_active"] == 200.0
    assert list(listed[0])[-2:] == ["last_active", "preview"]
    assert listed[0] == {**db.get_session("cron_j1_300"), "last_active":  # type: ignore[dict-item]
                         listed[0]["last_active"], "preview": listed[0]["preview"]}
    assert ids_of(db.list_cron_job_runs("j1", limit=2, offset=1)) == ["cron_j1_200b",
                                                                      "cron_j1_200"]
    assert ids_of(db.list_cron_job_runs("j1", offset=10)) == []


@pytest.mark.parametrize("job_id", ["%", "_", "j%", "\\", "j_"])
def test_cron_job_ids_are_literal(db: SessionDB, job_id: str) -> None:
    session(db, "cron_j1_1", source="cron")
    session(db, f"cron_{job_id}_1", source="cron")
    assert ids_of(db.list_cron_job_runs(job_id)) == [f"cron_{job_id}_1"]


# -- cleanup rules ---------------------------------------------------------------------------

# (message_count, ended, archived) -> counted and deleted as empty
EMPTY_CASES = [
    pytest.param(0, True, 0, True, id="ended-empty"),
    pytest.param(0, False, 0, False, id="live-empty"),
    pytest.param(0, True, 1, False, id="archived-empty"),
    pytest.param(2, True, 0, False, id="ended-with-messages"),
]


@pytest.mark.parametrize(("count", "ended", "archived", "empty"), EMPTY_CASES)
def test_empty_session_rules(
    db: SessionDB, count: int, ended: bool, archived: int, empty: bool
) -> None:
    session(db, "s", ended_at=NOW if ended else None, archived=archived)
    say(db, "s", *[f"m{i}" for i in range(count)])
    session(db, "child", parent="s", model_config={"_delegate_from": "s"})
    say(db, "child", "keep me")
    assert db.count_empty_sessions() == int(empty)
    assert db.delete_empty_sessions() == int(empty)
    assert ("s" in all_ids(db)) is not empty
    child = db.get_session("child")
    assert child is not None, "children are never taken, delegate runs included"
    assert child["parent_session_id"] == (None if empty else "s")


def test_delete_empty_sessions_keeps_a_session_that_holds_rows(db: SessionDB) -> None:
    """Hermes 0.18 deleted it (and its rows) by the counter alone; iot 0.22.2 asks the rows
    (its ``NOT EXISTS`` guard, #95868), and so do we: a rewind now counts 0 for a session whose
    every row it undid (``sessionstore.sessions.rewind``)."""
    session(db, "s", ended_at=NOW)
    say(db, "s", "counted wrong")
    execute(db, "UPDATE sessions SET message_count = 0")
    assert db.count_empty_sessions() == 0 and db.delete_empty_sessions() == 0
    assert db.message_count() == 1


ORPHAN_BASE: dict[str, Any] = {"parent_ended": True, "parent_reason": "compression",
                               "api_calls": 0, "end_reason": None, "ended": False,
                               "age_days": 8, "has_messages": True}  # fmt: skip
# One condition changed at a time -> finalized?
ORPHAN_CASES = [
    pytest.param({}, True, id="orphaned-continuation"),
    pytest.param({"parent_ended": False}, False, id="parent-not-ended"),
    pytest.param({"parent_reason": "user_exit"}, False, id="parent-not-compressed"),
    pytest.param({"api_calls": 1}, False, id="made-api-calls"),
    pytest.param({"end_reason": "done"}, False, id="has-end-reason"),
    pytest.param({"ended": True}, False, id="already-ended"),
    pytest.param({"age_days": 6}, False, id="younger-than-7-days"),
    pytest.param({"has_messages": False}, False, id="no-messages"),
]


@pytest.mark.parametrize(("change", "finalized"), ORPHAN_CASES)
def test_finalize_orphaned_compression_sessions(
    db: SessionDB, change: dict[str, Any], finalized: bool
) -> None:
    case = {**ORPHAN_BASE, **change}
    session(db, "p", ended_at=NOW - 9 * DAY if case["parent_ended"] else None,
            end_reason=case["parent_reason"])  # fmt: skip
    session(db, "c", parent="p", started_at=NOW - case["age_days"] * DAY,
            api_call_count=case["api_calls"], end_reason=case["end_reason"],
            ended_at=NOW - DAY if case["ended"] else None)  # fmt: skip
    if case["has_messages"]:
        say(db, "c", "hello")
    before = db.get_session("c")
    assert db.finalize_orphaned_compression_sessions() == int(finalized)
    after = db.get_session("c")
    assert after is not None and db.message_count("c") == int(case["has_messages"])
    if finalized:
        assert after["end_reason"] == "orphaned_compression"
        assert after["ended_at"] == pytest.approx(time.time(), abs=60)
    else:
        assert after == before
    assert db.finalize_orphaned_compression_sessions() == 0


# -- sessions_dir: transcript files of deleted sessions ---------------------------------------

# session_{}.json: the snapshot older Hermes builds wrote (plain text; iot 0.22.2 sweeps it).
FILE_SHAPES = ("{}.json", "{}.jsonl", "request_dump_{}_1700000000.json", "request_dump_{}_.json",
               "session_{}.json")  # fmt: skip


def transcripts(directory: Path, *session_ids: str) -> set[str]:
    made = set()
    for session_id in session_ids:
        for shape in FILE_SHAPES:
            name = shape.format(session_id)
            (directory / name).write_text("{}")
            made.add(name)
    return made


def left(directory: Path) -> set[str]:
    return {path.name for path in directory.iterdir()}


UNRELATED = {"notes.txt", "request_dump_other_1.json", "other.json", "dump_gone_1.json",
             "gone.json.bak", "request_dump_gone.json", "session_gone.jsonl",
             "session_gone.json.bak", "session_other.json", "xsession_gone.json"}  # fmt: skip


def deleters(db: SessionDB) -> dict[str, Callable[[Any], Any]]:
    return {
        "delete_session": lambda d: db.delete_session("gone", sessions_dir=d),
        "delete_sessions": lambda d: db.delete_sessions(["gone", "nobody"], d),
        "delete_session_if_empty": lambda d: db.delete_session_if_empty("gone", sessions_dir=d),
        "prune_sessions": lambda d: db.prune_sessions(5, sessions_dir=d),
        "prune_empty_ghost_sessions": lambda d: db.prune_empty_ghost_sessions(d),
        "delete_empty_sessions": lambda d: db.delete_empty_sessions(sessions_dir=d),
        "maybe_auto_prune_and_vacuum": lambda d: db.maybe_auto_prune_and_vacuum(
            retention_days=5, vacuum=False, sessions_dir=d
        ),
    }


DELETERS = [
    "delete_session", "delete_sessions", "delete_session_if_empty", "prune_sessions",
    "prune_empty_ghost_sessions", "delete_empty_sessions", "maybe_auto_prune_and_vacuum",
]  # fmt: skip


@pytest.mark.parametrize("method", DELETERS)
@pytest.mark.parametrize("as_text", [False, True], ids=["path", "str"])
def test_every_delete_removes_the_deleted_sessions_files(
    db: SessionDB, tmp_path: Path, method: str, as_text: bool
) -> None:
    directory = tmp_path / "sessions"
    directory.mkdir()
    # "gone" fits every delete: tui, untitled, ended long ago, no message.
    session(db, "gone", source="tui", ended_at=NOW - 9 * DAY, started_at=NOW - 10 * DAY)
    session(db, "other", ended_at=None)
    say(db, "other", "still here")
    transcripts(directory, "gone")
    keep = transcripts(directory, "other") | UNRELATED
    for name in UNRELATED:
        (directory / name).write_text("x")
    (directory / "gone.json.dir").mkdir()
    keep.add("gone.json.dir")
    deleters(db)[method](str(directory) if as_text else directory)
    assert "gone" not in all_ids(db)
    assert left(directory) == keep


@pytest.mark.parametrize("method", DELETERS)
def test_without_sessions_dir_no_file_is_touched(
    db: SessionDB, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    session(db, "gone", source="tui", ended_at=NOW - 9 * DAY, started_at=NOW - 10 * DAY)
    directory = tmp_path / "cwd"
    directory.mkdir()
    monkeypatch.chdir(directory)
    made = transcripts(directory, "gone")
    deleters(db)[method](None)
    assert "gone" not in all_ids(db)
    assert left(directory) == made


def test_a_deleted_delegate_childs_files_go_too(db: SessionDB, tmp_path: Path) -> None:
    session(db, "parent")
    session(db, "kid", parent="parent", model_config={"_delegate_from": "parent"})
    session(db, "branch", parent="parent", model_config={"_branched_from": "parent"})
    directory = tmp_path / "sessions"
    directory.mkdir()
    transcripts(directory, "parent", "kid")
    keep = transcripts(directory, "branch")
    assert db.delete_session("parent", sessions_dir=directory)
    assert all_ids(db) == {"branch"}
    assert left(directory) == keep


@pytest.mark.parametrize("hostile", ["*", "../outside", "a/b", "[g]", "?", ".", "gone*"])
def test_an_id_never_names_a_file_outside_the_directory_or_anothers(
    db: SessionDB, tmp_path: Path, hostile: str
) -> None:
    directory = tmp_path / "sessions"
    (directory / "a").mkdir(parents=True)
    session(db, hostile)
    keep = transcripts(directory, "gone", "g") | {"a"}
    (directory / "a" / "b.json").write_text("x")
    (tmp_path / "outside.json").write_text("x")
    assert db.delete_session(hostile, sessions_dir=directory)
    assert left(directory) == keep
    assert (directory / "a" / "b.json").exists() and (tmp_path / "outside.json").exists()


@pytest.mark.parametrize("bad", [5, b"/tmp", ["/tmp"], "/tmp/\x00x"])
def test_a_bad_sessions_dir_is_refused_before_anything_is_deleted(
    db: SessionDB, bad: Any
) -> None:
    session(db, "gone", source="tui", ended_at=NOW - 9 * DAY)
    for name, call in deleters(db).items():
        if name == "maybe_auto_prune_and_vacuum":
            assert "error" in call(bad)  # it never raises
        else:
            with pytest.raises((TypeError, ValueError)):
                call(bad)
        assert "gone" in all_ids(db), name


def test_a_missing_sessions_dir_is_no_error(db: SessionDB, tmp_path: Path) -> None:
    session(db, "gone")
    assert db.delete_session("gone", sessions_dir=tmp_path / "nope")


@pytest.mark.parametrize(("ids", "expected"), [(None, 0), ([], 0), ([None, 5, "", "s"], 1),
                                               (("s", "s"), 1)])  # fmt: skip
def test_delete_sessions_takes_lists_of_ids(db: SessionDB, ids: Any, expected: int) -> None:
    session(db, "s")
    assert db.delete_sessions(ids) == expected


def test_delete_sessions_refuses_a_lone_str(db: SessionDB) -> None:
    for session_id in ("s", "x", "sx"):
        session(db, session_id)
    with pytest.raises(TypeError):
        db.delete_sessions("sx")  # type: ignore[arg-type]
    assert all_ids(db) == {"s", "x", "sx"}


def test_a_ghost_with_a_child_is_pruned_and_the_child_orphaned(db: SessionDB) -> None:
    # Hermes 0.18 fails the whole prune on the foreign key here (it does not orphan).
    session(db, "ghost", source="tui", ended_at=NOW - 9 * DAY)
    session(db, "child", parent="ghost")
    assert db.prune_empty_ghost_sessions() == 1
    assert db.get_session("child")["parent_session_id"] is None  # type: ignore[index]


# -- maintenance -----------------------------------------------------------------------------


def test_optimize_and_vacuum_keep_search_results(db: SessionDB) -> None:
    db.create_session("s", "cli")
    for index in range(30):
        db.append_message("s", "user", f"kubernetes deployment {index} 部署到集群")
    before = [db.search_messages(q, limit=50) for q in ("kubernetes", "部署", "集群")]
    indexes = db.optimize_fts()
    assert isinstance(indexes, int) and indexes >= 2
    assert db.vacuum() == indexes
    assert [db.search_messages(q, limit=50) for q in ("kubernetes", "部署", "集群")] == before


def test_vacuum_returns_the_space_of_deleted_rows(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = SessionDB(path)

    def fill(prefix: str) -> None:
        for index in range(100):
            db.create_session(f"{prefix}{index}", "cli")
            db.append_messages(f"{prefix}{index}",
                               [{"role": "user", "content": "lorem ipsum " * 300}] * 4)
            db.end_session(f"{prefix}{index}", "done")
        execute(db, "UPDATE sessions SET started_at = 1")
        execute(db, "UPDATE messages SET timestamp = 1")  # idle since: a prune's age

    def size() -> int:
        # The log only where the store runs in WAL (not where the SQLite in use keeps it out).
        files = [Path(f"{path}{suffix}") for suffix in ("", "-wal")]
        return sum(file.stat().st_size for file in files if file.exists())

    fill("a")
    before = size()
    assert db.prune_sessions(1) == 100
    db.vacuum()
    assert size() < before / 5
    db.close()


@needs_wal()  # a reader mid-snapshot beside a VACUUM: in the rollback journal it holds it off
def test_vacuum_leaves_every_other_opener_working(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    # The checkpoints around the VACUUM are best effort: with the reader below mid-snapshot
    # each waits out the busy timeout and leaves the log for later. A short timeout, so the
    # test does not sit out the default second at each (3 s in all) for the same outcome.
    db = SessionDB(path, busy_timeout_s=0.1)
    for index in range(50):
        db.create_session(f"s{index}", "cli")
        db.append_message(f"s{index}", "user", "lorem ipsum " * 100)
        db.end_session(f"s{index}", "done")
    other = hermes_state.SessionDB(path)  # an opener holding its own raw connection
    raw = connect_like_the_store(path)  # the stores' library: this process holds the file
    raw.execute("BEGIN")
    assert raw.execute("SELECT count(*) FROM messages").fetchone() == (50,)
    execute(db, "UPDATE sessions SET started_at = 1")
    execute(db, "UPDATE messages SET timestamp = 1")  # idle since: a prune's age
    assert db.prune_sessions(1) == 50
    db.vacuum()  # while that reader is mid-snapshot
    assert raw.execute("SELECT count(*) FROM messages").fetchone() == (50,)
    raw.rollback()
    assert raw.execute("SELECT count(*) FROM messages").fetchone() == (0,)
    other.create_session("after", "cli")
    other.append_message("after", "user", "written after the vacuum")
    assert [hit["session_id"] for hit in db.search_messages("vacuum")] == ["after"]
    assert other._conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 1
    assert raw.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert raw.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    raw.close()
    other.close()
    db.close()


def test_optimize_counts_hermes_s_indexes(tmp_path: Path) -> None:
    """Hermes (0.19.0 and iot 0.22.2 alike) counts its word and trigram indexes: 2 on a fresh
    file. Our CJK bigram index is merged too, uncounted, so the numbers callers compare agree."""
    db = SessionDB(tmp_path / "state.db")
    db.create_session("s", "cli")
    for index in range(3):
        db.append_message("s", "user", f"hello world {index} 部署到集群")

    def bigram_segments() -> int:
        sql = sa.text("SELECT count(*) FROM messages_cjk_bigram_idx")
        return int(db.store.read(lambda conn: conn.execute(sql).scalar()))

    assert bigram_segments() > 1  # one segment per insert
    assert db.optimize_fts() == 2
    assert bigram_segments() == 1  # merged, though not counted
    assert len(db.search_messages("部署")) == 3
    db.close()


def test_a_failing_index_is_skipped_by_optimize(tmp_path: Path, caplog: Any) -> None:
    db = SessionDB(tmp_path / "state.db")
    healthy = db.optimize_fts()
    execute(db, "DROP TABLE messages_fts_trigram_data")
    assert db.optimize_fts() == healthy - 1
    assert "messages_fts_trigram" in caplog.text
    db.close()


def test_a_read_only_store_refuses_maintenance(store_url: str) -> None:
    SessionDB(url=store_url).close()
    reader = SessionDB(url=store_url, read_only=True)
    try:
        for call in (reader.optimize_fts, reader.vacuum, reader.delete_empty_sessions,
                     reader.finalize_orphaned_compression_sessions):  # fmt: skip
            with pytest.raises(ReadOnlyStoreError):
                call()
        assert reader.count_empty_sessions() == 0
        result = reader.maybe_auto_prune_and_vacuum()
        assert result["pruned"] == 0 and not result["vacuumed"] and "error" in result
    finally:
        reader.close()


# marker in state_meta (hours ago; None: absent; text as is), pruned rows?, vacuum flag
AUTO_CASES = [
    pytest.param(None, True, True, {"skipped": False, "pruned": 1, "vacuumed": True},
                 id="first-run-prunes-and-vacuums"),
    pytest.param(2.0, True, True, {"skipped": True, "pruned": 0, "vacuumed": False},
                 id="ran-recently-skips"),
    pytest.param(30.0, True, True, {"skipped": False, "pruned": 1, "vacuumed": True},
                 id="ran-long-ago"),
    pytest.param("not a time", True, True, {"skipped": False, "pruned": 1, "vacuumed": True},
                 id="corrupt-marker-is-no-marker"),
    pytest.param(None, True, False, {"skipped": False, "pruned": 1, "vacuumed": False},
                 id="vacuum-off"),
    pytest.param(None, False, True, {"skipped": False, "pruned": 0, "vacuumed": False},
                 id="nothing-pruned-no-vacuum"),
]  # fmt: skip


@pytest.mark.parametrize(("marker", "old_row", "vacuum", "expected"), AUTO_CASES)
def test_auto_prune_and_vacuum(
    db: SessionDB, marker: Any, old_row: bool, vacuum: bool, expected: dict[str, Any]
) -> None:
    if isinstance(marker, float):
        db.set_meta("last_auto_prune", str(time.time() - marker * 3600))
    elif marker is not None:
        db.set_meta("last_auto_prune", marker)
    session(db, "old", started_at=NOW - (100 if old_row else 10) * DAY, ended_at=NOW - 9 * DAY)
    session(db, "live", started_at=NOW - 100 * DAY)
    vacuums: list[int] = []
    real = db.vacuum
    db.vacuum = lambda: vacuums.append(1) or real()  # type: ignore[method-assign]
    before = time.time()
    assert db.maybe_auto_prune_and_vacuum(retention_days=90, vacuum=vacuum) == expected
    assert len(vacuums) == int(expected["vacuumed"])
    assert ("old" in all_ids(db)) is (expected["pruned"] == 0)
    assert "live" in all_ids(db)
    stamp = db.get_meta("last_auto_prune")
    if expected["skipped"]:
        assert float(stamp) < before  # type: ignore[arg-type]
    else:
        assert float(stamp) >= before  # type: ignore[arg-type]


def test_auto_maintenance_never_raises(db: SessionDB) -> None:
    result = db.maybe_auto_prune_and_vacuum(retention_days=-1)
    assert result["pruned"] == 0 and "older_than_days" in result["error"]
    assert db.get_meta("last_auto_prune") is None
    failing = db.maybe_auto_prune_and_vacuum
    db.vacuum = lambda: 1 / 0  # type: ignore[assignment,method-assign,return-value]
    session(db, "old", started_at=1.0, ended_at=2.0)
    assert failing() == {"skipped": False, "pruned": 1, "vacuumed": False}


# -- hostile inputs --------------------------------------------------------------------------


@pytest.fixture
def seeded(db: SessionDB) -> SessionDB:
    db.create_session("s1", "cli")
    db.append_message("s1", "user", "hello")
    db.create_session("cron_j_1", "cron")
    return db


LOOKUPS: dict[str, tuple[Callable[[SessionDB, Any], Any], tuple[type, ...]]] = {
    "resolve_resume_session_id": (lambda db, v: db.resolve_resume_session_id(v), (object,)),
    "get_messages_around(session_id)": (lambda db, v: db.get_messages_around(v, 1), (dict,)),
    "get_messages_around(anchor)": (lambda db, v: db.get_messages_around("s1", v), (dict,)),
    "get_messages_around(window)": (lambda db, v: db.get_messages_around("s1", 1, v), (dict,)),
    "get_anchored_view(bookend)": (
        lambda db, v: db.get_anchored_view("s1", 1, bookend=v), (dict,)
    ),
    "get_anchored_view(keep_roles)": (
        lambda db, v: db.get_anchored_view("s1", 1, keep_roles=v), (dict,)
    ),
    "search_sessions_by_id(query)": (lambda db, v: db.search_sessions_by_id(v), (list,)),
    "search_sessions_by_id(limit)": (lambda db, v: db.search_sessions_by_id("s", v), (list,)),
    "list_cron_job_runs(job_id)": (lambda db, v: db.list_cron_job_runs(v), (list,)),
    "list_cron_job_runs(limit)": (lambda db, v: db.list_cron_job_runs("j", v), (list,)),
    "list_cron_job_runs(offset)": (lambda db, v: db.list_cron_job_runs("j", 5, v), (list,)),
    "delete_sessions": (lambda db, v: db.delete_sessions(v), (int,)),
    "delete_session": (lambda db, v: db.delete_session(v), (bool,)),
    "delete_session(sessions_dir)": (lambda db, v: db.delete_session("nobody", v), (bool,)),
    "delete_empty_sessions(sessions_dir)": (lambda db, v: db.delete_empty_sessions(v), (int,)),
    "maybe_auto_prune_and_vacuum(retention_days)": (
        lambda db, v: db.maybe_auto_prune_and_vacuum(v, 0, False), (dict,)
    ),
}
NEVER_RAISES = {"maybe_auto_prune_and_vacuum(retention_days)", "resolve_resume_session_id"}


@pytest.mark.parametrize("name", sorted(LOOKUPS))
def test_hostile_arguments_get_a_typed_result_or_error(seeded: SessionDB, name: str) -> None:
    call, result_types = LOOKUPS[name]

    @SETTINGS
    @given(value=HOSTILE)
    def check(value: Any) -> None:
        try:
            result = call(seeded, value)
        except (TypeError, ValueError):
            assert name not in NEVER_RAISES
            return
        assert isinstance(result, result_types), (name, value, result)

    check()
    assert seeded.message_count("s1") == 1


@SETTINGS
@given(
    window=st.integers(min_value=-(2**70), max_value=2**70),
    anchor=st.integers(min_value=-(2**70), max_value=2**70),
)
def test_any_integer_window_and_anchor(seeded: SessionDB, window: int, anchor: int) -> None:
    view = seeded.get_anchored_view("s1", anchor, window=window, bookend=window)
    assert view["window"] == [] or ids_of(view["window"]) == [1]


# -- the async facade ------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_the_new_methods_through_the_async_facade(store_url: str, tmp_path: Path) -> None:
    async with AsyncSessionDB(url=store_url) as adb:
        await adb.create_session("root", "cli")
        anchor = await adb.append_message("root", "user", "hello")
        await adb.end_session("root", "compression")
        await adb.ensure_session("tip", "cli", parent_session_id="root")
        await adb.append_message("tip", "user", "continued")
        assert await adb.resolve_resume_session_id("root") == "tip"
        view = await adb.get_anchored_view("root", anchor)
        assert ids_of(view["window"]) == [anchor]
        assert await adb.list_cron_job_runs("j") == []
        assert await adb.count_empty_sessions() == 0
        assert await adb.finalize_orphaned_compression_sessions() == 0
        assert await adb.vacuum() == await adb.optimize_fts()
        (tmp_path / "tip.jsonl").write_text("{}")
        assert await adb.delete_session("tip", sessions_dir=tmp_path)
        assert not (tmp_path / "tip.jsonl").exists()
        result = await adb.maybe_auto_prune_and_vacuum(vacuum=False)
        assert result == {"skipped": False, "pruned": 0, "vacuumed": False}
