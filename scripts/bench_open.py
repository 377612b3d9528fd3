"""A store's open and a short append, by CPU, in this checkout against another one.

    .venv/bin/python scripts/bench_open.py --against /work/main [--rounds 4] [--count 200]

Each side is a fresh interpreter of its own checkout's ``.venv`` (so its own ``sessionstore``),
the sides alternating A B B A each round. A side times, in CPU ms per call (``process_time``):

- ``new``: ``SessionDB(path).close()`` on ``--count`` blank files in ``/dev/shm`` (the process's
  first store, which runs the chain, is left out: the rest replay its image);
- ``existing``: the same on files already at head (each connection parses the whole schema);
- ``cjk`` / ``ascii``: ``append_message`` of a 200-character Chinese or a 228-character
  English message (the bigram triggers' token SQL, or only their ``WHEN``), the better of two
  runs of ``--count``.

The medians over rounds are printed per side, with every round's values. Written for
revision 0045 (the bigram triggers' text 20.6 -> 9.3 KB), see ``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CJK = "会话存储的中文消息，包含数据库迁移和检索的内容。" * 8
ASCII = "an English message about database migrations and search " * 4
MEASURES = ("new", "existing", "cjk", "ascii")


def _side(count: int) -> dict[str, float]:
    from sessionstore import SessionDB

    folder = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        SessionDB(os.path.join(folder, "first.db")).close()
        started = time.process_time()
        for number in range(count):
            SessionDB(os.path.join(folder, f"new{number}.db")).close()
        new = (time.process_time() - started) / count * 1000
        started = time.process_time()
        for number in range(count):
            SessionDB(os.path.join(folder, f"new{number % 20}.db")).close()
        existing = (time.process_time() - started) / count * 1000
        appends: dict[str, list[float]] = {"cjk": [], "ascii": []}
        with SessionDB(os.path.join(folder, "append.db")) as db:
            db.create_session("s", source="cli")
            for kind, text in (("cjk", CJK), ("ascii", ASCII), ("cjk", CJK), ("ascii", ASCII)):
                started = time.process_time()
                for _ in range(count):
                    db.append_message("s", "user", text)
                appends[kind].append((time.process_time() - started) / count * 1000)
        return {"new": new, "existing": existing, "cjk": min(appends["cjk"]),
                "ascii": min(appends["ascii"])}  # fmt: skip
    finally:
        shutil.rmtree(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", type=Path, help="the other checkout (side A)")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_side(args.count)))
        return
    if args.against is None:
        parser.error("--against DIR is required")
    here = Path(__file__).resolve().parent.parent
    pythons = {"A": args.against / ".venv/bin/python", "B": here / ".venv/bin/python"}
    results: dict[str, list[dict[str, float]]] = {"A": [], "B": []}
    for _ in range(args.rounds):
        for side in "ABBA":
            out = subprocess.run(
                [str(pythons[side]), __file__, "--child", "--count", str(args.count)],
                check=True, capture_output=True, text=True, cwd=tempfile.gettempdir(),
            ).stdout  # fmt: skip
            results[side].append(json.loads(out.splitlines()[-1]))
    print(f"A = {args.against}, B = {here}; load {os.getloadavg()[0]:.1f}; CPU ms per call")
    for measure in MEASURES:
        for side in "AB":
            values = [run[measure] for run in results[side]]
            print(f"{measure:9} {side} median {statistics.median(values):7.3f}  "
                  + " ".join(f"{v:.3f}" for v in values))  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
