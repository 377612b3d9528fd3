"""iot 0.22.2's ``adopt_session_lineage_from`` (issue 29, item 3): a compression lineage moves
from a donor store (a SQLite file) into ours on each dialect with every row, archived and
rewound ones included; the donor's segments are ended ``adopted_by_profile`` and archived,
never deleted; a second call skips what is here; a donor that grew since retires nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sessionstore.api.session_db import SessionDB
from sessionstore.errors import UnsupportedValueError


@pytest.fixture
def stores(store_url: str, tmp_path: Path) -> Iterator[tuple[SessionDB, SessionDB]]:
    donor = SessionDB(tmp_path / "donor.db")
    target = SessionDB(url=store_url)
    donor.create_session("p", "telegram")
    first = donor.append_message("p", "user", "ask")
    donor.append_message("p", "assistant", "answer")
    assert first > 0
    donor.end_session("p", "compression")
    donor.create_session("c", "telegram", parent_session_id="p")
    donor.append_message("c", "user", "next")
    yield donor, target
    target.close()
    donor.close()


def test_a_lineage_moves_whole_and_the_donor_is_retired_not_deleted(
    stores: tuple[SessionDB, SessionDB],
) -> None:
    donor, target = stores
    first = target.adopt_session_lineage_from(donor, "c", retire_donor=False)
    assert first["adopted"] and first["imported"] == 2 and not first["donor_retired"]
    assert target.count_messages_all("p") == 2 and target.count_messages_all("c") == 1
    result = target.adopt_session_lineage_from(donor, "c")  # idempotent: all skipped
    assert result["ok"] and result["adopted"] and result["donor_retired"]
    assert result["skipped"] == 2 and result["imported"] == 0
    for segment in ("p", "c"):
        retired = donor.get_session(segment)
        assert retired is not None and retired["end_reason"] == "adopted_by_profile"
        assert retired["archived"] == 1 and donor.count_messages_all(segment) >= 1


def test_a_donor_that_grew_since_is_not_retired(stores: tuple[SessionDB, SessionDB]) -> None:
    donor, target = stores
    assert target.adopt_session_lineage_from(donor, "c", retire_donor=False)["adopted"]
    donor.append_message("c", "assistant", "a reply that landed later")
    result = target.adopt_session_lineage_from(donor, "c")
    assert result["adopted"] and result["donor_retired"] is False
    kept = donor.get_session("c")
    assert kept is not None and kept["archived"] == 0


def test_an_unknown_session_is_no_adoption(stores: tuple[SessionDB, SessionDB]) -> None:
    donor, target = stores
    result = target.adopt_session_lineage_from(donor, "nobody")
    assert result["ok"] is False and result["adopted"] is False and "error" in result


def test_a_lineage_with_inactive_rows_is_refused_untouched(
    stores: tuple[SessionDB, SessionDB],
) -> None:
    donor, target = stores
    row = donor.append_message("c", "user", "undone")
    donor.rewind_to_message("c", row)
    with pytest.raises(UnsupportedValueError):
        target.adopt_session_lineage_from(donor, "c")
    assert target.get_session("c") is None and target.get_session("p") is None
    kept = donor.get_session("c")
    assert kept is not None and kept["archived"] == 0 and kept["end_reason"] is None
