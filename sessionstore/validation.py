"""Checks applied to every text argument before it reaches the database.

Decisions (SPEC §7): a wrong type is a ``TypeError``; text that cannot be encoded as UTF-8 (a
lone surrogate) is a ``ValueError`` naming the argument. NUL characters are refused in
identifiers (ids, source, role, titles, tool names). In free text (message content,
reasoning, system prompts) SQLite keeps them as they are, as Hermes does; PostgreSQL cannot store
them in TEXT, so there they become U+FFFD (the Unicode replacement character) rather than losing
the whole message.
"""

from __future__ import annotations

from typing import Any

REPLACEMENT_CHARACTER = "\ufffd"


def _check_encodable(value: str, name: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{name} contains characters that are not valid Unicode text "
            f"(lone surrogate at position {exc.start})"
        ) from None


def identifier(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    _check_encodable(value, name)
    if "\x00" in value:
        raise ValueError(f"{name} must not contain NUL characters")
    return value


def optional_identifier(value: Any, name: str) -> str | None:
    return None if value is None else identifier(value, name)


def free_text(value: Any, name: str, *, nul_allowed: bool) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str or None, not {type(value).__name__}")
    _check_encodable(value, name)
    if not nul_allowed and "\x00" in value:
        return value.replace("\x00", REPLACEMENT_CHARACTER)
    return value


def integer(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return value


def optional_number(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number or None, not {type(value).__name__}")
    return float(value)
