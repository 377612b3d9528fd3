"""Session titles: cleaning what users type, numbering a lineage ("name", "name #2", ...),
and the repository's title operations.

The rules are pure text functions (:func:`sanitize_title`, :func:`split_lineage`,
:func:`next_title_in_lineage`, :func:`lineage_like_pattern`); :class:`TitlesPart` fetches the
candidate titles with them and enforces uniqueness (one session per title, as Hermes's unique
index says).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from ..errors import CanonicalTitleError, TitleInUseError
from ..search.sanitize import escape_like, lazy_pattern
from ..sql import validation
from ..sql.codec import cell_text
from ..sql.records import SessionRecord
from ..sql.tables import sessions_table as sessions
from ..sql.validation import bindable
from .access import reads, writes
from .lineage import compression_ancestors_of
from .session_state import CANONICAL_BOT_CHAT_TITLE
from .shared import RepositoryPart, session_columns

__all__ = [
    "MAX_TITLE_LENGTH",
    "TitlesPart",
    "lineage_like_pattern",
    "next_title_in_lineage",
    "sanitize_title",
    "split_lineage",
]

MAX_TITLE_LENGTH: Final = 100

# Characters that render as nothing (or reorder the text around them) but still make two
# titles that look identical compare unequal, or smuggle a hidden payload into a prompt:
# - ASCII controls except tab, newline and CR, which are whitespace and collapse below;
# - C1 controls U+0080-U+009F except NEL U+0085 (a line break, so whitespace): invisible and
#   never meaningful in a title (our addition to the spec);
# - U+00AD soft hyphen and U+180E Mongolian vowel separator: invisible format characters
#   (our addition to the spec);
# - U+200B-U+200F zero-width space/joiners and direction marks (the zero-width joiner is
#   removed too, as the spec says, so emoji ZWJ sequences fall apart into their parts);
# - U+2028-U+202E line/paragraph separators and bidi embeddings/overrides;
# - U+2060-U+2069 word joiner, invisible operators and bidi isolates;
# - U+FEFF byte-order mark / zero-width no-break space;
# - U+FFF9-U+FFFC interlinear annotation marks and the object replacement character.
# Lone surrogates U+D800-U+DFFF, which no database driver can encode, become U+FFFD first
# (``validation.replace_lone_surrogates``, as Hermes's sanitize_title does), so the title keeps
# a visible mark where the broken character was.
_invisible_characters: Final = lazy_pattern(
    r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x80-\x84\x86-\x9f"
    r"\u00ad\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ufff9-\ufffc]"
)
_whitespace_run: Final = lazy_pattern(r"\s+")

# Only ASCII digits number a lineage: "name #٣" is a name, not "name" number 3. The base must
# not be empty: a title cannot start with a space once sanitized, so " #3" is no lineage.
_lineage_suffix: Final = lazy_pattern(r"(.+?) #([0-9]+)", re.DOTALL)


def sanitize_title(title: str | None) -> str | None:
    """Clean a user-supplied session title; ``None`` means "no title".

    Lone surrogates become U+FFFD; invisible and control characters are removed,
    tab/newline/CR and every other whitespace run become one space, the ends are stripped. An
    empty result is ``None``.

    Raises ``TypeError`` for anything but ``str`` or ``None`` and ``ValueError`` (message
    contains "too long") when more than :data:`MAX_TITLE_LENGTH` characters remain.
    """
    if title is None:
        return None
    if not isinstance(title, str):
        raise TypeError(f"title must be a str or None, not {type(title).__name__}")
    visible = _invisible_characters().sub("", validation.replace_lone_surrogates(title))
    cleaned = _whitespace_run().sub(" ", visible).strip()
    if not cleaned:
        return None
    if len(cleaned) > MAX_TITLE_LENGTH:
        raise ValueError(f"Title too long ({len(cleaned)} chars, max {MAX_TITLE_LENGTH})")
    return cleaned


def split_lineage(title: str) -> tuple[str, int | None]:
    """Split ``"name #3"`` into ``("name", 3)``; an unnumbered title gives ``(title, None)``."""
    match = _lineage_suffix().fullmatch(title)
    if match is None:
        return title, None
    return match.group(1), int(match.group(2))


def next_title_in_lineage(base_title: str, existing_titles: Iterable[str]) -> str:
    """The title for the next session of ``base_title``'s lineage.

    A trailing ``" #N"`` of ``base_title`` is stripped to find the base. The base itself is
    returned when no title of its lineage exists; otherwise ``"base #<max + 1>"``, where the
    unnumbered base counts as #1 ("name" -> "name #2" -> "name #3"; gaps are not reused:
    {"a", "a #3"} -> "a #4").

    ``existing_titles`` may hold any titles: only the base itself and exact ``"base #N"`` are
    counted, compared case-sensitively, so candidates fetched with the case-folding SQLite
    ``LIKE`` of :func:`lineage_like_pattern` can be passed as they are.
    """
    base, _ = split_lineage(base_title)
    highest: int | None = None
    for title in existing_titles:
        if title == base:
            number: int | None = 1
        else:
            title_base, number = split_lineage(title)
            if title_base != base:
                continue
        if number is not None and (highest is None or number > highest):
            highest = number
    if highest is None:
        return base
    return f"{base} #{highest + 1}"


def lineage_like_pattern(base: str) -> str:
    """The ``LIKE ... ESCAPE '\\'`` pattern matching ``"base #..."``: the numbered variants.

    The base itself is not matched; query it with ``=`` alongside.
    """
    return f"{escape_like(base)} #%"


TITLE_SOURCE_DERIVED: Final = "derived"
TITLE_SOURCE_LLM: Final = "llm"
TITLE_SOURCE_USER: Final = "user"
TITLE_SOURCE_RANK: Final = {TITLE_SOURCE_DERIVED: 0, TITLE_SOURCE_LLM: 1, TITLE_SOURCE_USER: 2}
"""A title's provenance (``sessions.title_source``, Hermes v26) and its authority: an
automatic title lands only over a strictly lower one; a user's always lands. NULL (a title
written before provenance) ranks as ``user``; an unknown value as the lowest."""


def _rank(source: str | None) -> int:
    return TITLE_SOURCE_RANK[TITLE_SOURCE_USER] if source is None else TITLE_SOURCE_RANK.get(
        source, 0
    )


class _LostRace(Exception):
    """A title write lost its compare-and-set after freeing an ancestor's title: raised to
    roll the transaction back, answered as a write that did not land."""


class TitlesPart(RepositoryPart):
    """Setting, reading and resolving session titles, with their provenance."""

    @writes
    def set_session_title(self, session_id: str, title: str | None) -> bool:
        """Set (or clear, with None/blank) a title on the user's behalf (provenance
        ``user``); True if the session exists. A title another session holds is a
        :class:`TitleInUseError`, unless that session is a compression ancestor of this one
        (anywhere up its chain, iot 0.22.2's continuation edge): hidden behind its tip, the
        user could never free it, so it hands the title on to this session."""
        return self._set_title(session_id, title, source=TITLE_SOURCE_USER)

    @writes
    def set_auto_title_if_empty(self, session_id: str, title: str | None) -> bool:
        """Set a generated title only while the session has none (Hermes 0.19): the test and
        the write are one transaction, so a concurrent manual rename is never overwritten.
        True when the title was set; the checks are :meth:`set_session_title`'s. Hermes
        0.19's titler is the model's, so its provenance is ``llm``. iot 0.22.2 removed the
        method (:meth:`set_auto_title` is its form); it is kept for 0.19's callers."""
        return self._set_title(session_id, title, source=TITLE_SOURCE_LLM, only_if_empty=True)

    @writes
    def set_auto_title(self, session_id: str, title: str | None, *, source: str) -> bool:
        """iot 0.22.2's automatic title: ``source`` is ``derived`` or ``llm`` (else
        ``ValueError``); it lands only on an untitled session or over a title of strictly
        lower authority (derived -> llm once; never over a user's). True when it landed."""
        if source not in (TITLE_SOURCE_DERIVED, TITLE_SOURCE_LLM):
            raise ValueError(f"invalid automatic title source: {source!r}")
        return self._set_title(session_id, title, source=source)

    @reads
    def get_session_title_source(self, session_id: str) -> str | None:
        """The provenance of the session's title; None when it has none (or is unknown)."""
        if not isinstance(session_id, str) or not bindable(session_id):
            return None
        if not self.store.read_shape.has_column(sessions.name, "title_source"):
            return None  # a store read as it is, from before Hermes v26
        statement = select(sessions.c.title, sessions.c.title_source).where(
            sessions.c.id == session_id
        )
        row = self.store.read(lambda conn: conn.execute(statement).first())
        return None if row is None or row[0] is None else row[1]

    @writes
    def set_session_title_source(self, session_id: str, source: str) -> bool:
        """Overwrite a title's provenance, the text untouched (``ValueError`` for an unknown
        one); True when the session has a title."""
        if source not in TITLE_SOURCE_RANK:
            raise ValueError(f"invalid title source: {source!r}")
        statement = (
            update(sessions)
            .where(
                sessions.c.id == validation.identifier(session_id, "session_id"),
                sessions.c.title.is_not(None),
            )
            .values(title_source=source)
        )
        return self.store.write(lambda conn: conn.execute(statement).rowcount > 0)

    def _set_title(
        self, session_id: str, title: str | None, *, source: str, only_if_empty: bool = False
    ) -> bool:
        clean = sanitize_title(title)
        session_id = validation.identifier(session_id, "session_id")
        automatic = source != TITLE_SOURCE_USER
        current_of = select(sessions.c.title, sessions.c.title_source, sessions.c.hidden).where(
            sessions.c.id == session_id
        )

        def run(conn: Connection) -> bool:
            current = conn.execute(current_of).first()
            if current is None:
                return False
            if only_if_empty and current.title is not None:
                return False  # titled already: not even checked for uniqueness
            if (
                current.title == CANONICAL_BOT_CHAT_TITLE and current.hidden
                and clean != CANONICAL_BOT_CHAT_TITLE
            ):  # fmt: skip
                # The desktop's canonical Bot Chat is found by this exact title each time Bot
                # Mode opens it: another title (or none) orphans it. Whatever the provenance
                # (iot 0.22.2): a user's rename is refused, an automatic one does not land.
                if automatic:
                    return False
                raise CanonicalTitleError(
                    "This is the bot's canonical Bot Chat \u2014 its name is its identity, and "
                    "renaming it would orphan the conversation. To start fresh, create a new "
                    "bot instead."
                )
            if automatic and current.title is not None and _rank(current.title_source) >= _rank(
                source
            ):
                return False
            # Compare-and-set on what was read: a write in between loses instead.
            target = update(sessions).where(
                sessions.c.id == session_id,
                sessions.c.title.is_(None) if current.title is None
                else sessions.c.title == current.title,
            )  # fmt: skip
            holder_cleared = False
            if clean is not None:
                held = conn.execute(
                    select(sessions.c.id, sessions.c.archived, sessions.c.hidden).where(
                        sessions.c.title == clean
                    )
                ).first()
                holder = None if held is None else held.id
                if held is not None and holder != session_id:
                    # A deliberately archived canonical Bot Chat is a retired one: its name
                    # goes to the replacement (iot 0.22.2), the old session stays archived.
                    retired = clean == CANONICAL_BOT_CHAT_TITLE and held.archived and held.hidden
                    if not retired and holder not in compression_ancestors_of(conn, session_id):
                        # Hermes's exact words: users see them in `sessions rename` and `/title`.
                        raise TitleInUseError(
                            f"Title '{clean}' is already in use by session {holder}"
                        )
                    # A compressed ancestor (hidden behind its tip, so the user cannot free
                    # it) hands its title on to the continuation: one holder, same lineage.
                    # A retired Bot Chat hands it on to its replacement.
                    conn.execute(
                        update(sessions)
                        .where(sessions.c.id == holder)
                        .values(title=None, title_source=None)
                    )
                    holder_cleared = True
            changed = conn.execute(
                target.values(title=clean, title_source=source if clean else None)
            ).rowcount
            if not changed and holder_cleared:
                raise _LostRace  # the ancestor keeps its title: nothing is written
            return changed > 0

        try:
            return self.store.write(run)
        except _LostRace:
            return False
        except IntegrityError as exc:
            # Lost a race for the same title: the unique index decided.
            raise TitleInUseError(
                f"Title '{clean}' is already in use by another session"
            ) from exc

    @reads
    def get_session_title(self, session_id: str) -> str | None:
        if not isinstance(session_id, str) or not bindable(session_id):
            return None
        statement = select(sessions.c.title).where(sessions.c.id == session_id)
        return self.store.read(lambda conn: conn.execute(statement).scalar())

    @reads
    def get_session_by_title(self, title: str) -> SessionRecord | None:
        if not isinstance(title, str) or not bindable(title):
            return None
        statement = select(*session_columns(self.store.read_shape)).where(sessions.c.title == title)
        row = self.store.read(lambda conn: conn.execute(statement).first())
        return None if row is None else SessionRecord._make(row)

    @reads
    def resolve_session_by_title(self, title: str) -> str | None:
        """The newest numbered variant ("title #N") if any, else the exact title's session."""
        if not isinstance(title, str) or not title or not bindable(title):
            return None
        def run(conn: Connection) -> str | None:
            exact = conn.execute(select(sessions.c.id).where(sessions.c.title == title)).scalar()
            if exact is not None and title == CANONICAL_BOT_CHAT_TITLE:
                # The canonical Bot Chat is its exact title: a numbered sibling (a desktop
                # branch, visible, not Bot Mode's) never takes its messages (iot 0.22.2).
                return cell_text(exact)
            rows = conn.execute(
                select(sessions.c.id, sessions.c.title)
                .where(sessions.c.title.like(lineage_like_pattern(title), escape="\\"))
                .order_by(sessions.c.started_at.desc())
            ).all()
            for session_id, candidate in rows:
                candidate_base, number = split_lineage(candidate)
                if number is not None and candidate_base == title:
                    return cell_text(session_id)
            return None if exact is None else cell_text(exact)

        return self.store.read(run)

    @reads
    def titles_ignoring_case(self, title: str) -> list[str]:
        """The lineage base titles ("name" for "name #3") equal to ``title`` but for case."""
        if not isinstance(title, str) or not title.strip() or not bindable(title):
            return []
        wanted = title.casefold()
        statement = select(sessions.c.title).where(sessions.c.title.is_not(None))
        if title.isascii():
            # SQLite's lower() and LIKE fold ASCII only: narrow in SQL, decide in Python.
            statement = statement.where(
                func.lower(sessions.c.title).like(escape_like(title.lower()) + "%", escape="\\")
            )
        found: set[str] = set()
        for (candidate,) in self.store.read(lambda conn: conn.execute(statement).all()):
            base, _ = split_lineage(str(candidate))
            if base.casefold() == wanted:
                found.add(base)
            elif str(candidate).casefold() == wanted:
                found.add(str(candidate))  # "Name #2" asked for as "name #2"
        return sorted(found)

    @reads
    def get_next_title_in_lineage(self, base_title: str) -> str:
        base, _ = split_lineage(validation.identifier(base_title, "base_title"))
        # Only the base and exact "base #N" count (case-sensitively, next_title_in_lineage),
        # and every such title lies in the bytewise range [base + " #", base + " $"): the range
        # is a seek on the title index where the case-folding LIKE alone was a scan of every
        # session (21 ms at 100k sessions). LIKE still narrows the range as it did. SQLite's
        # column is bytewise already (BINARY), and an explicit COLLATE under the OR would lose
        # the index; PostgreSQL's locale order is not bytewise, so there the range says "C".
        dialect = self.store.dialect
        bytewise = (
            sessions.c.title
            if dialect.name == "sqlite"
            else sessions.c.title.collate(dialect.bytewise_collation)
        )
        statement = select(sessions.c.title).where(
            or_(
                sessions.c.title == base,
                and_(
                    bytewise >= f"{base} #",
                    bytewise < f"{base} $",
                    sessions.c.title.like(lineage_like_pattern(base), escape="\\"),
                ),
            )
        )
        existing = self.store.read(lambda conn: [row[0] for row in conn.execute(statement)])
        return next_title_in_lineage(base_title, existing)
