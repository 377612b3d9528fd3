"""System prompts (and tool pins) as newest Hermes keeps them: each text once in
``system_prompts``, keyed by the SHA-256 hex digest of its UTF-8 bytes (Hermes v25), named by
``sessions.system_prompt_hash`` (and, since iot 0.21.3, by ``sessions.tool_names``).

Reads resolve the hash first (``COALESCE(prompt of the hash, the column)``, in
:mod:`..sql.read_shape`). Writes store the text here and set the hash, AND keep the inline
copy in ``sessions.system_prompt``: the rule revision 0033 made when it hashed the prompts of
an upgraded file. Hermes 0.18/0.19 never refuse a newer file and read the inline column alone,
so a prompt written only as a hash would be empty for them (iot 0.22.2 itself writes NULL
there; every v25+ reader reads the hash first, so the kept copy changes nothing it sees).
``tool_names`` is stored as iot stores it, the hash alone: no release that lacks
``system_prompts`` has the column.

A row no session names any more (by its prompt hash or its tool pin) is deleted after each
write that can orphan one, as iot's ``_delete_unreferenced_system_prompts`` does; a row still
named is never deleted.
"""

from __future__ import annotations

import hashlib

from sqlalchemy import exists, select
from sqlalchemy.engine import Connection

from ..dialects.interface import StoreDialect
from ..sql.tables import sessions_table as sessions
from ..sql.tables import system_prompts_table as system_prompts


def prompt_hash(prompt: str) -> str:
    """Hermes's key of a prompt (``sha256(prompt.encode('utf-8')).hexdigest()``); a lone
    surrogate, which Hermes cannot encode, is hashed as revision 0033 hashes it."""
    return hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).hexdigest()


def store_prompt(dialect: StoreDialect, conn: Connection, prompt: str | None) -> str | None:
    """Keep ``prompt`` in ``system_prompts`` (a row already there is kept: same hash, same
    text); its hash, or None for None."""
    if prompt is None:
        return None
    key = prompt_hash(prompt)
    conn.execute(
        dialect.insert(system_prompts)
        .values(hash=key, prompt=prompt)
        .on_conflict_do_nothing(index_elements=["hash"])
    )
    return key


def delete_unreferenced_prompts(conn: Connection) -> None:
    """Delete the ``system_prompts`` rows no session names, by prompt hash or tool pin."""
    named_as_prompt = exists().where(sessions.c.system_prompt_hash == system_prompts.c.hash)
    named_as_tools = exists().where(sessions.c.tool_names == system_prompts.c.hash)
    conn.execute(
        system_prompts.delete().where(~named_as_prompt, ~named_as_tools)
    )


def prompt_of(conn: Connection, key: str) -> str | None:
    """The text stored under ``key`` (None: none)."""
    found = conn.execute(
        select(system_prompts.c.prompt).where(system_prompts.c.hash == key)
    ).scalar_one_or_none()
    return None if found is None else str(found)
