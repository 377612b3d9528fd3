"""Closing is orderly (issue 30, item 7; reproduction 8): ``close()`` while other threads (or
tasks) append, as a gateway shutting down with turns in flight.

For every writer: a write that returned is stored, a write that failed is not, and the only
failure is ``StoreClosedError``. Before the fix the append in progress raised a bare
``OSError`` (the writers' queue descriptor closed under it) although its row was committed,
the other writers waited the whole 20 s budget for a lock nobody held and got
``StoreBusyError``, and the ``-writelock`` side file could stay behind.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from sessionstore import AsyncSessionDB, SessionDB, StoreClosedError
from sessionstore.dialects import database_file
from sessionstore.errors import SessionStoreError

WRITERS = 8
SESSION = "closing"


class _Writer:
    def __init__(self, number: int) -> None:
        self.number = number
        self.acked: list[str] = []
        self.failed: str | None = None
        self.error: BaseException | None = None


def _contents(url: str) -> set[str]:
    with SessionDB(url=url) as db:
        return {m["content"] for m in db.get_messages(SESSION)}


def _check(url: str, writers: list[_Writer]) -> None:
    stored = _contents(url)
    for writer in writers:
        assert isinstance(writer.error, StoreClosedError), (writer.number, writer.error)
        missing = set(writer.acked) - stored
        assert not missing, f"writer {writer.number}: acknowledged but not stored: {missing}"
        assert writer.failed not in stored, f"writer {writer.number}: failed but stored"
    assert stored == {text for w in writers for text in w.acked} | {"first"}
    path = database_file(url)
    if path is not None:
        for side in ("-writelock", "-writegate"):
            assert not path.with_name(path.name + side).exists(), f"{side} left"


@pytest.mark.parametrize("batch", [False, True], ids=["append_message", "append_messages"])
def test_close_while_threads_append(store_url: str, batch: bool) -> None:
    db = SessionDB(url=store_url)
    db.create_session(SESSION, "cli")
    db.append_message(SESSION, "user", "first")
    writers = [_Writer(n) for n in range(WRITERS)]
    started = threading.Barrier(WRITERS + 1)
    some_written = threading.Semaphore(0)

    def write(writer: _Writer) -> None:
        started.wait()
        for k in range(10**6):
            text = f"w{writer.number}-{k}"
            try:
                if batch:
                    db.append_messages(SESSION, [{"role": "user", "content": text}])
                else:
                    db.append_message(SESSION, "user", text)
            except BaseException as exc:
                writer.failed, writer.error = text, exc
                return
            writer.acked.append(text)
            if k == 2:
                some_written.release()

    threads = [threading.Thread(target=write, args=(w,), daemon=True) for w in writers]
    for thread in threads:
        thread.start()
    started.wait()
    for _ in range(WRITERS):
        assert some_written.acquire(timeout=120)
    db.close()
    for thread in threads:
        thread.join(120)  # a hang guard only: every writer is failed or finished at once
        assert not thread.is_alive()
    _check(store_url, writers)


def test_every_call_after_close_is_refused_typed(store_url: str) -> None:
    db = SessionDB(url=store_url)
    db.create_session(SESSION, "cli")
    db.close()
    db.close()  # idempotent
    calls = [
        lambda: db.append_message(SESSION, "user", "late"),
        lambda: db.get_messages(SESSION),
        lambda: db.search_messages("late"),
        lambda: db.list_sessions_rich(),
        lambda: db.update_token_counts(SESSION, input_tokens=1),
    ]
    for call in calls:
        with pytest.raises(StoreClosedError) as raised:
            call()
        assert isinstance(raised.value, SessionStoreError)
    with pytest.raises(StoreClosedError), db.store.reading():
        pass
    assert _contents(store_url) == set()


def test_close_while_readers_read(store_url: str) -> None:
    """Reads running at close() finish with their answer; later ones are refused typed."""
    db = SessionDB(url=store_url)
    db.create_session(SESSION, "cli")
    db.append_messages(SESSION, [{"role": "user", "content": f"m{n}"} for n in range(50)])
    outcomes: list[object] = []
    go = threading.Event()

    def read() -> None:
        go.wait()
        while True:
            try:
                messages = db.get_messages(SESSION)
            except BaseException as exc:
                outcomes.append(exc)
                return
            assert len(messages) == 50

    threads = [threading.Thread(target=read, daemon=True) for _ in range(4)]
    for thread in threads:
        thread.start()
    go.set()
    db.close()
    for thread in threads:
        thread.join(120)
        assert not thread.is_alive()
    assert len(outcomes) == 4 and all(isinstance(e, StoreClosedError) for e in outcomes)


def test_async_close_while_tasks_append(store_url: str, tmp_path: Path) -> None:
    """``AsyncSessionDB.close()`` while tasks append: the writes queued before it finish, the
    ones after are refused typed; acknowledged exactly when stored."""

    async def main() -> list[_Writer]:
        db = AsyncSessionDB(url=store_url)
        await db.create_session(SESSION, "cli")
        await db.append_message(SESSION, "user", "first")
        writers = [_Writer(n) for n in range(WRITERS)]
        some_written = asyncio.Event()

        async def write(writer: _Writer) -> None:
            for k in range(10**6):
                text = f"w{writer.number}-{k}"
                try:
                    await db.append_message(SESSION, "user", text)
                except BaseException as exc:
                    writer.failed, writer.error = text, exc
                    return
                writer.acked.append(text)
                if k == 2:
                    some_written.set()

        tasks = [asyncio.create_task(write(w)) for w in writers]
        await some_written.wait()
        await db.aclose()
        await asyncio.wait_for(asyncio.gather(*tasks), 120)
        return writers

    _check(store_url, asyncio.run(main()))
