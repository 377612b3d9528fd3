"""Stored text the terminal must not obey: ids, titles and messages holding controls.

Ids come from gateways and callers, text from models and tools (a tool's coloured output is
full of escape sequences). What the command line prints must never carry a control, an
invisible format character (bidi override, zero width) or a line separator into the terminal,
beyond the newlines of its own layout; an id that holds one is printed escaped, and that
printed form resolves back to the id as a REF.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from sessionstore import cli
from sessionstore.api.session_db import SessionDB
from sessionstore.cli._output import shown_id, unescaped_id

HOSTILE_ID = "gw\n\x1b[31mred\u202eevil\u200b\\tail"
SHOWN = "gw\\n\\x1b[31mred\\u202eevil\\u200b\\\\tail"
NEIGHBOUR_ID = "gw-neighbour"
HOSTILE_TEXT = "\x1b[2J\x1b]0;owned\x07 needle \x1b(0lqqk\x9b31m \u2028 back\x08 \u202eabc"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner(env={"COLUMNS": "200"})


def run(runner: CliRunner, url: str, *args: str) -> Any:
    return runner.invoke(cli.app, ["--url", url, *args])


def seed(url: str) -> None:
    db = SessionDB(url)
    try:
        for session_id in (HOSTILE_ID, NEIGHBOUR_ID):
            db.create_session(session_id, source="tele\x1bgram", model="m\u202eodel")
            db.append_message(session_id, role="user", content=HOSTILE_TEXT)
            db.append_message(session_id, role="tool", content=HOSTILE_TEXT, tool_name="sh\x07")
        db.set_session_title(NEIGHBOUR_ID, "plain title")
    finally:
        db.close()


BIDI_CONTROLS = {chr(code) for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}


def hidden_characters(output: str) -> set[str]:
    """Every character of ``output`` a terminal would obey, or that reorders the line."""
    return {
        char
        for char in output
        if (char not in "\n\t" and unicodedata.category(char) in {"Cc", "Zl", "Zp"})
        or char in BIDI_CONTROLS
    }


def test_shown_id_leaves_ordinary_ids_alone() -> None:
    for session_id in ("20260101_120000_abcdef", "C:\\runs\\x41", "会话-1", "a b"):
        assert shown_id(session_id) == session_id


def test_shown_id_escapes_what_would_not_show() -> None:
    assert shown_id(HOSTILE_ID) == SHOWN
    assert unescaped_id(SHOWN) == HOSTILE_ID


def test_unescaped_id_ignores_what_no_stored_id_holds() -> None:
    assert unescaped_id("plain") is None
    assert unescaped_id("C:\\path") is None  # no escape there: taken as typed
    assert unescaped_id("a\\ud800b") is None  # a lone surrogate names no stored id
    assert unescaped_id("a\\U00110000b") is None  # past Unicode


@given(st.text(max_size=40))
def test_shown_id_prints_nothing_hidden_and_names_one_id(session_id: str) -> None:
    shown = shown_id(session_id)
    assert not any(unicodedata.category(char) in {"Cc", "Cf", "Zl", "Zp"} for char in shown)
    if shown != session_id:
        assert unescaped_id(shown) == session_id


def test_listing_search_and_show_print_nothing_the_terminal_obeys(
    runner: CliRunner, store_url: str
) -> None:
    seed(store_url)
    for args in (
        ("sessions", "list"),
        ("search", "needle"),
        ("sessions", "show", SHOWN),
        ("sessions", "show", "--full", SHOWN),
        ("stats",),
    ):
        result = run(runner, store_url, *args)
        assert result.exit_code == 0, (args, result.output)
        assert hidden_characters(result.output) == set(), args
    listing = run(runner, store_url, "sessions", "list").output
    assert "gw\\n\\x1b" in listing  # the hostile id's row, escaped and on one line
    shown = run(runner, store_url, "sessions", "show", SHOWN).output
    assert SHOWN in shown and "needle" in shown


def test_the_escaped_id_and_its_shortened_form_resolve_back(
    runner: CliRunner, store_url: str
) -> None:
    seed(store_url)
    result = run(runner, store_url, "title", "set", SHOWN, "renamed")
    assert result.exit_code == 0, result.output
    assert result.output == f"{SHOWN}: title set to 'renamed'\n"
    shortened = "gw\\n…"  # a unique prefix as a listing prints it, ellipsis and all
    result = run(runner, store_url, "sessions", "show", "--json", shortened)
    assert result.exit_code == 0, result.output
    assert {message["session_id"] for message in json.loads(result.output)} == {HOSTILE_ID}
    result = run(runner, store_url, "sessions", "delete", "--yes", SHOWN)
    assert result.exit_code == 0, result.output
    assert hidden_characters(result.output) == set()
    db = SessionDB(store_url)
    try:
        assert db.get_session(HOSTILE_ID) is None
        assert db.get_session(NEIGHBOUR_ID) is not None
    finally:
        db.close()


def test_an_ambiguous_prefix_lists_the_ids_escaped(runner: CliRunner, store_url: str) -> None:
    seed(store_url)
    result = run(runner, store_url, "sessions", "show", "gw")
    assert result.exit_code != 0
    assert "gw\\n\\x1b[31mred" in result.output
    assert hidden_characters(result.output) == set()
