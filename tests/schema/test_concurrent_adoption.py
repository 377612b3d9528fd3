"""Eight processes adopting one Hermes file at the same moment (a gateway's workers after an
upgrade, ``db upgrade`` runs): exactly one backs it up and migrates, the others wait for its
lock and then find nothing to do. No error, one backup, nothing else left beside the file.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from adoption_race import race, race_server
from file_checks import snapshot
from legacy_v1_v6 import build_legacy_db
from prefork import ForkServer

from sessionstore.schema import migrate

OPENERS = 8


@pytest.fixture(scope="module")
def races() -> Iterator[ForkServer | None]:
    """The races' programs, forked from one that imported the package once (``race_server``)."""
    with race_server() as server:
        yield server


@pytest.mark.parametrize(
    "kinds",
    [
        ["sessiondb"] * OPENERS,
        ["cli"] * OPENERS,
        ["sessiondb", "cli"] * (OPENERS // 2),
    ],
    ids=["SessionDB", "db upgrade", "both"],
)
def test_one_opener_backs_up_and_migrates_the_others_find_it_done(
    tmp_path: Path, kinds: list[str], races: ForkServer | None
) -> None:
    path = tmp_path / "state.db"
    build_legacy_db(path, 6)
    os.chmod(path, 0o600)
    before = snapshot(path)

    outcomes = race(path, kinds, server=races)

    failures = [
        (o.kind, o.exit_code, o.report, o.stderr[-2000:])
        for o in outcomes
        if o.exit_code != 0 or "error" in o.report
    ]
    assert failures == []
    backups = [o.report["backup"] for o in outcomes if o.report.get("backup")]
    assert len(backups) == 1, [o.report for o in outcomes]
    backup = Path(backups[0])
    # The CLI runs that waited say so: they changed nothing.
    waited = [o.report for o in outcomes if o.kind == "cli" and not o.report.get("backup")]
    assert all(report["changed"] is False for report in waited), waited

    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, backup.name])
    assert not backup.is_symlink() and backup.stat().st_mode & 0o777 == 0o600
    assert snapshot(backup) == before  # the backup is the file as Hermes left it
    assert migrate.status(f"sqlite:///{path}").up_to_date
    after = snapshot(path)
    assert [row["id"] for row in after["messages"]] == [row["id"] for row in before["messages"]]
    assert [row["content"] for row in after["messages"]] == [
        row["content"] for row in before["messages"]
    ]
