"""``scripts/bench.py --async`` (``scripts/bench_async.py``) runs end to end and prints its tables.

Not a timed test: only the shape of the output is checked (both sides for every task count on
both dialects, the run with another process holding the lock, no failed turn).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pg_server import pg_admin_url

# Slow: runs scripts/bench.py --async in a subprocess on both dialects (the full run only).
pytestmark = pytest.mark.slow

BENCH = Path(__file__).resolve().parents[2] / "scripts" / "bench.py"
# side, tasks, turns/s, ... max lag, failures
ROW = re.compile(
    r"^(to_thread\(SessionDB\)|AsyncSessionDB)\s+(\d+)\s+([\d.]+)\s.*?(\d+)ms\s+(\d+)\s", re.M
)


def test_bench_async_reports_both_sides_on_both_dialects(require_postgresql: None) -> None:
    result = subprocess.run(
        [sys.executable, str(BENCH), "--async", "--quick", "--tasks", "1,10", "--hold", "0.5",
         "--pg-url", pg_admin_url()],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": str(BENCH.parents[1])},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    sqlite_part, postgresql_part = result.stdout.split("\nPostgreSQL:")
    for part, runs in ((sqlite_part, 3), (postgresql_part, 2)):
        rows = ROW.findall(part)
        assert len(rows) == 2 * runs, part
        assert {(side, int(tasks)) for side, tasks, *_ in rows} == {
            (side, tasks) for side in ("to_thread(SessionDB)", "AsyncSessionDB")
            for tasks in (1, 10)
        }  # fmt: skip
        assert all(float(turns) > 0 and int(fails) == 0 for _, _, turns, _, fails in rows)
    assert "another process holds the write lock 0.5 s" in sqlite_part
