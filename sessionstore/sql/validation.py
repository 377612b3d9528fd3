"""Checks applied to every text argument before it reaches the database.

Decisions (SPEC §7): a wrong type is a ``TypeError``. NUL characters are refused in
identifiers (ids, source, role, titles, tool names). In free text (message content,
reasoning, system prompts) SQLite keeps them as they are, as Hermes does; PostgreSQL cannot store
them in TEXT, so there they become U+FFFD (the Unicode replacement character) rather than losing
the whole message.

Lone surrogates (U+D800-U+DFFF: half of a UTF-16 pair, as a scraped web page or a cut emoji
leaves them) cannot be encoded as UTF-8, so neither sqlite3 nor psycopg can bind them. Where
they are text a person or a model wrote (free text, tool names, titles: :func:`free_text`,
:func:`optional_name`, ``sessions.titles.sanitize_title``) each becomes U+FFFD before the
write, as Hermes (0.19 on) does: one such character in a tool result must not stop a session
persisting, and never losing a message beats a typed error there. Inside JSON values (tool
calls, reasoning details, model config) they are kept as ``\\udc80``-style escapes
(:func:`escape_lone_surrogates_in_json`, Hermes's ``json.dumps`` writes them so), and read back
as they were given. Identifiers that are looked up by equality (session ids, sources, roles,
tool-call ids) still refuse them with a ``ValueError`` naming the argument: a replaced id would
be another session's key.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from ..errors import ValueOutOfRangeError

REPLACEMENT_CHARACTER = "\ufffd"

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
"""Every counter is a signed 64-bit integer on both databases (SQLite INTEGER, PostgreSQL
BIGINT since revision 0009)."""


def bindable(value: object) -> bool:
    """True for a ``str`` every driver can send and every database can hold: no NUL (which
    PostgreSQL text cannot hold) and no lone surrogate (which no driver can encode). The one
    test for lookup keys and filter values; a value that fails it can match no stored row."""
    return isinstance(value, str) and "\x00" not in value and _is_encodable(value)


@functools.cache
def _lone_surrogate() -> re.Pattern[str]:
    """Compiled on first use (nothing is built at import): only text with one needs it."""
    return re.compile(r"[\ud800-\udfff]")


def _is_encodable(value: str) -> bool:
    """True when ``value`` has no lone surrogate. ASCII (an O(1) flag) needs no scan."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def replace_lone_surrogates(value: str) -> str:
    """``value`` with each lone surrogate replaced by U+FFFD (the rest unchanged), so any
    driver can bind it; ``value`` itself when it has none."""
    return value if _is_encodable(value) else _lone_surrogate().sub(REPLACEMENT_CHARACTER, value)


def escape_lone_surrogates_in_json(text: str) -> str:
    """JSON text (``json.dumps(..., ensure_ascii=False)``) with each lone surrogate written as
    its ``\\udc80``-style escape: the same JSON value, now bindable. Outside strings JSON text is
    ASCII, so every surrogate is inside a string, where the escape is valid. A high surrogate
    directly followed by a low one reads back as the one character the two encode (JSON has no
    other reading of the two escapes), as the escapes of Hermes's ``json.dumps`` read too."""
    if _is_encodable(text):
        return text
    return _lone_surrogate().sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def _check_encodable(value: str, name: str) -> None:
    if value.isascii():  # no surrogate can be in it; and no copy of the text is made
        return
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


def optional_name(value: Any, name: str) -> str | None:
    """A name a model or a tool chose (a tool name): an :func:`optional_identifier` whose
    lone surrogates become U+FFFD instead of refusing the message that carries it."""
    if isinstance(value, str):
        value = replace_lone_surrogates(value)
    return optional_identifier(value, name)


SourceFilter = str | Sequence[str] | None
"""Which sessions' sources a listing, count, export or prune keeps: ``None`` every source, a
``str`` that one, a list (tuple, set) of ``str`` any of them (an empty one none, as search's
``source_filter=[]``)."""


def is_source_list(value: object) -> bool:
    """Several sources (a list, tuple or set), as :func:`sources` takes them."""
    return isinstance(value, (list, tuple, set, frozenset))


def sources(value: Any, name: str = "source") -> tuple[str, ...] | None:
    """A :data:`SourceFilter` as the sources it keeps (None: no filter), duplicates dropped.

    A bare ``str`` is one source (as Hermes passes it); any other non-sequence, or a
    sequence holding a non-``str``, is a ``TypeError``; each source is an :func:`identifier`
    (NUL or a lone surrogate is a ``ValueError``)."""
    if value is None:
        return None
    if isinstance(value, str):
        return (identifier(value, name),)
    if not is_source_list(value):
        raise TypeError(
            f"{name} must be a str or a list of str (or None), not {type(value).__name__}"
        )
    kept: dict[str, None] = {}
    for item in value:
        if not isinstance(item, str):
            raise TypeError(f"{name} items must be str, not {type(item).__name__}")
        kept[identifier(item, name)] = None
    return tuple(kept)


def tool_calls(value: Any, name: str = "tool_calls") -> Sequence[Mapping[str, Any]] | None:
    """A message's tool calls as OpenAI and Hermes write them: a list of tool-call objects
    (dicts), or the JSON text of one (what an export carries: iot 0.22.2 decodes it, so it is
    never stored twice encoded); None or an empty list is none. Anything else (a number, one
    bare dict, other text) is a ``TypeError`` naming the field: Hermes would store it and
    count it as one call, and every later read would find no call in it."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            decoded = json.loads(value)
        except ValueError:
            decoded = None
        if isinstance(decoded, list) and all(isinstance(call, Mapping) for call in decoded):
            return decoded
    if not isinstance(value, (list, tuple)):
        raise TypeError(
            f"{name} must be a list of tool-call dicts (or None), not {type(value).__name__}"
        )
    for index, call in enumerate(value):
        if not isinstance(call, Mapping):
            raise TypeError(
                f"{name}[{index}] must be a tool-call dict, not {type(call).__name__}"
            )
    return value


def tool_calls_text(value: str, name: str = "tool_calls") -> int:
    """Stored ``tool_calls`` text (``NewMessage`` takes the encoded form too): the JSON text of
    a list of tool-call objects, else a ``ValueError`` naming the field. Returns how many
    calls it holds."""
    try:
        decoded = json.loads(value)
    except ValueError:
        raise ValueError(
            f"{name} is not JSON text (give the list of tool-call dicts, or its JSON)"
        ) from None
    if not isinstance(decoded, list) or not all(isinstance(call, dict) for call in decoded):
        raise ValueError(f"{name} must be the JSON text of a list of tool-call objects")
    return len(decoded)


def free_text(value: Any, name: str, *, nul_allowed: bool) -> str | None:
    """Text a person or a model wrote, as the store keeps it: lone surrogates as U+FFFD; NUL
    as it is where ``nul_allowed`` (SQLite), else as U+FFFD (PostgreSQL)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str or None, not {type(value).__name__}")
    text = replace_lone_surrogates(value)
    if not nul_allowed and "\x00" in text:
        return text.replace("\x00", REPLACEMENT_CHARACTER)
    return text


def flag(value: Any, name: str) -> bool:
    """A yes/no keyword that is a ``bool``: another type (``1``, ``"no"``, None) is a
    ``TypeError``, where a truthiness test would read ``"no"`` as yes."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
    return value


def id_list(value: Any, name: str) -> Any:
    """Ids given as a list (any iterable but text): a single ``str`` or ``bytes`` is a
    ``TypeError``, where iterating it, as Hermes's own code would, takes each character for
    an id (and a long one for that many ids)."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{name} must be a list of ids, not a single {type(value).__name__}")
    return value


def integer(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    return value


def mapping(value: Any, name: str) -> Mapping[Any, Any]:
    """A mapping (``{cwd: root}``, a message): ``TypeError`` for anything else."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a mapping, not {type(value).__name__}")
    return value


def row_id(value: Any, name: str) -> int | None:
    """A row id to look up or compare with: ``TypeError`` for another type; None for an
    integer beyond signed 64 bits, which no row can have (ids are 64-bit on both databases)
    and no driver can bind: the caller answers as for an id that is not there."""
    checked = integer(value, name)
    return checked if INT64_MIN <= checked <= INT64_MAX else None


def counter(value: Any, name: str) -> int:
    """An integer a counter column can hold: ``TypeError`` for another type,
    :class:`ValueOutOfRangeError` (a ``ValueError``) beyond signed 64 bits."""
    checked = integer(value, name)
    if not INT64_MIN <= checked <= INT64_MAX:
        raise ValueOutOfRangeError(
            f"{name}={checked} does not fit in a 64-bit counter (|value| < 2**63); nothing was "
            "written"
        )
    return checked


def number(value: Any, name: str) -> float:
    """A finite number as float. NaN and infinities are refused (``ValueError``): stored, one
    of them would wipe (SQLite: NULL) or poison (PostgreSQL: NaN forever) every total it is
    added to."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    try:
        result = float(value)
    except OverflowError:
        raise ValueOutOfRangeError(f"{name} is too large to store as a number") from None
    if not math.isfinite(result):
        raise ValueError(f"{name} must be a finite number, not {result!r}")
    return result


EPOCH_MIN: Final = 0.0
EPOCH_MAX: Final = 4_200_000_000.0
"""iot's ``coerce_epoch`` window (1970...2103): a clock outside it (a damaged cell, text, a
value in milliseconds) is not trusted."""

_log = logging.getLogger(__name__)


def epoch(value: Any) -> float | None:
    """iot's ``coerce_epoch``: a timestamp (a number, numeric text, a ``datetime``) as float
    seconds; None when unset or untrusted (outside :data:`EPOCH_MIN`...:data:`EPOCH_MAX`)."""
    if value is None or value == "":
        return None
    try:
        stamp = float(value.timestamp()) if isinstance(value, datetime) else float(value)
    except (TypeError, ValueError, OverflowError, OSError):
        stamp = math.nan
    return stamp if EPOCH_MIN <= stamp <= EPOCH_MAX else None


def _iso_time(text: str) -> datetime | None:
    """ISO 8601 text as a ``datetime`` (a trailing ``Z`` read as UTC on every Python), else None."""
    text = text.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def iso_moment(text: str) -> float | None:
    """ISO 8601 text as the moment it names, in epoch seconds (naive text in local time, as
    ``datetime.now().isoformat()`` wrote it); None for text that is no such time, or one
    outside 1970...2103."""
    return epoch(_iso_time(text))


def message_timestamp(value: Any) -> float | None:
    """A message's ``timestamp`` as iot 0.22.2's writers take it; None means the time of the
    write. A number, numeric text, a ``datetime`` or ISO 8601 text (iot's gateway hands
    ``datetime.now().isoformat()`` to ``append_message``) is its moment; one outside
    1970...2103 (milliseconds, a damaged value) or text that is no time is written as the time
    of the write, with a warning, as iot does: the message is kept and no reader is handed a
    clock none of them trusts. A number that is NaN or infinite is a ``ValueError``, any other
    type a ``TypeError``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str, datetime)):
        raise TypeError(
            f"timestamp must be a number, text or a datetime, not {type(value).__name__}"
        )
    if not isinstance(value, (str, datetime)):
        number(value, "timestamp")
    stamp = epoch(value)
    if stamp is None and isinstance(value, str):
        stamp = iso_moment(value)
    if stamp is None and value != "":
        _log.warning(
            "message timestamp %.80r is no time inside 1970...2103: the message is stamped "
            "with the time of the write",
            value,
        )
    return stamp


def optional_number(value: Any, name: str) -> float | None:
    """:func:`number`, or None."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number or None, not {type(value).__name__}")
    return number(value, name)
