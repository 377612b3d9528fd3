"""The main job on the embedded default store, shown end to end.

Creates or upgrades the default store (``SESSIONSTORE_URL``, else ``$HERMES_HOME/state.db``,
else ``~/.hermes/state.db``; a Hermes file is adopted in place), then shows it working: schema
status, counts, the newest sessions and a search. A store with no sessions gets one small sample
conversation (source ``sessionstore-demo``) so there is something to show; ``--no-sample``
skips that, ``--sample`` forces it.
"""

from __future__ import annotations

import argparse
import time
import uuid

from sessionstore.api.session_db import SessionDB
from sessionstore.schema import migrate
from sessionstore.storage.config import resolve_url

SAMPLE_SOURCE = "sessionstore-demo"


def record_sample(db: SessionDB) -> str:
    session_id = f"demo-{uuid.uuid4()}"
    db.create_session(session_id, SAMPLE_SOURCE, model="demo-model", system_prompt="You help.")
    db.set_session_title(session_id, db.get_next_title_in_lineage("sessionstore demo"))
    db.append_messages(
        session_id,
        [
            {"role": "user", "content": "How do I migrate the database? 数据库迁移怎么做?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {
                            "name": "terminal",
                            "arguments": '{"cmd": "alembic upgrade head"}',
                        },
                    }
                ],
                "reasoning": "The user wants the upgrade command.",
            },
            {
                "role": "tool",
                "tool_call_id": "call_1",
                "tool_name": "terminal",
                "content": "OK: 0006 (head)",
            },
            {
                "role": "assistant",
                "content": "Run `alembic upgrade head`; it adopts Hermes files in place.",
            },
        ],
    )
    db.update_token_counts(
        session_id, input_tokens=120, output_tokens=48, estimated_cost_usd=0.0004
    )
    db.end_session(session_id, "user_exit")
    return session_id


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="store URL (default: the URL rules)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--sample", action="store_true", help="always record a sample conversation")
    group.add_argument("--no-sample", action="store_true", help="never record one")
    args = parser.parse_args()

    url = resolve_url(args.url)
    print(f"store:    {url}")
    before = migrate.status(url)
    started = time.perf_counter()
    with SessionDB(url=url) as db:
        if db.adoption_backup is not None:
            print(f"backup:   {db.adoption_backup} (taken before adopting a file "
                  "sessionstore did not write)")
        after = migrate.status(url)
        print(
            f"schema:   revision {before.revision or '(none)'} -> {after.revision} "
            f"(Hermes schema_version {after.schema_version}); "
            f"opened in {(time.perf_counter() - started) * 1e3:.0f} ms"
        )
        if args.sample or (not args.no_sample and db.session_count() == 0):
            sample = record_sample(db)
            print(f"sample:   recorded session {sample}")
        print(f"contents: {db.session_count()} sessions, {db.message_count()} messages")
        print("newest sessions:")
        newest = db.list_sessions_rich(limit=5)
        # As the CLI's listing: the shortest unique prefix, and an ellipsis when it was cut.
        shortest = db.repository.short_ids([row["id"] for row in newest])
        for row in newest:
            title = row["title"] or "(untitled)"
            count = row["message_count"] or 0
            short_id = shortest[row["id"]] + ("" if shortest[row["id"]] == row["id"] else "…")
            print(f"  {short_id:12}  {row['source']:10}  {count:5} msgs  {title}: {row['preview']}")
        for query in ("migrate database", "数据库"):
            hits = db.search_messages(query, limit=3)
            print(f"search {query!r}: {len(hits)} hit(s)")
            for hit in hits:
                print(f"  [{hit['role']}] {hit['snippet']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
