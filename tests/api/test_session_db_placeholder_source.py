"""A session written to before it was created carries the placeholder source ``unknown``
until its own ``create_session`` names the real one (iot 0.22.2, #111999); and a rewind of a
session that does not exist is a ``ValueError`` as in Hermes. Side by side with the real iot
in ``tests/hermes/test_real_iot_session_upserts.py``."""

from __future__ import annotations

import pytest

from sessionstore import UnknownRewindSessionError, UnknownSessionError
from sessionstore.api.session_db import SessionDB


def test_create_session_replaces_only_the_placeholder_source(db: SessionDB) -> None:
    db.record_auxiliary_usage("s", "title", model="m", input_tokens=1)
    first = db.get_session("s")
    assert first is not None
    assert (first["source"], first["created_source"]) == ("unknown", "unknown")

    db.create_session("s", "telegram")
    db.create_session("s", "cli")  # a real source is never replaced
    db.ensure_session("s")

    session = db.get_session("s")
    assert session is not None
    assert (session["source"], session["created_source"]) == ("telegram", "unknown")
    assert [row["id"] for row in db.list_sessions_rich(source="telegram")] == ["s"]


def test_a_rewind_of_a_session_that_does_not_exist_is_a_value_error(db: SessionDB) -> None:
    with pytest.raises(ValueError) as raised:
        db.rewind_to_message("nobody", 1)
    assert isinstance(raised.value, UnknownSessionError)
    assert isinstance(raised.value, UnknownRewindSessionError)
