"""A COMMIT refused busy settles the write: nothing of it lands later, and the next write works.

In the rollback journal (``journal_mode=delete`` by choice, a home on NFS; or every file where
the SQLite in use cannot take WAL safely: the standard library's 3.40 on Linux on ARM), COMMIT
waits for readers to leave the file. When one outlasts the busy timeout, SQLite refuses the
COMMIT and keeps the transaction open, its lock held, so that COMMIT may be tried again.
SQLAlchemy counts that transaction as ended. The store kept that connection as its writer: the
next write met the open transaction ("cannot start a transaction within a transaction"), every
write after it too, and its lock held every other writer of the file off until the process
ended, with the refused write still pending inside it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.engine import URL

from sessionstore import SessionDB
from sessionstore.errors import StoreBusyError
from sessionstore.storage.retry import RetryPolicy


def _url(path: Path) -> str:
    query = {"journal_mode": "delete"}
    return URL.create("sqlite", database=str(path), query=query).render_as_string()


@pytest.mark.parametrize("writes_before", [0, 3])
def test_a_commit_refused_busy_leaves_nothing_behind(tmp_path: Path, writes_before: int) -> None:
    url = _url(tmp_path / "state.db")
    quick = RetryPolicy(max_attempts=2, budget_s=2.0)
    with SessionDB(url=url, busy_timeout_s=0.05, retry=quick) as writer, SessionDB(
        url=url
    ) as other:
        writer.create_session("s", "cli")
        for index in range(writes_before):
            writer.append_message("s", "user", f"before {index}")
        with other.store.engine.connect() as conn, conn.begin():
            # A reader inside the file (a read transaction on the store's own connection;
            # ``store.reading()`` reads a private copy here and holds nobody off): the writer's
            # COMMIT cannot take its exclusive lock.
            assert conn.exec_driver_sql("SELECT count(*) FROM messages").scalar() == writes_before
            with pytest.raises(StoreBusyError):
                writer.append_message("s", "user", "refused")
        # The reader has left: the writer goes on, and so does every other writer.
        writer.append_message("s", "user", "after")
        other.append_message("s", "assistant", "from the other store")
        expected = [f"before {index}" for index in range(writes_before)] + [
            "after",
            "from the other store",
        ]
        for db in (writer, other):
            assert [m["content"] for m in db.get_messages("s")] == expected
            assert db.get_session("s")["message_count"] == len(expected)
    with SessionDB(url=url) as reopened:  # nothing of the refused write landed later
        assert [m["content"] for m in reopened.get_messages("s")] == expected
        assert reopened.search_messages("refused") == []


def test_the_dialects_see_a_transaction_the_driver_still_holds(store_url: str) -> None:
    """What the write path asks after a failure, on each dialect: the driver's own state,
    not SQLAlchemy's, which a failed COMMIT has already cleared."""
    with SessionDB(url=store_url) as db:
        store = db.store
        with store.engine.connect() as conn:
            assert not store.dialect.driver_in_transaction(conn)
            with conn.begin():
                conn.exec_driver_sql("SELECT count(*) FROM sessions").scalar()
                assert store.dialect.driver_in_transaction(conn)
            assert not store.dialect.driver_in_transaction(conn)
            conn.invalidate()
            assert not store.dialect.driver_in_transaction(conn)
