#!/usr/bin/env python3
"""PostgreSQL search against sessionstore's own SQLite search, on one store pair (issue 31).

    .venv/bin/python scripts/bench_pg_search.py [--messages 100000] [--rounds 7]
        [--url postgresql+psycopg://postgres@127.0.0.1:5432/postgres] [--db bench_pgsearch]
        [--workdir /var/tmp/ss-pgsearch] [--reload] [--drop] [--tree DIR]
        [--before FILE [--before-db NAME]] [--only CATEGORY] [--per-query] [--dump FILE]
        [--explain QUERY ... [--generic]]

The store pair is loaded the way users load one (docs/postgresql.md): ``scripts/bench.py``'s
corpus (deterministic; ``--messages`` of it, 200 per session) written into a Hermes 0.18.0
file by that Hermes's own ``SessionDB``, adopted and upgraded by ours (the SQLite side), and
that Hermes file ``db copy``-ed into a fresh PostgreSQL database ``--db`` (created on the
server of ``--url``, dropped first when it exists and ``--reload`` is given; ``db copy``
``ANALYZE``s what it filled), then a few hundred appends through ``SessionDB``, then the
documented ``ANALYZE``. Both are reused by the next run unless ``--reload``; ``--drop`` drops
the database at the end. ``--tree DIR`` loads (and searches) with another checkout's package:
``git archive main | tar -x -C DIR``, then ``--tree DIR --db bench_pgsearch_main --reload
--rounds 0`` makes main's store.

Every search case of ``scripts/bench.py`` (``search_cases``) is run on both sides, interleaved
call by call in a rotating order: wall time, and CPU time: this thread's plus the PostgreSQL
backends' of the database (``/proc/PID/schedstat``: what they ran, not their wait for a CPU on
a shared machine). Per category: the median of the calls, and of the per-call ratio to
SQLite. ``--before FILE`` adds a third side: another copy of
``sessionstore/search/postgresql.py`` (say main's, from ``git show main:...``), swapped in for
each of its calls, on this store or on ``--before-db`` (main's store, as above).

``--dump FILE`` writes every case's PostgreSQL results under every variant of
``bench_search_cpu.py`` (page, offset, time orders, filters) as JSON, to compare before and
after a change. ``--explain`` prints ``EXPLAIN (ANALYZE, BUFFERS)`` of each statement a search
of that query sends (captured from the engine, run again with the same parameters).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _tree_first() -> None:
    """``--tree DIR``: import ``sessionstore`` from DIR (another checkout, say main's
    ``git archive`` unpacked), ahead of this venv's editable install, to load (``--db``) a
    store the way that tree does."""
    if "--tree" in sys.argv[1:-1]:
        sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
        sys.path.insert(0, sys.argv[sys.argv.index("--tree") + 1])


_tree_first()

import bench  # noqa: E402
import bench_search_cpu  # noqa: E402
import sqlalchemy as sa  # noqa: E402
from sqlalchemy import event  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from sessionstore.api.session_db import SessionDB  # noqa: E402
from sessionstore.ops import transfer  # noqa: E402
from sessionstore.search import registry  # noqa: E402

DEFAULT_ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
CATEGORIES = bench_search_cpu.CATEGORIES
APPENDED_TURNS = 40


def sqlite_store(workdir: Path, messages: int, cache: Path) -> tuple[Path, bench.Corpus]:
    """Our adopted copy of Hermes 0.18.0's file of the bench corpus (made once, reused)."""
    workdir.mkdir(parents=True, exist_ok=True)
    os.environ["HERMES_HOME"] = str(workdir / "hermes_home")
    roots = {"0.18.0": bench.unpacked_hermes(cache)}
    _, ours, corpus = bench.quick_files(workdir, roots, messages)
    return ours, corpus


def database_exists(admin_url: str, name: str) -> bool:
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            return bool(conn.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"),
                                     {"n": name}).first())
    finally:
        admin.dispose()


def admin_execute(admin_url: str, statement: str) -> None:
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(statement))
    finally:
        admin.dispose()


def load_postgresql(url: str, source: Path, workdir: Path) -> None:
    """``db copy`` from a copy of ``source`` (the Hermes 0.18.0 file: ``db copy`` adopts it, as
    any tree can), appends, then ``ANALYZE``."""
    staging = workdir / "pg_source.db"
    bench.copy_sqlite_file(source, staging)
    started = time.perf_counter()
    SessionDB(url=url).close()  # creates the schema, as the CLI's first open does
    result = transfer.copy(f"sqlite:///{staging}", url)
    print(f"db copy: {result.messages} messages in {time.perf_counter() - started:.1f} s",
          flush=True)
    import random

    text = bench.TextMaker(random.Random(bench.SEED + 1))
    call_ids = iter(range(9 * 10**7, 10**8))
    # The newest sessions (a store's appends go to its live ones); the corpus's session ids
    # are made afresh by each build, so they are read from the store.
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            sessions = iter(conn.execute(sa.text(
                "SELECT id FROM sessions ORDER BY started_at DESC LIMIT :n"
            ), {"n": APPENDED_TURNS}).scalars().all())
    finally:
        engine.dispose()
    db = SessionDB(url=url)
    try:
        appended = 0
        for _ in range(APPENDED_TURNS):
            session_id = next(sessions)
            for message in bench.make_turn(text, call_ids):
                db.append_message(session_id, **bench.hermes_kwargs(message))
                appended += 1
    finally:
        db.close()
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("ANALYZE"))
    finally:
        engine.dispose()
    print(f"appended {appended} messages, then ANALYZE", flush=True)


def before_index(path: Path) -> Any:
    """A search index built from another copy of ``search/postgresql.py``, imported inside the
    package (its relative imports resolve to this tree's modules)."""
    name = "sessionstore.search._bench_before_postgresql"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    # Its own per-connection cache of the store's layout (the two may shape it differently).
    module._LAYOUT_KEY = "sessionstore.bench_before.search_layout"
    return module.PostgreSQLSearchIndex()


@contextmanager
def index_swapped(index: Any) -> Iterator[None]:
    saved = registry._built.get("postgresql")
    registry._built["postgresql"] = index
    try:
        yield
    finally:
        if saved is None:
            registry._built.pop("postgresql", None)
        else:
            registry._built["postgresql"] = saved


def explain(db: SessionDB, query: str, *, generic: bool = False) -> None:
    """EXPLAIN (ANALYZE, BUFFERS) of every statement one search of ``query`` sends; with
    ``generic``, of the generic plan a statement prepared by psycopg (its fifth run) gets."""
    engine = db.store.engine
    captured: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
                executemany: bool) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "WITH")):
            captured.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", capture)
    try:
        db.search_messages(query)
    finally:
        event.remove(engine, "before_cursor_execute", capture)
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        if generic:
            cursor.execute("SET plan_cache_mode = force_generic_plan")
        for statement, parameters in captured:
            if "pg_catalog" in statement:
                continue
            for _ in range(3):  # this connection's catalog caches warm, as a store's are
                cursor.execute(statement, parameters)
                cursor.fetchall()
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, parameters)
            print(f"--- {query}")
            for (line,) in cursor.fetchall():
                print(line)
        raw.rollback()
    finally:
        raw.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--url", default=DEFAULT_ADMIN_URL,
                        help="a database on the server (the bench's database is made beside it)")
    parser.add_argument("--db", default="bench_pgsearch")
    parser.add_argument("--workdir", type=Path, default=Path("/var/tmp/ss-pgsearch"))
    parser.add_argument("--hermes-cache", type=Path, default=bench.DEFAULT_HERMES_CACHE)
    parser.add_argument("--reload", action="store_true", help="drop and load the database again")
    parser.add_argument("--drop", action="store_true", help="drop the database at the end")
    parser.add_argument("--before", type=Path, help="another search/postgresql.py to compare")
    parser.add_argument("--tree", type=Path, help="load and search with the sessionstore of "
                        "this checkout (see _tree_first)")
    parser.add_argument("--before-db", help="search this database (loaded by the other tree: "
                        "run this script with that tree first on PYTHONPATH) on that side")
    parser.add_argument("--only", action="append", default=[], metavar="CATEGORY")
    parser.add_argument("--dump", type=Path)
    parser.add_argument("--explain", nargs="*", metavar="QUERY")
    parser.add_argument("--generic", action="store_true",
                        help="--explain the generic plans (prepared statements) instead")
    parser.add_argument("--per-query", action="store_true", help="a line per query as well")
    args = parser.parse_args(argv)

    workdir = args.workdir / str(args.messages)
    sqlite_path, corpus = sqlite_store(workdir, args.messages, args.hermes_cache)
    url = make_url(args.url).set(database=args.db).render_as_string(hide_password=False)
    if args.reload and database_exists(args.url, args.db):
        admin_execute(args.url, f'DROP DATABASE "{args.db}" WITH (FORCE)')
    if not database_exists(args.url, args.db):
        admin_execute(args.url, f'CREATE DATABASE "{args.db}"')
        try:
            load_postgresql(url, workdir / "hermes_0.18.0.db", workdir)
        except BaseException:
            admin_execute(args.url, f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)')
            raise
    pg = SessionDB(url=url)
    try:
        if args.explain is not None:
            for query in args.explain:
                pg.search_messages(query)  # the layout lookup, once
                explain(pg, query, generic=args.generic)
            return 0
        cases = bench.search_cases(corpus.vocabulary)
        if args.dump:
            args.dump.write_text(json.dumps(bench_search_cpu.dump_results(pg, cases),
                                            ensure_ascii=False, indent=1, sort_keys=True))
            print(f"dumped {len(cases)} cases to {args.dump}")
        run(args, pg, sqlite_path, cases)
    finally:
        pg.close()
        if args.drop:
            admin_execute(args.url, f'DROP DATABASE IF EXISTS "{args.db}" WITH (FORCE)')
    return 0


def backend_pids(admin_url: str, database: str) -> list[int]:
    """The server processes of every connection to ``database`` but this one's."""
    admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            return [int(pid) for (pid,) in conn.execute(sa.text(
                "SELECT pid FROM pg_stat_activity WHERE datname = :d AND pid <> pg_backend_pid()"
            ), {"d": database})]
    finally:
        admin.dispose()


def backend_cpu(pids: list[int]) -> float:
    """Seconds the server processes ``pids`` have run on a CPU (``/proc/PID/schedstat``, in
    nanoseconds: what they ran, not what waiting for a CPU on a shared machine added)."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/schedstat", encoding="ascii") as stat:
            total += int(stat.read().split()[0])
    return total / 1e9


def run(args: argparse.Namespace, pg: SessionDB, sqlite_path: Path,
        cases: list[bench.SearchCase]) -> None:
    categories = tuple(args.only) or CATEGORIES
    cases = [case for case in cases if case.category in categories]
    ours = SessionDB(sqlite_path)
    sides: dict[str, Callable[[str], Any]] = {
        "sqlite": ours.search_messages,
        "pg": pg.search_messages,
    }
    if args.before:
        old = before_index(args.before)

        search = pg.search_messages
        if args.before_db:
            # The search service on one kept connection in a REPEATABLE READ transaction, as
            # SessionDB reads: SessionDB would upgrade that store (or refuse it), which must
            # stay as the other tree left it.
            from sessionstore.search.service import search_message_dicts
            from sessionstore.storage.engine import create_store_engine

            before_url = make_url(args.url).set(database=args.before_db)
            engine = create_store_engine(before_url.render_as_string(hide_password=False))
            kept = engine.connect().execution_options(isolation_level="REPEATABLE READ")

            def search(query: str) -> Any:
                with kept.begin():
                    return search_message_dicts(kept, query, source_filter=None,
                                                exclude_sources=None, role_filter=None)

        def before(query: str) -> Any:
            with index_swapped(old):
                return search(query)

        sides["pg before"] = before
    names = list(sides)
    for case in cases:  # warm caches and every prepared statement
        for _ in range(6):
            for call in sides.values():
                call(case.query)
    pids = backend_pids(args.url, args.db)
    if args.before_db:
        pids += backend_pids(args.url, args.before_db)
    wall: dict[str, dict[str, list[float]]] = {c: {n: [] for n in names} for c in categories}
    each: dict[str, dict[str, list[float]]] = {c.query: {n: [] for n in names} for c in cases}
    each_cpu: dict[str, dict[str, list[float]]] = {
        c.query: {n: [] for n in names} for c in cases}
    cpu: dict[str, dict[str, list[float]]] = {c: {n: [] for n in names} for c in categories}
    load = [os.getloadavg()[0]]
    for round_number in range(args.rounds):
        shift = round_number % len(names)
        order = names[shift:] + names[:shift]
        for case in cases:
            for name in order:
                server = backend_cpu(pids)
                started, started_cpu = time.perf_counter(), time.thread_time()
                sides[name](case.query)
                wall[case.category][name].append(time.perf_counter() - started)
                cpu[case.category][name].append(time.thread_time() - started_cpu
                                                + backend_cpu(pids) - server)
                each[case.query][name].append(wall[case.category][name][-1])
                each_cpu[case.query][name].append(cpu[case.category][name][-1])
    load.append(os.getloadavg()[0])
    ours.close()
    print(f"{args.messages} messages; every call of every case, {args.rounds} interleaved "
          f"rounds; load average {load[0]:.1f} -> {load[1]:.1f}")
    header = f"{'category':<12} {'n':>3}" + "".join(f" {n + ' ms':>14}" for n in names)
    header += "".join(f" {n + '/sqlite':>16}" for n in names[1:])
    header += "".join(f" {n + ' cpu':>12}" for n in names)
    header += "".join(f" {n + '/sqlite cpu':>18}" for n in names[1:])
    print(header)
    for category in categories:
        count = len(wall[category]["sqlite"])
        if not count:
            continue
        line = f"{category:<12} {count // args.rounds:>3}"
        medians = {n: statistics.median(wall[category][n]) for n in names}
        line += "".join(f" {medians[n] * 1e3:14.2f}" for n in names)
        for name in names[1:]:
            ratios = [p / s for p, s in zip(wall[category][name], wall[category]["sqlite"],
                                            strict=True)]
            line += f" {statistics.median(ratios):16.2f}"
        cpu_medians = {n: statistics.median(cpu[category][n]) for n in names}
        line += "".join(f" {cpu_medians[n] * 1e3:12.2f}" for n in names)
        for name in names[1:]:
            ratios = [p / s for p, s in zip(cpu[category][name], cpu[category]["sqlite"],
                                            strict=True)]
            line += f" {statistics.median(ratios):18.2f}"
        print(line)
    if args.per_query:
        for case in cases:
            medians = {n: statistics.median(each[case.query][n]) for n in names}
            cpus = {n: statistics.median(each_cpu[case.query][n]) for n in names}
            print(f"  {case.category:<12} {case.query:<24}"
                  + "".join(f" {medians[n] * 1e3:8.2f}" for n in names)
                  + f" {medians['pg'] / medians['sqlite']:6.2f}  cpu"
                  + "".join(f" {cpus[n] * 1e3:8.2f}" for n in names)
                  + f" {cpus['pg'] / cpus['sqlite']:6.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
