"""The repository assembled from its parts: no part hides another's names, no module of the
domain reaches into another's private names, and the one compression-tip rule of
``sessions/lineage.py`` answers alike for the listing, get_compression_tip and a resume."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from sessionstore.sessions.repository import SessionRepository
from sessionstore.sessions.shared import RepositoryPart
from sessionstore.storage.store import Store

SESSIONS_PACKAGE = Path(__file__).resolve().parents[2] / "sessionstore" / "sessions"
INHERITED_BY_EVERY_CLASS = frozenset({"__module__", "__qualname__", "__doc__", "__init__",
                                      "__dict__", "__weakref__", "__firstlineno__",
                                      "__static_attributes__"})  # fmt: skip


def test_no_part_hides_a_name_of_another() -> None:
    """A name two parts defined would be one part's for the whole repository, whichever comes
    first in the order of the bases (a helper of one part silently replacing another's)."""
    parts = [klass for klass in SessionRepository.__mro__[1:] if issubclass(klass, RepositoryPart)]
    assert len(parts) >= 12  # every part and their base
    owner: dict[str, str] = {}
    for part in parts:
        for name in vars(part):
            if name in INHERITED_BY_EVERY_CLASS:
                continue
            assert name not in owner, f"{name} is defined by {owner[name]} and {part.__name__}"
            owner[name] = part.__name__


def test_no_module_of_the_domain_imports_a_private_name_of_another() -> None:
    """What parts share has a public name in the module that owns it."""
    found = []
    for path in sorted(SESSIONS_PACKAGE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                found += [f"{path.name}: {node.module}.{alias.name}"
                          for alias in node.names if alias.name.startswith("_")]  # fmt: skip
    assert found == []


@pytest.fixture
def repository(store_url: str) -> Iterator[SessionRepository]:
    with Store.open(store_url) as store:
        yield SessionRepository(store)


def test_the_listing_tip_and_the_resume_target_agree_on_a_racing_continuation(
    repository: SessionRepository,
) -> None:
    """A continuation that started before its parent ended (the gateway raced compression):
    the listing's projection, get_compression_tip and a resume all follow it (one rule, iot
    0.22.2's; SPEC's ``started_at >= ended_at`` would have left the listing on the root)."""
    repository.create_session("root", "cli", started_at=1000.0)
    repository.create_session("early", "cli", parent_session_id="root", started_at=1500.0)
    repository.append_message("early", repository.prepare_message("user", "still talking"))
    sessions = sa.table("sessions", sa.column("id"), sa.column("ended_at"),
                        sa.column("end_reason"))  # fmt: skip
    repository.store.write(lambda conn: conn.execute(
        sa.update(sessions).where(sessions.c.id == "root")
        .values(ended_at=2000.0, end_reason="compression")
    ))  # fmt: skip

    assert repository.get_compression_tip("root") == "early"
    (listed,) = repository.list_sessions_rich()
    assert (listed.session.id, listed.lineage_root_id) == ("early", "root")
    assert repository.resolve_resume_session_id("root") == "early"

    # A stale sibling started after the end (a leftover websocket, closed): the live one,
    # which holds the newer activity, stays the tip for every reader.
    repository.create_session("late", "cli", parent_session_id="root", started_at=2500.0)
    repository.append_message("late", repository.prepare_message("user", "stale socket"))
    repository.end_session("late", "ws_orphan_reap")
    repository.append_message("early", repository.prepare_message("user", "newest turn"))
    assert repository.get_compression_tip("root") == "early"
    (listed,) = repository.list_sessions_rich()
    assert listed.session.id == "early"
    assert repository.resolve_resume_session_id("root") == "early"
