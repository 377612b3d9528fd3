"""Title cleaning and lineage numbering (pure functions; LIKE patterns checked in SQLite)."""

from __future__ import annotations

import re
import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessionstore.sessions.titles import (
    MAX_TITLE_LENGTH,
    lineage_like_pattern,
    next_title_in_lineage,
    sanitize_title,
    split_lineage,
)

# Every character class sanitize_title removes, with both ends of each range.
REMOVED_CHARACTERS = {
    "NUL": "\x00",
    "SOH": "\x01",
    "backspace": "\x08",
    "vertical tab": "\x0b",
    "form feed": "\x0c",
    "shift out": "\x0e",
    "unit separator": "\x1f",
    "DEL": "\x7f",
    "C1 first": "\x80",
    "C1 before NEL": "\x84",
    "C1 after NEL": "\x86",
    "C1 last": "\x9f",
    "soft hyphen": "\u00ad",
    "mongolian vowel separator": "\u180e",
    "zero-width space": "\u200b",
    "zero-width non-joiner": "\u200c",
    "zero-width joiner": "\u200d",
    "left-to-right mark": "\u200e",
    "right-to-left mark": "\u200f",
    "line separator": "\u2028",
    "paragraph separator": "\u2029",
    "left-to-right embedding": "\u202a",
    "pop directional formatting": "\u202c",
    "right-to-left override": "\u202e",
    "word joiner": "\u2060",
    "invisible times": "\u2062",
    "left-to-right isolate": "\u2066",
    "pop directional isolate": "\u2069",
    "byte-order mark": "\ufeff",
    "interlinear annotation anchor": "\ufff9",
    "interlinear annotation terminator": "\ufffb",
    "object replacement": "\ufffc",
}
# No driver can encode a lone surrogate; Hermes (0.19 on) keeps a visible U+FFFD in its place.
LONE_SURROGATES = {"lone high surrogate": "\ud800", "lone low surrogate": "\udfff"}
REMOVED_PATTERN = re.compile(
    r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x84\x86-\x9f\u00ad\u180e\u200b-\u200f"
    r"\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffc\ud800-\udfff]"
)

ANY_CHARACTER = st.characters(codec=None, exclude_categories=())  # surrogates included
TITLE_TEXT = st.one_of(
    st.text(ANY_CHARACTER, max_size=140),
    st.lists(
        st.one_of(
            st.sampled_from(
                [*REMOVED_CHARACTERS.values(), *LONE_SURROGATES.values(), " ", "\t", "\n", "\r",
                 "\x85"]
            ),
            st.text(max_size=4),
        ),
        max_size=60,
    ).map("".join),
)


@pytest.mark.parametrize(
    "character", list(REMOVED_CHARACTERS.values()), ids=list(REMOVED_CHARACTERS)
)
def test_invisible_and_control_characters_are_removed(character: str) -> None:
    assert sanitize_title(f"ab{character}cd") == "abcd"
    assert sanitize_title(f"{character}abcd{character}") == "abcd"


@pytest.mark.parametrize(
    "character", list(LONE_SURROGATES.values()), ids=list(LONE_SURROGATES)
)
def test_lone_surrogates_become_replacement_characters(character: str) -> None:
    assert sanitize_title(f"title {character} bad") == "title \ufffd bad"
    assert sanitize_title(character) == "\ufffd"


@pytest.mark.parametrize(
    "character",
    ["\t", "\n", "\r", "\r\n", "\x85", "\u00a0", "\u2003", "\u3000", "  \t \n "],
    ids=["tab", "newline", "CR", "CRLF", "NEL", "nbsp", "em space", "ideographic", "mixed"],
)
def test_whitespace_becomes_one_space(character: str) -> None:
    assert sanitize_title(f"ab{character}cd") == "ab cd"


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("My Session", "My Session"),
        ("  padded  ", "padded"),
        ("a  b\t\tc\n\nd", "a b c d"),
        ("a \u200b b", "a b"),  # the space runs meet once the invisible char is gone
        ("\u202eevil\u202c name", "evil name"),
        ("数据库重构 #2", "数据库重构 #2"),
        ("emoji 😀 ok", "emoji 😀 ok"),
        ("\u2027\u2070\u206a\ufffd\ufff8", "\u2027\u2070\u206a\ufffd\ufff8"),  # neighbours kept
        ("x" * MAX_TITLE_LENGTH, "x" * MAX_TITLE_LENGTH),
        ("  " + "x" * MAX_TITLE_LENGTH + "\u200b" * 20 + "  ", "x" * MAX_TITLE_LENGTH),
    ],
)
def test_sanitize_title(title: str, expected: str) -> None:
    assert sanitize_title(title) == expected


@pytest.mark.parametrize("title", [None, "", "   ", "\t\n\r", "\u200b\ufeff", "\x00\x01 \u202e"])
def test_nothing_visible_means_no_title(title: str | None) -> None:
    assert sanitize_title(title) is None


@pytest.mark.parametrize(
    "title", ["x" * (MAX_TITLE_LENGTH + 1), "word " * 30, "数" * 101, "a" * 10_000]
)
def test_too_long_title_is_refused(title: str) -> None:
    with pytest.raises(ValueError, match="too long"):
        sanitize_title(title)


@pytest.mark.parametrize("title", [42, b"bytes", ["list"], 1.5])
def test_a_title_must_be_text(title: object) -> None:
    with pytest.raises(TypeError):
        sanitize_title(title)  # type: ignore[arg-type]


@settings(max_examples=500, deadline=None)
@given(title=TITLE_TEXT)
def test_sanitized_title_is_clean_and_stable(title: str) -> None:
    try:
        cleaned = sanitize_title(title)
    except ValueError as error:
        assert "too long" in str(error)
        return
    if cleaned is None:
        return
    assert cleaned
    assert REMOVED_PATTERN.search(cleaned) is None
    assert cleaned == cleaned.strip()
    assert re.search(r"\s\s|[^\S ]", cleaned) is None  # only single plain spaces
    assert len(cleaned) <= MAX_TITLE_LENGTH
    assert sanitize_title(cleaned) == cleaned


# --------------------------------------------------------------------------------------------
# Lineage
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("name", ("name", None)),
        ("name #3", ("name", 3)),
        ("name #007", ("name", 7)),
        ("a #2 #3", ("a #2", 3)),
        ("name#3", ("name#3", None)),
        ("name #", ("name #", None)),
        ("name #3a", ("name #3a", None)),
        ("name #-3", ("name #-3", None)),
        ("name  #3", ("name ", 3)),
        (" #3", (" #3", None)),  # no base, no lineage
        ("#3", ("#3", None)),
        ("name #٣", ("name #٣", None)),  # only ASCII digits number a lineage
        ("name #3\n", ("name #3\n", None)),
        ("数据库重构 #12", ("数据库重构", 12)),
    ],
)
def test_split_lineage(title: str, expected: tuple[str, int | None]) -> None:
    assert split_lineage(title) == expected


@pytest.mark.parametrize(
    ("base_title", "existing", "expected"),
    [
        ("a", [], "a"),
        ("a", ["a"], "a #2"),
        ("a", ["a", "a #2"], "a #3"),
        ("a", ["a #2", "a"], "a #3"),
        ("a", ["a", "a #3"], "a #4"),  # gaps are not reused
        ("a", ["a #2"], "a #3"),  # the base is free, but its lineage goes on
        ("a #2", ["a", "a #2"], "a #3"),
        ("a #2", [], "a"),
        ("a #5", ["a"], "a #2"),
        ("a", ["a", "a #007"], "a #8"),
        ("a", ["A", "A #9", "ab #5", "a #x", "a #2b", "a #2 #7", "b"], "a"),
        ("a #2", ["a #2 #7"], "a"),  # "a #2 #7" belongs to "a #2", not to "a"
        ("a #2 #7", ["a #2", "a #2 #7"], "a #2 #8"),
        ("数据库重构", ["数据库重构"], "数据库重构 #2"),
        ("50%_off", ["50%_off", "50%_off #4", "50x_off #9"], "50%_off #5"),
        ("x (1) [y]+.*", ["x (1) [y]+.*", "x (1) [y]+.* #9"], "x (1) [y]+.* #10"),
        ("back\\slash", ["back\\slash #2"], "back\\slash #3"),
    ],
)
def test_next_title_in_lineage(base_title: str, existing: list[str], expected: str) -> None:
    assert next_title_in_lineage(base_title, existing) == expected
    assert next_title_in_lineage(base_title, iter(existing)) == expected


def test_lineage_numbering_walks_forward() -> None:
    titles: list[str] = []
    for _ in range(4):
        titles.append(next_title_in_lineage("name", titles))
    assert titles == ["name", "name #2", "name #3", "name #4"]


@settings(max_examples=500, deadline=None)
@given(
    base=st.text(min_size=1, max_size=12),
    numbers=st.lists(st.integers(min_value=1, max_value=10**6), max_size=8),
    include_base=st.booleans(),
    others=st.lists(st.text(max_size=15), max_size=5),
)
def test_next_title_is_never_taken(
    base: str, numbers: list[int], include_base: bool, others: list[str]
) -> None:
    existing = [f"{base} #{number}" for number in numbers] + others
    if include_base:
        existing.append(base)
    title = next_title_in_lineage(base, existing)
    assert title not in existing
    assert split_lineage(title)[0] == split_lineage(base)[0] or title == split_lineage(base)[0]


@pytest.mark.parametrize(
    ("base", "expected"),
    [
        ("a", "a #%"),
        ("50%_off", "50\\%\\_off #%"),
        ("back\\slash", "back\\\\slash #%"),
        ("数据库", "数据库 #%"),
    ],
)
def test_lineage_like_pattern(base: str, expected: str) -> None:
    assert lineage_like_pattern(base) == expected


@pytest.mark.parametrize(
    ("base", "stored", "expected_candidates", "expected_next"),
    [
        ("a", ["a", "a #2", "ab #3", "b #4", "a#5"], ["a", "a #2"], "a #3"),
        (
            "50%_off",
            ["50%_off #2", "50 percent off #7", "50x_off #9", "50%xoff #4", "50%_off"],
            ["50%_off", "50%_off #2"],
            "50%_off #3",
        ),
        (
            "back\\slash",
            ["back\\slash #4", "backslash #8", "back\\\\slash #9"],
            ["back\\slash #4"],
            "back\\slash #5",
        ),
        # SQLite's LIKE folds ASCII case: the candidate is fetched, but not counted.
        ("Name", ["Name", "name #6"], ["Name", "name #6"], "Name #2"),
    ],
)
def test_like_pattern_fetches_the_lineage_from_sqlite(
    base: str, stored: list[str], expected_candidates: list[str], expected_next: str
) -> None:
    connection = sqlite3.connect(":memory:")
    connection.execute("CREATE TABLE sessions (title TEXT)")
    connection.executemany("INSERT INTO sessions VALUES (?)", [(title,) for title in stored])
    candidates = [
        title
        for (title,) in connection.execute(
            "SELECT title FROM sessions WHERE title = ? OR title LIKE ? ESCAPE '\\'",
            (base, lineage_like_pattern(base)),
        )
    ]
    assert sorted(candidates) == sorted(expected_candidates)
    assert next_title_in_lineage(base, candidates) == expected_next


# The migrations' frozen copy of the lineage rule (revision 0004 renumbers duplicate titles
# with it) reads every title as the runtime does. If the runtime rule ever changes, this test
# says so: the frozen copy then stays as it is (old revisions never change), and this test
# pins the rule as of that revision instead.
@settings(max_examples=500, deadline=None)
@given(
    title=st.one_of(
        st.text(max_size=20),
        st.builds(
            lambda base, digits: f"{base} #{digits}",
            st.text(max_size=10),
            st.text(alphabet="0123456789٣\n ", min_size=0, max_size=4),
        ),
    )
)
def test_the_migrations_read_a_lineage_as_the_runtime_does(title: str) -> None:
    from sessionstore._migrations.helpers import _LINEAGE

    match = _LINEAGE.fullmatch(title)
    frozen = (match.group(1), int(match.group(2))) if match else (title, None)
    assert frozen == split_lineage(title)


@pytest.mark.parametrize("title", ["name #٣", " #3", "name #3\n"])
def test_titles_hermes_never_writes_are_no_lineage_in_the_migrations_either(title: str) -> None:
    from sessionstore._migrations.helpers import _LINEAGE

    assert _LINEAGE.fullmatch(title) is None
