"""Message content that is not text (OpenAI multi-part lists), stored the way Hermes stores it.

Hermes (every release from 0.13.0 on, ``SessionDB._encode_content``) keeps a ``list``/``dict``
content as ``"\\x00json:" + json.dumps(content)`` and gives the value back decoded from
``get_messages``, ``get_messages_as_conversation`` and exports; search context and picker
previews show its text parts. Real users' files hold such rows (pasted screenshots), so this
package writes and reads the same form: a file stays readable by both programs.

PostgreSQL cannot store NUL and keeps it as U+FFFD (``validation.free_text``), so the marker
read back there is ``"\\ufffdjson:"``; both markers decode. A text message that merely starts
with ``json:`` is text.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Final

from .codec import text_of_blob

logger = logging.getLogger(__name__)

JSON_CONTENT_PREFIX: Final = "\x00json:"
"""Hermes's marker for structured content (``SessionDB._CONTENT_JSON_PREFIX``)."""
STORED_ON_POSTGRESQL_PREFIX: Final = "\ufffdjson:"
"""The marker as PostgreSQL keeps it (NUL becomes U+FFFD there). On SQLite, whose text
functions stop at the first NUL, a marked value has ``length() = 0``: SQL can tell marked
values without binding a NUL, which PostgreSQL could not take."""
_PREFIXES: Final = (JSON_CONTENT_PREFIX, STORED_ON_POSTGRESQL_PREFIX)
ENCODED_CONTENT_PREFIXES: Final = _PREFIXES
"""What a stored value marked as structured content starts with (``is_encoded``)."""
MULTIMODAL_PLACEHOLDER: Final = "[multimodal content]"


def encode_content(content: Any) -> Any:
    """What Hermes binds for ``content``: text (and numbers) as they are, lists and dicts as
    the marked JSON text. Text that itself starts with a marker is stored as a marked JSON
    string (iot 0.22.2's ``_encode_content``), so a read gives that text back, never a
    structure someone wrote after the marker."""
    if isinstance(content, str) and is_encoded(content):
        return JSON_CONTENT_PREFIX + json.dumps(content)
    if content is None or isinstance(content, (str, bytes, int, float)):
        return content
    try:
        return JSON_CONTENT_PREFIX + json.dumps(content)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"content is not JSON-serialisable: {exc}") from None


def hermes_form(stored: Any) -> Any:
    """A stored value as a store that keeps NUL holds it: the PostgreSQL form of the marker
    (``"\\ufffdjson:"``) back to Hermes's ``"\\x00json:"``, so a row copied from PostgreSQL
    into a SQLite file is multi-part content for Hermes too, not text."""
    if isinstance(stored, str) and stored.startswith(STORED_ON_POSTGRESQL_PREFIX):
        return JSON_CONTENT_PREFIX + stored[len(STORED_ON_POSTGRESQL_PREFIX):]
    return stored


def is_encoded(stored: Any) -> bool:
    return isinstance(stored, str) and stored.startswith(_PREFIXES)


def decode_content(stored: Any) -> Any:
    """The value a caller stored: marked JSON decoded, anything else as it is (an undecodable
    marked value stays the stored text, as in Hermes)."""
    if not is_encoded(stored):
        return stored
    try:
        return json.loads(stored[len(JSON_CONTENT_PREFIX):])
    except ValueError:
        logger.warning("message content marked as JSON does not decode; returned as stored")
        return stored


def text_of(stored: Any) -> str:
    """The readable text of a content value (search context, previews): a multi-part list's
    text parts joined, ``[multimodal content]`` when it has none, as Hermes renders them."""
    if isinstance(stored, (bytes, bytearray, memoryview)):  # a text cell stored as a BLOB
        stored = text_of_blob(stored)
    decoded = decode_content(stored)
    if isinstance(decoded, list):
        parts = [
            part.get("text", "") for part in decoded
            if isinstance(part, dict) and part.get("type") == "text"
        ]  # fmt: skip
        return " ".join(text for text in parts if text).strip() or MULTIMODAL_PLACEHOLDER
    return decoded if isinstance(decoded, str) else ""
