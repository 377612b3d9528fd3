"""The real newest Hermes (0.18.0, schema v17) on a store at head: it opens the file, writes,
finds with its own search, and what it writes is found by our CJK search (revision 0021's
triggers index its rows too; it leaves the tables and triggers it does not know alone).

Hermes runs in a subprocess from its unpacked wheel (``/tmp/hermesdl/h18``, or
``HERMES_0_18_DIR``; fetched with ``pip download`` when neither exists), so its module never
meets ours in one interpreter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from legacy_v7_v17 import hermes_open_actions

from sessionstore.api.session_db import SessionDB
from sessionstore.ops import doctor
from sessionstore.storage.store import Store

# Slow: runs a real Hermes release in a side interpreter (the full run only).
pytestmark = pytest.mark.slow

HERMES_CLIENT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import hermes_state
from pathlib import Path
db = hermes_state.SessionDB(db_path=Path(sys.argv[2]))
db.create_session("hermes-1", "cli", model="m")
db.append_message("hermes-1", "user", "部署之前先备份数据库")
db.append_message("hermes-1", "assistant", "ok, deploy after the 备份", tool_name="终端")
db.append_message("hermes-1", "user", "plain english only")
found = {q: sorted(h["id"] for h in db.search_messages(q)) for q in ("数据库", "备份", "库")}
print(json.dumps({"found": found, "fts": db._fts_enabled, "trigram": db._trigram_available}))
db.close()
"""


@pytest.fixture(scope="module")
def hermes_18(tmp_path_factory: pytest.TempPathFactory) -> Path:
    for candidate in (os.environ.get("HERMES_0_18_DIR"), "/tmp/hermesdl/h18"):
        if candidate and (Path(candidate) / "hermes_state.py").exists():
            return Path(candidate)
    target = tmp_path_factory.mktemp("hermes18")
    download = subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "hermes-agent==0.18.0",
         "-d", str(target)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    wheels = list(target.glob("hermes_agent-0.18.0-*.whl"))
    if download.returncode != 0 or not wheels:
        pytest.skip(f"hermes-agent 0.18.0 not available: {download.stderr[-200:]}")
    with zipfile.ZipFile(wheels[0]) as wheel:
        wheel.extractall(target / "unpacked")
    return target / "unpacked"


def run_hermes(hermes_dir: Path, db_file: Path) -> dict[str, object]:
    environment = {key: value for key, value in os.environ.items() if key != "SESSIONSTORE_URL"}
    environment["HERMES_HOME"] = str(db_file.parent / "hermes_home")
    result = subprocess.run(
        [sys.executable, "-c", HERMES_CLIENT, str(hermes_dir), str(db_file)],
        cwd=hermes_dir, env=environment, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def search_objects(db_file: Path) -> list[tuple[str, str]]:
    import sqlite3

    conn = sqlite3.connect(f"file:{db_file}?mode=ro", uri=True)
    try:
        return conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type IN ('table', 'trigger') "
            "AND (name LIKE 'messages_fts%' OR name LIKE 'messages_cjk%') ORDER BY name"
        ).fetchall()
    finally:
        conn.close()


def test_real_hermes_writes_our_head_file_and_our_cjk_search_finds_its_rows(
    hermes_18: Path, tmp_path: Path
) -> None:
    db_file = tmp_path / "state.db"
    ours = SessionDB(db_file)
    ours.create_session("ours-1", "cli")
    ours.append_message("ours-1", "user", "我们的数据库迁移计划")
    ours.close()
    assert hermes_open_actions(db_file) == []  # the emulation agrees: nothing to change
    before = search_objects(db_file)

    report = run_hermes(hermes_18, db_file)

    assert report["fts"] is True and report["trigram"] is True
    assert search_objects(db_file) == before, "Hermes left our objects as they were"
    db = SessionDB(db_file)
    try:
        hermes_rows = {
            m["content"]: m["id"] for m in db.get_messages("hermes-1")
        }
        backup_id = hermes_rows["部署之前先备份数据库"]
        deploy_id = hermes_rows["ok, deploy after the 备份"]
        found = report["found"]
        assert isinstance(found, dict)
        # Hermes's own search finds its rows in our file (trigram for 3+, LIKE for shorter).
        assert backup_id in found["数据库"] and deploy_id in found["备份"]
        # Ours: 1-, 2- and 3-character needles from the bigram index, mixed scripts anywhere.
        assert {h["id"] for h in db.search_messages("库")} >= {backup_id}
        assert {h["id"] for h in db.search_messages("备份")} == {backup_id, deploy_id}
        assert {h["id"] for h in db.search_messages("数据库")} == {backup_id} | {
            m["id"] for m in db.get_messages("ours-1")
        }
        assert [h["id"] for h in db.search_messages("deploy 备份")] == [deploy_id]
        assert [h["id"] for h in db.search_messages("终端")] == [deploy_id]  # tool name
    finally:
        db.close()
    with Store.open(f"sqlite:///{db_file}") as store:
        checks = {c.name: c.status for c in doctor.diagnose(store).checks}
    assert checks["fts_objects"] == checks["fts_parity"] == checks["fts_integrity"] == "ok"
