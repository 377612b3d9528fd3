"""The clocks a caller hands ``append_message``, ``append_messages_batch`` and
``replace_messages``, taken as iot 0.22.2's writers take them, never refused: iot's gateway
writes ``datetime.now().isoformat()`` into a transcript row, and a refused append is a message
its transcript queue retries and finally drops. A clock no reader trusts (outside 1970...2103)
is the time of the write, with a warning, and the message is kept. Found by upstream Hermes's
``test_corrupt_row_robustness.py`` (the third walk, 2026-12-05).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from sessionstore.api.session_db import SessionDB


@pytest.fixture
def db(store_url: str) -> Iterator[SessionDB]:
    database = SessionDB(url=store_url)
    database.create_session("s", "gateway")
    yield database
    database.close()


def stored_clocks(db: SessionDB) -> list[float]:
    return [row["timestamp"] for row in db.get_messages("s")]


def test_iso_text_numeric_text_and_datetimes_are_their_moment(db: SessionDB) -> None:
    moment = datetime(2025, 3, 4, 5, 6, 7, tzinfo=timezone.utc)
    expected = moment.timestamp()
    db.append_message("s", "user", "zulu", timestamp="2025-03-04T05:06:07Z")
    db.append_message("s", "user", "offset", timestamp="2025-03-04T06:06:07+01:00")
    db.append_message("s", "user", "text", timestamp=f" {expected} ")
    db.append_message("s", "user", "aware", timestamp=moment)
    db.append_messages_batch("s", [
        {"role": "assistant", "content": "batched", "timestamp": moment.isoformat()},
        {"role": "assistant", "content": "naive", "timestamp": moment.replace(tzinfo=None)},
    ])  # fmt: skip
    clocks = stored_clocks(db)
    assert clocks[:5] == [expected] * 5
    # A naive datetime is local time, as datetime.timestamp() reads it.
    assert clocks[5] == moment.replace(tzinfo=None).timestamp()


def test_a_clock_no_reader_trusts_is_the_time_of_the_write_and_the_message_stays(
    db: SessionDB, caplog: pytest.LogCaptureFixture
) -> None:
    before = time.time()
    with caplog.at_level(logging.WARNING):
        db.append_message("s", "user", "milliseconds", timestamp=1_741_064_767_000)
        db.append_message("s", "user", "before 1970", timestamp=-1.0)
        db.append_message("s", "user", "no time", timestamp="yesterday-ish")
        db.append_messages_batch("s", [
            {"role": "assistant", "content": "far future", "timestamp": 8.4e252},
            {"role": "assistant", "content": "text inf", "timestamp": "inf"},
        ])  # fmt: skip
    after = time.time()
    assert [m["content"] for m in db.get_messages("s")] == [
        "milliseconds", "before 1970", "no time", "far future", "text inf",
    ]  # fmt: skip
    assert all(before <= clock <= after + 1 for clock in stored_clocks(db))
    assert sum("no time inside 1970" in record.getMessage() for record in caplog.records) == 5


def test_an_empty_clock_is_the_time_of_the_write_without_a_warning(
    db: SessionDB, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING):
        db.append_message("s", "user", "blank", timestamp="")
    assert abs(stored_clocks(db)[0] - time.time()) < 60
    assert not [r for r in caplog.records if "1970" in r.getMessage()]


@pytest.mark.parametrize(
    ("clock", "error"),
    [(float("nan"), ValueError), (float("inf"), ValueError), (True, TypeError),
     ([1.0], TypeError), ({"at": 1.0}, TypeError), (b"1700000000", TypeError)],
)  # fmt: skip
def test_a_number_that_is_no_number_or_a_value_of_another_kind_is_refused(
    db: SessionDB, clock: object, error: type[Exception]
) -> None:
    with pytest.raises(error):
        db.append_message("s", "user", "refused", timestamp=clock)
    with pytest.raises(error):
        db.append_messages_batch("s", [{"role": "user", "content": "x", "timestamp": clock}])
    assert db.get_messages("s") == []


def test_a_clock_at_the_edge_of_the_window_is_kept(db: SessionDB) -> None:
    late = datetime(2103, 1, 1, tzinfo=timezone.utc) + timedelta(days=1)
    db.append_message("s", "user", "epoch", timestamp=0)
    db.append_message("s", "user", "late", timestamp=late.timestamp())
    assert stored_clocks(db) == [0.0, late.timestamp()]
