"""What the machine can spare (``storage.host_memory``), which gates the unattended VACUUM."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sessionstore.storage import host_memory


def _total_bytes() -> int:
    return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))


def test_the_available_memory_is_some_of_the_machines() -> None:
    available = host_memory.available_bytes()
    assert available is not None and 0 < available <= _total_bytes()


@pytest.mark.parametrize(
    "meminfo",
    [None, "", "MemAvailable: lots kB\n", "MemTotal: 100 kB\n", "\x00\xff garbage"],
    ids=["missing", "empty", "not a number", "no such line", "binary"],
)
def test_an_unreadable_meminfo_falls_back_to_the_free_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, meminfo: str | None
) -> None:
    path = tmp_path / "meminfo"
    if meminfo is not None:
        path.write_bytes(meminfo.encode("utf-8", "surrogateescape"))
    monkeypatch.setattr(host_memory, "MEMINFO", path)
    available = host_memory.available_bytes()
    assert available == int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))


def test_meminfo_is_read_in_kibibytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "meminfo"
    path.write_text("MemTotal:       24684000 kB\nMemAvailable:    1234 kB\n")
    monkeypatch.setattr(host_memory, "MEMINFO", path)
    assert host_memory.available_bytes() == 1234 * 1024
