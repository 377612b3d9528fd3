"""``scripts/bench.py`` runs end to end on a tiny corpus and prints its tables.

Not a timed test: the figures on a tiny corpus mean nothing, so only the shape of the output
and the exit status are checked (every workload row present with a figure from each of the four
Hermes baselines, a numeric ratio to each of them and to the fastest, the multi-process table
with one line per store and writer count).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from pg_server import pg_admin_url
from store_library import connect_like_the_store

# Slow: runs scripts/bench.py in a subprocess against real Hermes releases (the full run only).
pytestmark = pytest.mark.slow
BENCH = Path(__file__).resolve().parents[2] / "scripts" / "bench.py"


def _baselines_need_python() -> tuple[int, int]:
    """``bench.BASELINES_NEED_PYTHON``, read off the script's text (its one home): importing
    the script at collection would cost every run, the inner loop's included."""
    found = re.search(r"^BASELINES_NEED_PYTHON = \((\d+), (\d+)\)$", BENCH.read_text(), re.M)
    assert found is not None, "bench.py no longer says which Python its baselines need"
    return int(found[1]), int(found[2])


needs_the_baselines_python = pytest.mark.skipif(
    sys.version_info < _baselines_need_python(),
    reason="the bench's Hermes baselines need a newer Python (bench.BASELINES_NEED_PYTHON)",
)

# Each table row, as the pattern its line starts with.
WORKLOAD_ROWS = {
    "search words": r"search p50: words\s",
    "search phrases": r"search p50: phrases\s",
    "search prefixes": r"search p50: prefixes\s",
    "search CJK words": r"search p50: CJK words\s",
    "search CJK 1": r"search p50: CJK 1 char\s",
    "search CJK 2": r"search p50: CJK 2 chars\s",
    "search CJK 3": r"search p50: CJK 3 chars\s",
    "list": r"list_sessions_rich\(limit=50\)\s",
    "load rows": r"load \d+ msgs: get_messages\s",
    "load conversation": r"load \d+ msgs: get_messages_as_conversation\s",
    "append": r"append_message \(1 msg/txn\)\s",
    "append 4 KB": r"append_message, 4 KB ASCII\s",
    "turn": r"turn of 10 \(per msg\)\s",
}
# The baselines, in their column order: v6 from ../shared/reference/hermes-v6, the two wheels,
# the iot 0.22.2 fork (schema v31, our head's) from the field tests' side venv.
BASELINES = ("Hermes v6", "Hermes 0.18.0", "Hermes 0.19.0", "Hermes iot-0.22.2")
BASELINE_NAMES = "|".join(map(re.escape, BASELINES))
FIGURE = r"\d+(?:\.\d+)? (?:us|ms)"
RATIO = r"\d+\.\d\dx"
# Four Hermes figures, ours, the ratio to each Hermes and to the fastest, which one that is,
# target and verdict.
MEASURED = re.compile(
    rf"\s(?:{FIGURE}\s+){{4}}{FIGURE}\s+(?:{RATIO}\s+){{4}}({RATIO})\s+"
    rf"({BASELINE_NAMES})\s+(<=|>=) \d+\.\d\dx\s+(PASS|MISS)\b"
)

# The usage row: v6 and 0.18.0 not timed ("-"), 0.19.0, iot 0.22.2 and ours measured, judged
# against the faster of the two that keep per-model usage.
USAGE_MEASURED = re.compile(
    rf"\s-\s+-\s+{FIGURE}\s+{FIGURE}\s+{FIGURE}\s+-\s+-\s+{RATIO}\s+{RATIO}\s+({RATIO})\s+"
    r"Hermes (?:0\.19\.0|iot-0\.22\.2)\s+<= 1\.00x\s+(PASS|MISS)\b"
)


def run_bench(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(BENCH.parents[1])}
    return subprocess.run(
        [sys.executable, str(BENCH), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def table_rows(stdout: str) -> dict[str, str]:
    rows = {}
    for line in stdout.splitlines():
        for name, pattern in WORKLOAD_ROWS.items():
            if re.match(pattern, line):
                rows[name] = line
    return rows


def assert_ratio_table(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    ratios = [re.escape(label.replace("Hermes ", "vs ")) for label in BASELINES]
    assert re.search(r"^workload\s+" + r"\s+".join(map(re.escape, BASELINES))
                     + r"\s+sessionstore \(\w+\)\s+" + r"\s+".join(ratios)
                     + r"\s+vs fastest\s+fastest\s+target", out, re.M), out
    assert re.search(r"^startup: import\+open\+first read\s.*\s(PASS|MISS)\s*$", out, re.M), out
    rows = table_rows(out)
    assert set(rows) == set(WORKLOAD_ROWS), f"missing rows: {set(WORKLOAD_ROWS) - set(rows)}"
    for name in WORKLOAD_ROWS:  # search included: SessionDB.search_messages is always wired
        assert MEASURED.search(rows[name]), f"not every side measured in: {rows[name]!r}"
    assert "batching: a 10-message turn costs" in out
    # The usage upsert's row: only 0.19.0 and iot 0.22.2 keep per-model usage: they are timed.
    usage = re.search(r"^append \+ token update \(per-model usage\)\s.*$", out, re.M)
    assert usage is not None, out
    assert USAGE_MEASURED.search(usage.group(0)), usage.group(0)


@needs_the_baselines_python
def test_sqlite_run_prints_the_ratio_table(tmp_path: Path) -> None:
    result = run_bench("--smoke", "--messages", "200", "--workdir", str(tmp_path))
    assert_ratio_table(result)
    # Each Hermes wrote its own file (its schema version); sessionstore adopted 0.18.0's.
    assert (tmp_path / "sessionstore.db").exists()
    for key, version in (("v6", 6), ("0.18.0", 17), ("0.19.0", 22), ("iot-0.22.2", 31)):
        with contextlib.closing(sqlite3.connect(tmp_path / f"hermes_{key}.db")) as conn:
            assert conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] == version
    # v6 was used where it lies, never copied into the project.
    spec = importlib.util.spec_from_file_location("bench_under_test", BENCH)
    assert spec is not None and spec.loader is not None
    bench_module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench_module  # dataclasses resolve their module by name
    spec.loader.exec_module(bench_module)
    v6 = (bench_module.DEFAULT_HERMES_V6 / "hermes_state.py").read_bytes()
    for folder in ("scripts", "sessionstore", "tests"):
        for path in (BENCH.parents[1] / folder).rglob("*.py"):
            assert path.read_bytes() != v6, path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--messages", "10"), "--messages must be at least 100"),
        (("--writers",), "expected one argument"),
    ],
)
def test_bad_arguments_are_refused(args: tuple[str, ...], message: str) -> None:
    result = run_bench(*args, timeout=60)
    assert result.returncode == 2
    assert message in result.stderr


def test_existing_sqlite_target_is_never_overwritten(tmp_path: Path) -> None:
    existing = tmp_path / "precious.db"
    existing.write_bytes(b"not a benchmark store")
    result = run_bench("--smoke", "--messages", "200", "--workdir", str(tmp_path / "w"),
                       "--url", f"sqlite:///{existing}", timeout=120)
    assert result.returncode != 0
    assert "exists" in result.stderr
    assert existing.read_bytes() == b"not a benchmark store"


@needs_the_baselines_python
def test_writers_mode_prints_wall_time_per_store_and_count(tmp_path: Path) -> None:
    result = run_bench("--quick", "--messages", "300", "--writers", "1,2", "--writer-messages",
                       "20", "--writer-runs", "1", "--workdir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    for store in (*map(re.escape, BASELINES), re.escape("sessionstore (SQLite)")):
        for writers in ("1", "2"):
            pattern = re.compile(
                # wall, messages/s, then mean, p50, p99 and the worst append; no error
                rf"^{store}\s+{writers}\s+\S+ (?:us|ms)\s+[\d,]+(?:\s+\S+ (?:us|ms)){{4}}\s+0\s*$"
            )
            assert any(pattern.match(line) for line in lines), (store, writers, result.stdout)
    assert re.search(r"^2 writer processes x 20 appends, wall\s.*<= 0\.80x\s+(PASS|MISS)",
                     result.stdout, re.M), result.stdout
    assert re.search(r"^2 writer processes, p99 append\s.*<= 1\.50x\s+(PASS|MISS)",
                     result.stdout, re.M), result.stdout


def test_a_missing_hermes_v6_is_named_with_the_option_to_fix_it(tmp_path: Path) -> None:
    result = run_bench("--smoke", "--messages", "300", "--hermes-v6", str(tmp_path / "nowhere"),
                       "--workdir", str(tmp_path / "w"), timeout=60)
    assert result.returncode != 0
    assert "Hermes v6 not found" in result.stderr and "--hermes-v6" in result.stderr
    assert "Traceback" not in result.stderr


SCALE_CALLS = (
    "append_message", "conversation load", "word search 'docker deploy', limit 20",
    "search CJK 2 chars", "search CJK 3 chars", "list_sessions_rich(limit=50)",
    "prefix resolution", "title lineage", "message_count()",
)  # fmt: skip


def test_scale_mode_prints_per_call_cost_and_growth(tmp_path: Path) -> None:
    result = run_bench("--scale", "400,2000", "--scale-sessions", "300", "--quick",
                       "--workdir", str(tmp_path), timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert re.search(r"^call\s+400\s+2k\s+300 sessions\s+400->2k\s*$", out, re.M), out
    for call in SCALE_CALLS:
        pattern = rf"^{re.escape(call)}\s+(?:{FIGURE}\s+){{3}}\d+\.\d\dx\s*$"
        assert re.search(pattern, out, re.M), (call, out)
    assert "exact top-20 kept by the ranking window" in out
    # Built through the store's own triggers: the word and CJK indexes hold the rows.
    with contextlib.closing(connect_like_the_store(tmp_path / "scale_2000_200.db")) as conn:
        total = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
        assert total > 2000  # the corpus and the timed appends
        assert conn.execute("SELECT count(*) FROM messages_fts_docsize").fetchone()[0] == total
        assert conn.execute(  # the appends are ASCII: only the corpus's CJK messages
            "SELECT count(*) FROM messages_cjk_bigram_docsize").fetchone()[0] == 2000 // 17


@pytest.mark.postgresql
@needs_the_baselines_python
def test_postgresql_run_prints_the_ratio_table(require_postgresql: None) -> None:
    result = run_bench("--smoke", "--messages", "200", "--url", pg_admin_url())
    assert_ratio_table(result)
    assert "sessionstore on PostgreSQL" in result.stdout
