"""Trajectory JSONL files: Hermes-compatible entries, safe concurrent appends, scratchpads."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionstore.hermes.trajectory import (
    convert_scratchpad_to_think,
    has_incomplete_scratchpad,
    load_trajectories,
    save_trajectory,
)

OPEN = "<REASONING_SCRATCHPAD>"
CLOSE = "</REASONING_SCRATCHPAD>"

CJK_AND_EMOJI_TURNS: list[dict[str, Any]] = [
    {"from": "system", "value": "You are a helpful assistant."},
    {"from": "human", "value": "你好，世界！日本語のテキスト、한국어 텍스트 🚀🎉👩‍👩‍👧"},
    {"from": "gpt", "value": "<think>思考中…</think>好的 ✅"},
]


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# --- save_trajectory: entry shape and encoding -------------------------------------------------


def test_round_trip_keeps_cjk_and_emoji_as_raw_utf8(tmp_path: Path) -> None:
    target = tmp_path / "samples.jsonl"
    before = datetime.now()

    written = save_trajectory(CJK_AND_EMOJI_TURNS, "hermes-3-405b", True, target)

    after = datetime.now()
    assert written == target
    raw = target.read_bytes()
    assert raw.endswith(b"\n") and raw.count(b"\n") == 1
    assert "你好，世界！".encode() in raw
    assert "🚀🎉👩‍👩‍👧".encode() in raw
    assert b"\\u" not in raw

    (entry,) = list(load_trajectories(target))
    assert list(entry) == ["conversations", "timestamp", "model", "completed"]
    assert entry["conversations"] == CJK_AND_EMOJI_TURNS
    assert entry["model"] == "hermes-3-405b"
    assert entry["completed"] is True
    # Hermes writes a naive local-time ISO timestamp; keep that so mixed files sort consistently.
    stamp = datetime.fromisoformat(entry["timestamp"])
    assert stamp.tzinfo is None
    assert before - timedelta(seconds=1) <= stamp <= after + timedelta(seconds=1)


@pytest.mark.parametrize(
    ("completed", "expected_name", "other_name"),
    [
        (True, "trajectory_samples.jsonl", "failed_trajectories.jsonl"),
        (False, "failed_trajectories.jsonl", "trajectory_samples.jsonl"),
    ],
)
def test_default_file_depends_on_completion(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    completed: bool,
    expected_name: str,
    other_name: str,
) -> None:
    monkeypatch.chdir(tmp_path)

    written = save_trajectory([{"from": "human", "value": "hi"}], "m", completed)

    assert written == tmp_path / expected_name
    assert read_lines(tmp_path / expected_name)[0]["completed"] is completed
    assert not (tmp_path / other_name).exists()


def test_relative_filename_returns_absolute_path_that_survives_chdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    written = save_trajectory([], "m", True, "out/run.jsonl")
    monkeypatch.chdir(tmp_path.parent)

    assert written.is_absolute()
    assert written == tmp_path / "out" / "run.jsonl"
    assert read_lines(written)[0]["conversations"] == []


@pytest.mark.parametrize("as_type", [str, Path], ids=["str", "PathLike"])
def test_creates_missing_parent_directories(tmp_path: Path, as_type: type[Any]) -> None:
    target = tmp_path / "a" / "b" / "c" / "t.jsonl"

    save_trajectory([{"from": "human", "value": "x"}], "m", False, as_type(target))

    assert read_lines(target)[0]["model"] == "m"


def test_appends_in_call_order_without_touching_existing_lines(tmp_path: Path) -> None:
    target = tmp_path / "t.jsonl"
    target.write_text('{"existing": true}\n', encoding="utf-8")

    for index in range(5):
        save_trajectory([{"from": "human", "value": str(index)}], f"model-{index}", True, target)

    lines = read_lines(target)
    assert lines[0] == {"existing": True}
    assert [line["model"] for line in lines[1:]] == [f"model-{index}" for index in range(5)]


def test_each_entry_is_one_write_of_the_whole_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = os.write
    writes: list[bytes] = []

    def recording_write(descriptor: int, data: bytes) -> int:
        writes.append(bytes(data))
        return real_write(descriptor, data)

    monkeypatch.setattr(os, "write", recording_write)
    turns = [{"from": "gpt", "value": "長い" * 10_000}]
    save_trajectory(turns, "m", True, tmp_path / "t.jsonl")

    assert len(writes) == 1
    assert writes[0].endswith(b"\n") and writes[0].count(b"\n") == 1
    assert json.loads(writes[0])["conversations"] == turns


def test_short_write_is_completed_rather_than_leaving_a_fragment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = os.write
    calls = 0

    def stingy_write(descriptor: int, data: bytes) -> int:
        nonlocal calls
        calls += 1
        # The first call accepts only a few bytes, as a nearly full disk or NFS might.
        return real_write(descriptor, data[:7] if calls == 1 else data)

    monkeypatch.setattr(os, "write", stingy_write)
    target = tmp_path / "t.jsonl"
    save_trajectory([{"from": "human", "value": "完整"}], "m", True, target)

    assert calls == 2
    assert read_lines(target)[0]["conversations"] == [{"from": "human", "value": "完整"}]


# --- concurrent writers in several processes -----------------------------------------------------

WRITER_PROCESSES = 4
LINES_PER_WRITER = 200
# Larger than PIPE_BUF (4096) and than typical stdio buffers, so interleaving would show if the
# line were written in pieces.
PAYLOAD = "並行書き込み🧵" * 1500


def append_many(path: str, writer_id: int, start_together: Any) -> None:
    start_together.wait()
    for sequence in range(LINES_PER_WRITER):
        turns = [{"from": "gpt", "value": PAYLOAD, "writer": writer_id, "sequence": sequence}]
        save_trajectory(turns, f"writer-{writer_id}", sequence % 2 == 0, path)


@pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="needs the fork start method"
)
def test_concurrent_processes_never_interleave_lines(tmp_path: Path) -> None:
    context = multiprocessing.get_context("fork")
    target = tmp_path / "shared" / "t.jsonl"
    start_together = context.Barrier(WRITER_PROCESSES)
    writers = [
        context.Process(target=append_many, args=(str(target), writer_id, start_together))
        for writer_id in range(WRITER_PROCESSES)
    ]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=120)
    assert [writer.exitcode for writer in writers] == [0] * WRITER_PROCESSES

    raw_lines = target.read_bytes().split(b"\n")
    assert raw_lines[-1] == b""  # the file ends with a newline, no trailing fragment
    entries = [json.loads(line) for line in raw_lines[:-1]]
    assert len(entries) == WRITER_PROCESSES * LINES_PER_WRITER
    seen_by_writer: dict[int, list[int]] = {writer_id: [] for writer_id in range(WRITER_PROCESSES)}
    for entry in entries:
        (turn,) = entry["conversations"]
        assert turn["value"] == PAYLOAD
        assert entry["model"] == f"writer-{turn['writer']}"
        seen_by_writer[turn["writer"]].append(turn["sequence"])
    # Each process's own lines appear complete and in the order it wrote them.
    assert all(seq == list(range(LINES_PER_WRITER)) for seq in seen_by_writer.values())


# --- bad input never leaves a half line ----------------------------------------------------------


class NotJson:
    pass


@pytest.mark.parametrize(
    "bad_turns",
    [
        [{"from": "human", "value": NotJson()}],
        [{"from": "human", "value": {1, 2}}],
        [{"from": "human", "value": b"bytes"}],
        [{"from": "human", "value": datetime(2024, 1, 1)}],
        [{"from": "human", "value": "fine"}, {("tuple", "key"): "value"}],
    ],
    ids=["object", "set", "bytes", "datetime", "tuple-key"],
)
def test_unserialisable_value_raises_type_error_and_leaves_file_unchanged(
    tmp_path: Path, bad_turns: list[dict[str, Any]]
) -> None:
    target = tmp_path / "t.jsonl"
    save_trajectory([{"from": "human", "value": "first"}], "m", True, target)
    before = target.read_bytes()

    with pytest.raises(TypeError):
        save_trajectory(bad_turns, "m", True, target)

    assert target.read_bytes() == before


def test_unserialisable_value_creates_neither_file_nor_directories(tmp_path: Path) -> None:
    target = tmp_path / "new-dir" / "t.jsonl"

    with pytest.raises(TypeError):
        save_trajectory([{"value": NotJson()}], "m", True, target)

    assert not target.parent.exists()


def make_circular_turns() -> list[dict[str, Any]]:
    turn: dict[str, Any] = {"from": "human"}
    turn["self"] = turn
    return [turn]


@pytest.mark.parametrize(
    ("bad_turns", "message"),
    [
        (make_circular_turns(), "Circular reference"),
        ([{"from": "human", "value": "half an emoji \ud83d"}], "lone surrogate"),
    ],
    ids=["circular", "lone-surrogate"],
)
def test_unencodable_trajectory_raises_value_error_and_leaves_file_unchanged(
    tmp_path: Path, bad_turns: list[dict[str, Any]], message: str
) -> None:
    target = tmp_path / "t.jsonl"
    save_trajectory([{"from": "human", "value": "first"}], "m", True, target)
    before = target.read_bytes()

    with pytest.raises(ValueError, match=message):
        save_trajectory(bad_turns, "m", True, target)

    assert target.read_bytes() == before


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (({"from": "human"}, "m", True), "trajectory must be a list"),
        ((["not a turn"], "m", True), r"trajectory\[0\] must be a dict"),
        (([], None, True), "model must be a str"),
        (([], "m", "yes"), "completed must be a bool"),
        (([], "m", 1), "completed must be a bool"),
    ],
    ids=["dict-trajectory", "str-turn", "none-model", "str-completed", "int-completed"],
)
def test_wrong_argument_types_raise_type_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arguments: tuple[Any, ...], message: str
) -> None:
    monkeypatch.chdir(tmp_path)

    with pytest.raises(TypeError, match=message):
        save_trajectory(*arguments)

    assert list(tmp_path.iterdir()) == []


def test_empty_filename_is_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    with pytest.raises(ValueError, match="filename must not be empty"):
        save_trajectory([], "m", True, "")

    assert list(tmp_path.iterdir()) == []


# --- load_trajectories ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "broken_tail",
    [
        b'{"conversations": [{"from": "human", "value": "cut',
        b'{"conversations": [], "model": "\xe6\x80',  # cut inside a UTF-8 sequence
        b"42\n",
        b"\xff\xfe not utf-8\n",
    ],
    ids=["truncated-json", "truncated-utf8", "not-an-object", "invalid-utf8"],
)
def test_load_skips_a_bad_last_line_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, broken_tail: bytes
) -> None:
    target = tmp_path / "t.jsonl"
    save_trajectory([{"from": "human", "value": "一"}], "m1", True, target)
    save_trajectory([{"from": "human", "value": "二"}], "m2", False, target)
    with target.open("ab") as handle:
        handle.write(broken_tail)

    with caplog.at_level(logging.WARNING, logger="sessionstore.hermes.trajectory"):
        entries = list(load_trajectories(target))

    assert [entry["model"] for entry in entries] == ["m1", "m2"]
    assert "skipped line 3" in caplog.text


@pytest.mark.parametrize(
    "torn",
    [b'{"broken', b'{"conversations": [{"from": "human", "value": "\xe6\x80', b"\xff\xfe", b"42"],
    ids=["truncated-json", "truncated-utf8", "invalid-utf8", "not-an-object"],
)
def test_a_torn_line_anywhere_is_skipped_and_reported_and_the_next_save_survives(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, torn: bytes
) -> None:
    """A saver killed mid-write leaves a line without its newline: the next save must start
    on a fresh line (not be glued on and lost), and the loader skips the torn one."""
    target = tmp_path / "t.jsonl"
    save_trajectory([], "m1", True, target)
    with target.open("ab") as handle:
        handle.write(torn)  # no newline: the writer died here
    save_trajectory([{"from": "human", "value": "二"}], "m2", True, target)
    save_trajectory([], "m3", True, target)
    with target.open("ab") as handle:
        handle.write(b'{"conversations": [], "mod')

    with caplog.at_level(logging.WARNING, logger="sessionstore.hermes.trajectory"):
        entries = load_trajectories(target)
        models = [entry["model"] for entry in entries]

    assert models == ["m1", "m2", "m3"]
    assert entries.skipped_lines == [2, 5]
    assert "skipped line 2" in caplog.text and "skipped line 5" in caplog.text


def test_an_entry_glued_onto_a_torn_line_by_an_older_writer_is_recovered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    target = tmp_path / "t.jsonl"
    glued = json.dumps({"conversations": [], "model": "glued", "completed": True})
    target.write_bytes(b'{"conversations": [{"from": "gpt", "value": "cu' + glued.encode()
                       + b"\n")
    save_trajectory([], "after", True, target)

    with caplog.at_level(logging.WARNING, logger="sessionstore.hermes.trajectory"):
        entries = load_trajectories(target)
        assert [entry["model"] for entry in entries] == ["glued", "after"]
    assert entries.skipped_lines == [1]


def test_load_ignores_blank_lines(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    target = tmp_path / "t.jsonl"
    save_trajectory([], "m1", True, target)
    with target.open("ab") as handle:
        handle.write(b"\n   \n")
    save_trajectory([], "m2", True, target)
    with target.open("ab") as handle:
        handle.write(b"\n")

    with caplog.at_level(logging.WARNING, logger="sessionstore.hermes.trajectory"):
        assert [entry["model"] for entry in load_trajectories(target)] == ["m1", "m2"]
    assert caplog.text == ""


def test_load_empty_file_yields_nothing(tmp_path: Path) -> None:
    target = tmp_path / "t.jsonl"
    target.touch()

    assert list(load_trajectories(target)) == []


def test_load_missing_file_raises_immediately(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_trajectories(tmp_path / "absent.jsonl")


def test_load_directory_raises_immediately(tmp_path: Path) -> None:
    with pytest.raises(IsADirectoryError):
        load_trajectories(tmp_path)


# --- scratchpad helpers --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, None),
        ("", ""),
        ("plain answer", "plain answer"),
        (f"{OPEN}plan{CLOSE}answer", "<think>plan</think>answer"),
        (f"{OPEN}a{CLOSE} mid {OPEN}b{CLOSE}", "<think>a</think> mid <think>b</think>"),
        (f"{OPEN}outer {OPEN}inner{CLOSE}{CLOSE}", "<think>outer <think>inner</think></think>"),
        (f"{OPEN}cut off mid-stream", "<think>cut off mid-stream"),
        (f"{OPEN}a{CLOSE} then {OPEN}b", "<think>a</think> then <think>b"),
        # Hermes only converts when an opening tag is present; a stray closing tag stays.
        (f"stray {CLOSE} only", f"stray {CLOSE} only"),
        (f"{CLOSE}{OPEN}x", "</think><think>x"),
        (
            "<reasoning_scratchpad>lowercase</reasoning_scratchpad>",
            "<reasoning_scratchpad>lowercase</reasoning_scratchpad>",
        ),
        (f"{OPEN}思考🤔{CLOSE}答え", "<think>思考🤔</think>答え"),
    ],
    ids=[
        "none",
        "empty",
        "no-tags",
        "one-block",
        "multiple",
        "nested",
        "unclosed",
        "closed-then-open",
        "stray-close-only",
        "close-before-open",
        "case-sensitive",
        "cjk",
    ],
)
def test_convert_scratchpad_to_think(content: str | None, expected: str | None) -> None:
    assert convert_scratchpad_to_think(content) == expected


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, False),
        ("", False),
        ("no tags at all", False),
        (f"{OPEN}plan{CLOSE}answer", False),
        (f"{OPEN}a{CLOSE}{OPEN}b{CLOSE}", False),
        (f"{OPEN}cut off", True),
        (f"{OPEN}a{CLOSE} then {OPEN}b", True),
        (f"{OPEN}outer {OPEN}inner{CLOSE}{CLOSE}", False),
        (f"{OPEN}outer {OPEN}inner{CLOSE}", True),
        (f"{CLOSE}{OPEN}x", True),
        (f"{CLOSE} stray close", False),
        (f"{OPEN}a{CLOSE}{CLOSE}", False),
        (f"{OPEN}a{CLOSE}{CLOSE}{OPEN}b", True),
        ("<think>converted already", False),
        ("<REASONING_SCRATCHPAD", False),
    ],
    ids=[
        "none",
        "empty",
        "no-tags",
        "closed",
        "multiple-closed",
        "unclosed",
        "closed-then-open",
        "nested-closed",
        "nested-outer-open",
        "close-before-open",
        "stray-close",
        "extra-close",
        "extra-close-then-open",
        "think-tag",
        "partial-tag",
    ],
)
def test_has_incomplete_scratchpad(content: str | None, expected: bool) -> None:
    assert has_incomplete_scratchpad(content) is expected


@pytest.mark.parametrize(
    "helper", [convert_scratchpad_to_think, has_incomplete_scratchpad], ids=lambda f: f.__name__
)
@pytest.mark.parametrize("bad_content", [42, b"<REASONING_SCRATCHPAD>", ["text"]])
def test_scratchpad_helpers_reject_non_text(helper: Any, bad_content: object) -> None:
    with pytest.raises(TypeError, match="content must be a str or None"):
        helper(bad_content)


# --- hostile input (hypothesis) ------------------------------------------------------------------

# Random text rarely contains a whole tag, so mix tags and their fragments into it.
tag_heavy_text = st.lists(
    st.sampled_from([OPEN, CLOSE, "<", ">", "/", "REASONING_SCRATCHPAD", "<think>", "</think>"])
    | st.text(max_size=8),
    max_size=20,
).map("".join)
any_text = st.text() | tag_heavy_text


def bracket_matching_reference(content: str) -> bool:
    """Character-by-character scan: the obvious definition of 'an opening tag left open'."""
    depth = 0
    position = 0
    while position < len(content):
        if content.startswith(OPEN, position):
            depth += 1
            position += len(OPEN)
        elif content.startswith(CLOSE, position):
            depth = max(depth - 1, 0)
            position += len(CLOSE)
        else:
            position += 1
    return depth > 0


@given(any_text)
def test_convert_never_raises_and_is_idempotent(content: str) -> None:
    once = convert_scratchpad_to_think(content)
    assert convert_scratchpad_to_think(once) == once
    if OPEN in content:
        assert OPEN not in once and CLOSE not in once
    else:
        assert once == content


@given(any_text)
def test_has_incomplete_never_raises_and_matches_a_plain_scan(content: str) -> None:
    assert has_incomplete_scratchpad(content) is bracket_matching_reference(content)


@given(any_text)
def test_converted_text_never_looks_incomplete_when_it_had_tags(content: str) -> None:
    if OPEN in content:
        assert has_incomplete_scratchpad(convert_scratchpad_to_think(content)) is False


# Lone surrogates cannot be written as UTF-8; their rejection is tested above.
utf8_text = st.text(st.characters(codec="utf-8"))
json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | utf8_text
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(utf8_text, children, max_size=4)
    ),
    max_leaves=12,
)
turns_strategy = st.lists(
    st.dictionaries(utf8_text, json_values, max_size=4),
    max_size=4,
)


@settings(max_examples=60, deadline=None)
@given(turns=turns_strategy, model=utf8_text)
def test_any_json_trajectory_round_trips(
    tmp_path_factory: pytest.TempPathFactory, turns: list[dict[str, Any]], model: str
) -> None:
    target = tmp_path_factory.mktemp("round-trip") / "t.jsonl"

    save_trajectory(turns, model, False, target)

    (entry,) = list(load_trajectories(target))
    assert entry["conversations"] == turns
    assert entry["model"] == model
    assert entry["completed"] is False
