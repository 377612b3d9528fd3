"""Trajectory files: finished or failed agent conversations appended as JSONL for later training.

Hermes-compatible: the same entry shape (``conversations``, ``timestamp``, ``model``,
``completed``), the same default file names in the current directory, and non-ASCII text kept as
is (``ensure_ascii=False``) so CJK and emoji stay readable and greppable. Unlike Hermes, each entry
is written with one ``write(2)`` on an ``O_APPEND`` descriptor, so batch runners in several
processes can share one file without their lines interleaving.

This is independent of the SQL session store: nothing here touches a database.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, overload

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: appends stay atomic, the look is best-effort
    fcntl = None  # type: ignore[assignment]

logger = logging.getLogger(__name__)

COMPLETED_TRAJECTORIES_FILENAME = "trajectory_samples.jsonl"
FAILED_TRAJECTORIES_FILENAME = "failed_trajectories.jsonl"

SCRATCHPAD_OPEN_TAG = "<REASONING_SCRATCHPAD>"
SCRATCHPAD_CLOSE_TAG = "</REASONING_SCRATCHPAD>"
THINK_OPEN_TAG = "<think>"
THINK_CLOSE_TAG = "</think>"

# The two tags cannot overlap each other, so one left-to-right regex scan sees exactly the
# sequence of tags a character-by-character scan would.
_SCRATCHPAD_TAG_PATTERN = re.compile(r"<(/?)REASONING_SCRATCHPAD>")

# Windows would otherwise open the descriptor in text mode and turn "\n" into "\r\n";
# close-on-exec keeps the descriptor out of subprocesses a tool may spawn meanwhile. Read
# access is for looking at the file's last byte (see ``_append_line``).
_APPEND_FLAGS = (
    os.O_RDWR
    | os.O_APPEND
    | os.O_CREAT
    | getattr(os, "O_BINARY", 0)
    | getattr(os, "O_CLOEXEC", 0)
)


def default_trajectory_filename(completed: bool) -> str:
    """The file Hermes appends to when no filename is given (relative to the current directory)."""
    return COMPLETED_TRAJECTORIES_FILENAME if completed else FAILED_TRAJECTORIES_FILENAME


def _check_trajectory_arguments(trajectory: object, model: object, completed: object) -> None:
    if not isinstance(trajectory, list):
        raise TypeError(
            f"trajectory must be a list of ShareGPT turns (dicts), not {type(trajectory).__name__}"
        )
    for index, turn in enumerate(trajectory):
        if not isinstance(turn, dict):
            raise TypeError(
                f"trajectory[{index}] must be a dict (a ShareGPT turn), not {type(turn).__name__}"
            )
    if not isinstance(model, str):
        raise TypeError(f"model must be a str, not {type(model).__name__}")
    if not isinstance(completed, bool):
        raise TypeError(f"completed must be a bool, not {type(completed).__name__}")


def _encode_entry_line(entry: dict[str, Any]) -> bytes:
    # Everything that can fail on the data (unserialisable values, circular references, lone
    # surrogates) fails here, before the file is opened, so a bad entry never leaves a half line.
    line = json.dumps(entry, ensure_ascii=False) + "\n"
    try:
        return line.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            "the trajectory contains text that cannot be written as UTF-8 "
            f"(a lone surrogate such as {exc.object[exc.start : exc.end]!r}); nothing was written"
        ) from exc


def _ends_mid_line(descriptor: int) -> bool:
    """True when the file's last byte is not a newline: a writer was killed mid-append."""
    if os.fstat(descriptor).st_size == 0:
        return False
    # O_APPEND sends every write to the end whatever the offset, so seeking to read is safe.
    os.lseek(descriptor, -1, os.SEEK_END)
    return os.read(descriptor, 1) != b"\n"


def _append_line(path: Path, data: bytes) -> None:
    descriptor = os.open(path, _APPEND_FLAGS, 0o666)
    try:
        if fcntl is not None:
            # Another saver's line may be half-way into the file while we look at its last
            # byte: savers take turns (flock, on this descriptor only; released by the close),
            # so the look and the write see whole lines.
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        if _ends_mid_line(descriptor):
            # Start on a fresh line, in the same write: glued onto a torn line, this entry would
            # be lost with it. Two savers racing here add at most a blank line, which loaders
            # skip.
            data = b"\n" + data
        written = os.write(descriptor, data)
        # A local regular file takes the whole buffer in one write, which is what keeps
        # concurrent appenders apart. Should the kernel ever accept less (disk filling up, a
        # network file system), finishing the line is still better than leaving a fragment that
        # the next writer's line would be glued onto, which would cost two entries instead of one.
        while written < len(data):
            written += os.write(descriptor, data[written:])
    finally:
        os.close(descriptor)


def save_trajectory(
    trajectory: list[dict[str, Any]],
    model: str,
    completed: bool,
    filename: str | os.PathLike[str] | None = None,
) -> Path:
    """Append one trajectory entry as a JSON line and return the absolute path written.

    Without ``filename`` the entry goes to ``trajectory_samples.jsonl`` (completed runs) or
    ``failed_trajectories.jsonl`` (failed runs) in the current directory, as in Hermes. Missing
    parent directories are created. Raises ``TypeError`` for arguments of the wrong type or values
    JSON cannot represent, and ``ValueError`` for circular references or text that is not valid
    Unicode; in every such case the file is left untouched.
    """
    _check_trajectory_arguments(trajectory, model, completed)
    if filename is None:
        filename = default_trajectory_filename(completed)
    if not os.fspath(filename):
        raise ValueError("filename must not be empty; pass None to use the default file")

    entry: dict[str, Any] = {
        "conversations": trajectory,
        "timestamp": datetime.now().isoformat(),
        "model": model,
        "completed": completed,
    }
    data = _encode_entry_line(entry)

    # Resolved once, so the returned path names the file written even if the process changes
    # directory afterwards.
    path = Path(os.path.abspath(filename))
    path.parent.mkdir(parents=True, exist_ok=True)
    _append_line(path, data)
    return path


@overload
def convert_scratchpad_to_think(content: str) -> str: ...
@overload
def convert_scratchpad_to_think(content: None) -> None: ...
def convert_scratchpad_to_think(content: str | None) -> str | None:
    """Rename ``<REASONING_SCRATCHPAD>`` tags to ``<think>`` tags for ShareGPT-style datasets.

    As in Hermes, text without an opening tag (including ``None`` and ``""``) is returned as is:
    a stray closing tag on its own is left alone.
    """
    if content is None:
        return None
    if not isinstance(content, str):
        raise TypeError(f"content must be a str or None, not {type(content).__name__}")
    if SCRATCHPAD_OPEN_TAG not in content:
        return content
    return content.replace(SCRATCHPAD_OPEN_TAG, THINK_OPEN_TAG).replace(
        SCRATCHPAD_CLOSE_TAG, THINK_CLOSE_TAG
    )


def has_incomplete_scratchpad(content: str | None) -> bool:
    """True when some ``<REASONING_SCRATCHPAD>`` is still open at the end (streaming cut off).

    Tags are matched in order, like brackets: a closing tag only closes an opening tag before it,
    so an earlier complete block cannot hide a later unclosed one, and a stray closing tag does
    not cancel a later opening one.
    """
    if content is None:
        return False
    if not isinstance(content, str):
        raise TypeError(f"content must be a str or None, not {type(content).__name__}")
    open_depth = 0
    for tag in _SCRATCHPAD_TAG_PATTERN.finditer(content):
        if not tag.group(1):
            open_depth += 1
        elif open_depth > 0:
            open_depth -= 1
    return open_depth > 0


def _parse_entry_line(raw_line: bytes) -> dict[str, Any] | None:
    try:
        entry = json.loads(raw_line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return entry if isinstance(entry, dict) else None


_ENTRY_START = b'{"conversations": '
"""How every saved entry begins (``conversations`` is its first key)."""


def _salvage_glued_entry(raw_line: bytes) -> dict[str, Any] | None:
    """The last whole entry in a line where an older writer glued it onto a torn one."""
    position = raw_line.rfind(_ENTRY_START)
    while position > 0:
        entry = _parse_entry_line(raw_line[position:])
        if entry is not None:
            return entry
        position = raw_line.rfind(_ENTRY_START, 0, position)
    return None


class TrajectoryEntries(Iterator[dict[str, Any]]):
    """The entries of a trajectory file, oldest first; lines that are not a whole entry are
    skipped and their numbers collected in :attr:`skipped_lines` (each also logged as a
    warning), wherever in the file they are."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.skipped_lines: list[int] = []
        self._entries = self._read()

    def __next__(self) -> dict[str, Any]:
        return next(self._entries)

    def _read(self) -> Iterator[dict[str, Any]]:
        with self.path.open("rb") as trajectory_file:
            for line_number, raw_line in enumerate(trajectory_file, start=1):
                if not raw_line.strip():
                    continue
                entry = _parse_entry_line(raw_line)
                if entry is None:
                    self.skipped_lines.append(line_number)
                    entry = _salvage_glued_entry(raw_line)
                    logger.warning(
                        "%s: skipped line %d: it is not a complete JSON trajectory entry, "
                        "probably an append that was cut off%s",
                        self.path,
                        line_number,
                        "; kept the whole entry that follows it on the same line"
                        if entry is not None
                        else "",
                    )
                    if entry is None:
                        continue
                yield entry


def load_trajectories(path: str | os.PathLike[str]) -> TrajectoryEntries:
    """Iterate over the entries of a trajectory JSONL file, oldest first.

    A line that is truncated or not valid JSON (a writer was killed mid-append), wherever it
    is, is skipped with a logged warning and its number added to the returned iterator's
    ``skipped_lines``; the file is never refused for it. A whole entry glued onto the end of a
    torn line (by writers older than this one, which did not start on a fresh line) is kept.
    Blank lines are ignored. A missing file raises ``FileNotFoundError`` here, not on first
    iteration.
    """
    trajectory_path = Path(path)
    if trajectory_path.is_dir():
        raise IsADirectoryError(f"{trajectory_path} is a directory, not a trajectory file")
    if not trajectory_path.exists():
        raise FileNotFoundError(f"no trajectory file at {trajectory_path}")
    return TrajectoryEntries(trajectory_path)
