"""SQLite URL parameters are honoured or refused, typed; read-only media read through
``immutable=1`` (issue 27, item 6).

``?immutable=1`` or ``?cache=shared`` on a plain SQLite URL failed with SQLAlchemy's raw "no
such access mode: ro?immutable=1", and a WAL store on read-only media could not be read at all
(SQLite needs to create its ``-shm`` beside it). Now ``mode``, ``immutable``, ``cache=private``
and ``uri`` are honoured, in the URL's query and in a ``file:`` URI's own query alike; anything
else is a ``StoreLocationError`` (a ``ValueError``) before anything is opened, and a usage
error in the CLI. A store that read-only media keeps from opening says how to read it.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.engine import URL
from store_library import needs_wal
from typer.testing import CliRunner

from sessionstore import cli
from sessionstore.api.session_db import SessionDB
from sessionstore.errors import ReadOnlyStoreError, StoreLocationError, StoreUnavailableError
from sessionstore.schema import migrate
from sessionstore.storage.store import Store


def url_of(path: Path, **query: str) -> str:
    return URL.create("sqlite", database=str(path), query=query).render_as_string()


@pytest.fixture
def store_file(tmp_path: Path) -> Path:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s1", "cli")
        db.append_message("s1", "user", "hello from the store")
    return path


def read_first_message(url: str) -> str:
    with SessionDB(url=url) as db:
        return str(db.get_messages("s1")[0]["content"])


@pytest.mark.parametrize(
    "query",
    [{"mode": "ro"}, {"immutable": "1"}, {"cache": "private"}, {"mode": "ro", "cache": "private"},
     {"immutable": "1", "mode": "ro"}, {"immutable": "0"}, {"mode": "rw"}, {"mode": "rwc"},
     {"uri": "true"}],
)  # fmt: skip
def test_parameters_are_honoured(store_file: Path, query: dict[str, str]) -> None:
    url = url_of(store_file, **query)
    assert read_first_message(url) == "hello from the store"
    read_only = query.get("mode") == "ro" or query.get("immutable") == "1"
    with SessionDB(url=url) as db:
        if read_only:
            with pytest.raises(ReadOnlyStoreError):
                db.append_message("s1", "user", "refused")
        else:
            db.append_message("s1", "user", "written")


def test_a_file_uri_carries_them_too(store_file: Path) -> None:
    uri = f"sqlite:///file:{store_file}?immutable=1&uri=true"
    assert read_first_message(uri) == "hello from the store"
    uri_with_both = f"sqlite:///file:{store_file}?cache=private&uri=true&mode=ro"
    assert read_first_message(uri_with_both) == "hello from the store"


def test_an_unknown_vfs_is_a_location_error(tmp_path: Path) -> None:
    path = tmp_path / "never.db"
    with pytest.raises(StoreLocationError, match="VFS"):
        SessionDB(url=url_of(path, vfs="no-such-vfs"))
    assert not path.exists()


def test_mode_rw_never_creates_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    with pytest.raises(StoreUnavailableError):
        SessionDB(url=url_of(missing, mode="rw"))
    assert not missing.exists()


@pytest.mark.parametrize(
    "query",
    [{"cache": "shared"}, {"bogus": "1"}, {"mode": "sideways"}, {"immutable": "2"},
     {"timeout": "5"}, {"nolock": "1"}],
)  # fmt: skip
def test_other_parameters_are_refused_typed_before_anything_is_opened(
    tmp_path: Path, query: dict[str, str]
) -> None:
    path = tmp_path / "never.db"
    url = url_of(path, **query)
    for open_it in (lambda: SessionDB(url=url), lambda: Store.open(url),
                    lambda: migrate.upgrade(url), lambda: migrate.status(url)):  # fmt: skip
        with pytest.raises(StoreLocationError, match=next(iter(query))):
            open_it()
    assert not path.exists()
    result = CliRunner().invoke(cli.app, ["--url", url, "sessions", "list"])
    assert result.exit_code == 2
    assert "bad database URL" in result.stderr and "Traceback" not in result.output


QUERY_KEYS = st.sampled_from(["mode", "immutable", "cache", "uri", "nolock", "x", "journal_mode"])
QUERY_VALUES = st.sampled_from(["ro", "rw", "rwc", "memory", "0", "1", "2", "private",
                                "shared", "true", "", "?", "&=", "ro?x=1", "delete", "wal",
                                "WAL"])  # fmt: skip


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(query=st.dictionaries(QUERY_KEYS, QUERY_VALUES, max_size=3))
def test_any_query_opens_the_store_or_is_refused_typed(
    store_file: Path, query: dict[str, str]
) -> None:
    before = store_file.read_bytes()
    url = url_of(store_file, **query)
    try:
        with SessionDB(url=url, read_only=True) as db:
            messages = db.get_messages("s1")
    except StoreLocationError:
        return
    if query.get("mode") == "memory" and query.get("uri", "").lower() == "true":
        assert messages == []  # a named in-memory database of that name, not the file
    else:
        assert [m["content"] for m in messages] == ["hello from the store"]
    assert store_file.read_bytes() == before


# -- read-only media --------------------------------------------------------------------------
@contextmanager
def read_only_mount(directory: Path) -> Iterator[Path]:
    directory.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(directory)],
                             capture_output=True, text=True, check=False)  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield directory
    finally:
        subprocess.run(["umount", str(directory)], check=False)
        if os.path.ismount(directory):
            subprocess.run(["umount", "-l", str(directory)], check=False)


def remount_read_only(directory: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(directory)], check=True)


@needs_wal()
def test_a_wal_store_on_read_only_media_reads_through_immutable(tmp_path: Path) -> None:
    with read_only_mount(tmp_path / "media") as media:
        path = media / "state.db"
        with SessionDB(path) as db:  # WAL, closed cleanly: no -wal left
            db.create_session("s1", "cli")
            db.append_message("s1", "user", "hello from the media")
        remount_read_only(media)

        runner = CliRunner(env={"COLUMNS": "200"})
        refused = runner.invoke(cli.app, ["--url", str(path), "sessions", "list"])
        assert refused.exit_code == 1
        hint = refused.stderr.split("`")[1]
        assert hint == f"sessionstore --url 'sqlite:///{path}?immutable=1' sessions list"
        followed = runner.invoke(cli.app, shlex.split(hint)[1:])
        assert followed.exit_code == 0 and "hello from the media" in followed.stdout
        with pytest.raises(StoreUnavailableError, match="immutable=1"):
            SessionDB(path, read_only=True)
        immutable = f"sqlite:///{path}?immutable=1"
        with SessionDB(url=immutable) as db:
            assert db.get_messages("s1")[0]["content"] == "hello from the media"
            assert [hit["session_id"] for hit in db.search_messages("media")] == ["s1"]
        assert sorted(os.listdir(media)) == ["state.db"]


_WRITE_AND_DIE = """
import os, sys
from sessionstore.api.session_db import SessionDB
db = SessionDB(sys.argv[1])
db.create_session("s1", "cli")
db.append_message("s1", "user", "only in the log")
os._exit(0)  # no close, no checkpoint: the message stays in the -wal
"""


@needs_wal()
def test_immutable_refuses_a_store_whose_log_it_would_not_read(tmp_path: Path) -> None:
    with read_only_mount(tmp_path / "media") as media:
        path = media / "state.db"
        subprocess.run([sys.executable, "-c", _WRITE_AND_DIE, str(path)], check=True)
        assert (media / "state.db-wal").stat().st_size > 0
        remount_read_only(media)
        with pytest.raises(StoreUnavailableError, match="immutable=1 would not see"):
            SessionDB(url=f"sqlite:///{path}?immutable=1")


_DOTFILE_WRITER = """
import sys
from store_library import connect_like_the_store
path = sys.argv[1]
writer = connect_like_the_store(f"file:{path}?vfs=unix-dotfile", uri=True, isolation_level=None)
writer.execute("PRAGMA cache_size = 10")  # spill changed pages into the file before COMMIT
writer.execute("BEGIN IMMEDIATE")
writer.execute("UPDATE messages SET content = content || ' (edited)'")
print("inside", flush=True)
sys.stdin.readline()
writer.execute("COMMIT")
print("committed", flush=True)
"""


def test_a_reader_through_the_urls_vfs_never_rolls_back_a_live_writers_journal(
    tmp_path: Path,
) -> None:
    """A store URL naming ``vfs=unix-dotfile`` (a file system without working ``fcntl``
    locks): its writers lock with a ``.lock`` directory. A read-only open looked for a hot
    journal (one a dead writer left) through the default layer, which does not see that lock:
    a live writer's journal looked dead, was played back under it, and the writer's COMMIT
    failed "database disk image is malformed", its transaction gone. The look goes through the
    URL's layer now: the reader waits (busy), the writer commits."""
    from sessionstore.errors import StoreBusyError
    from sessionstore.storage.retry import RetryPolicy
    from sessionstore.storage.store import Store

    path = tmp_path / "state.db"
    url = f"sqlite:///{path}?vfs=unix-dotfile&journal_mode=delete"
    with SessionDB(url=url) as db:
        db.create_session("s", "cli")
        for index in range(200):
            db.append_message("s", "user", f"{index} " + "x" * 2000)
    support = str(Path(__file__).resolve().parents[1] / "support")
    writer = subprocess.Popen(
        [sys.executable, "-c", _DOTFILE_WRITER, str(path)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": support},
    )  # fmt: skip
    try:
        assert writer.stdout is not None and writer.stdin is not None
        assert writer.stdout.readline().strip() == "inside"
        assert Path(f"{path}-journal").stat().st_size > 0  # a live writer's journal
        reader = Store.open(url, read_only=True, retry=RetryPolicy(max_attempts=2, budget_s=0.5))
        try:
            with pytest.raises(StoreBusyError):
                reader.read(lambda conn: conn.exec_driver_sql("SELECT count(*) FROM messages"))
        finally:
            reader.close()
        writer.stdin.write("\n")
        writer.stdin.flush()
        assert writer.stdout.readline().strip() == "committed"
        writer.wait(30)
    finally:
        if writer.poll() is None:
            writer.kill()
        writer.wait(30)
    assert writer.returncode == 0
    with SessionDB(url=url) as db:
        contents = [m["content"] for m in db.get_messages("s")]
    assert len(contents) == 200 and all(c.endswith(" (edited)") for c in contents)


def test_a_suggested_command_keeps_the_stores_vfs() -> None:
    """A command the package suggests (``db upgrade``, ``db doctor --fix``) names the store's
    VFS: run under another one, it would write beside the store's writers under locks they
    cannot see."""
    from sessionstore.storage.command_hints import cli_command

    url = "sqlite:////srv/nfs/state.db?vfs=unix-dotfile"
    words = shlex.split(cli_command(url, "db", "upgrade"))
    assert words[:2] == ["sessionstore", "--url"] and words[3:] == ["db", "upgrade"]
    assert "vfs=unix-dotfile" in words[2] and words[2].startswith("sqlite:////srv/nfs/state.db")
