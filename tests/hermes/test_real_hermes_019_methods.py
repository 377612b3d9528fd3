"""Hermes 0.18.1 and 0.19.0's new methods side by side with the real Hermes 0.19.0.

The same calls run on the real release's ``SessionDB`` (a subprocess on its own SQLite file,
`tests/support/real_hermes.py`) and on ours, on SQLite and PostgreSQL; answers must be equal,
and so must what the calls leave in the tables (``$select`` steps read the same rows on both
sides: the session totals and routes, the per-model usage rows Hermes's Insights reads, the
routing index, messages' new columns). Covered: ``update_token_counts`` with routes, costs,
absolute totals and route switches, and ``record_auxiliary_usage`` (seeded random sequences
as well as named cases); origins and routing (``record_gateway_session_peer``'s new keywords,
``set_expiry_finalized``, ``list_gateway_sessions``, ``find_session_by_origin``, the routing
entries, ``promote_to_session_reset`` and the recovery rule it pairs with); lineage
(``get_compression_lineage``, ``export_session_lineage``, ``get_conversation_root``,
``get_ancestor_display_prefix``, ``get_resume_conversations``, ``repair_alternation``);
messages (``effect_disposition``, ``api_content``, ``set_latest_user_api_content``,
``get_messages`` paging); ``list_sessions_rich``'s ``search_query`` and ``compact_rows``;
the bulk filters (``list_prune_candidates``, ``archive_sessions``, ``prune_sessions``);
``import_sessions``; titles set only when empty; the fallback streak.

Where we differ on purpose the scenario stays off it: ``update_token_counts`` on an unknown
session (Hermes creates it, SPEC §7 does not), ``rebuild_fts``'s count (we have more indexes),
exports with rewound rows (ours keep them), the bulk filters on a compression lineage (ours
follow iot 0.22.2: an ancestor ages with its conversation, the archive matches by the tip) and
on sessions whose last activity differs from their start (ours: iot's inactivity; its dry run's
``last_active`` is not compared).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from legacy_v23_v31 import without_newer_columns
from real_hermes import RealHermes
from real_hermes_driver import SELECT_STEP, SQL_STEP
from side_by_side import Step, as_printed, run_steps
from test_real_hermes_methods import DAY, NOW, family, make, message, sql

from sessionstore.api.session_db import SessionDB

# Each test starts the real Hermes 0.19.0 (a program): the full run only, as the other
# real-Hermes files.
pytestmark = pytest.mark.slow
RESULTS_DIFFER = {
    SQL_STEP,
    # Hermes returns None; ours says whether (how many) rows changed.
    "set_session_title", "end_session", "set_session_archived", "update_session_billing_route",
    "update_system_prompt", "record_gateway_session_peer", "update_session_cwd",
    # Hermes counts its two FTS5 tables; ours has more.
    "rebuild_fts",
}  # fmt: skip
CLOCK_COLUMNS = frozenset({"first_seen", "last_seen", "updated_at", "ended_at", "started_at",
                           "timestamp", "last_active"})  # fmt: skip
"""Columns each side stamps with its own clock (compared as set or not)."""


def select_rows(statement: str, **params: Any) -> Step:
    return (SELECT_STEP, [statement, params], {})


def unclocked(value: Any) -> Any:
    """``value`` with each clock column replaced by whether it is set."""
    if isinstance(value, dict):
        return {
            key: (item is not None) if key in CLOCK_COLUMNS else unclocked(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [unclocked(item) for item in value]
    return value


def side_by_side(
    hermes: RealHermes, db: SessionDB, tmp_path: Path, steps: list[Step],
    also_differ: frozenset[str] = frozenset(),
) -> tuple[list[Any], list[Any]]:  # fmt: skip
    theirs = unclocked(hermes.calls_on_a_new_file(tmp_path / "hermes.db", steps))
    # Hermes 0.19.0 (v22) has none of the v23...v31 columns our answers carry.
    ours = without_newer_columns(theirs, unclocked(as_printed(run_steps(db, steps))))
    assert len(theirs) == len(ours) == len(steps)
    for index, ((name, args, kwargs), expected, actual) in enumerate(
        zip(steps, theirs, ours, strict=True)
    ):
        if name in RESULTS_DIFFER or name in also_differ:
            continue
        assert actual == expected, (index, name, args, kwargs, differences(expected, actual))
    return theirs, ours


def differences(expected: Any, actual: Any, where: str = "") -> list[str]:
    """Where two answers differ, as ``path: theirs != ours`` lines (for a failure's message)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        return [line for key in sorted(set(expected) | set(actual), key=str)
                for line in differences(expected.get(key), actual.get(key), f"{where}.{key}")]
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [line for index, (old, new) in enumerate(zip(expected, actual, strict=True))
                for line in differences(old, new, f"{where}[{index}]")]  # fmt: skip
    return [] if expected == actual else [f"{where}: {expected!r} != {actual!r}"]


USAGE_ROWS = select_rows(
    "SELECT session_id, model, billing_provider, billing_base_url, billing_mode, task, "
    "api_call_count, input_tokens, output_tokens, cache_read_tokens, cache_write_tokens, "
    "reasoning_tokens, estimated_cost_usd, actual_cost_usd, cost_status, cost_source, "
    "first_seen, last_seen FROM session_model_usage "
    "ORDER BY session_id, model, billing_provider, billing_base_url, billing_mode, task"
)
TOTALS = select_rows(
    "SELECT id, source, model, billing_provider, billing_base_url, billing_mode, input_tokens, "
    "output_tokens, cache_read_tokens, cache_write_tokens, reasoning_tokens, "
    "estimated_cost_usd, actual_cost_usd, cost_status, cost_source, pricing_version, "
    "api_call_count FROM sessions ORDER BY id"
)


# -- usage: totals and per-model rows -----------------------------------------------------------

USAGE_CASES: dict[str, list[Step]] = {
    "a route switch mid-session attributes each call to its model": [
        ("create_session", ["s", "cli"], {"model": "claude"}),
        ("update_token_counts", ["s"], {"input_tokens": 100, "output_tokens": 20,
         "model": "claude", "billing_provider": "anthropic", "api_call_count": 1,
         "estimated_cost_usd": 0.01, "cost_status": "estimated", "cost_source": "table"}),
        ("update_token_counts", ["s"], {"input_tokens": 50, "model": "gpt-5",
         "billing_provider": "openai", "billing_base_url": "https://api.openai.com",
         "billing_mode": "api", "api_call_count": 1, "estimated_cost_usd": 0.02}),
        ("update_token_counts", ["s"], {"input_tokens": 5, "api_call_count": 1}),
        ("update_token_counts", ["s"], {"output_tokens": 7, "model": "",
                                        "billing_provider": ""}),
    ],
    "a failed-over creation route is replaced by the first accounted call": [
        ("create_session", ["f", "telegram"], {"model": "primary"}),
        ("update_session_billing_route", ["f"], {"provider": "primary-co",
                                                 "base_url": "https://p"}),
        ("update_token_counts", ["f"], {"model": "fallback", "billing_provider": "backup-co",
                                        "input_tokens": 9}),
        ("update_token_counts", ["f"], {"model": "third", "billing_provider": "other",
                                        "input_tokens": 1, "api_call_count": 1}),
        ("update_token_counts", ["f"], {"model": "fourth", "billing_provider": "x",
                                        "input_tokens": 1}),
    ],
    "route data without usage sets nothing": [
        ("create_session", ["n", "cli"], {}),
        ("update_token_counts", ["n"], {"model": "m", "billing_provider": "p",
                                        "billing_mode": "sub", "cost_status": "final"}),
        ("update_token_counts", ["n"], {"actual_cost_usd": 1.5, "model": "m2",
                                        "billing_provider": "p2"}),
        ("update_token_counts", ["n"], {"actual_cost_usd": 0.5, "cost_source": "provider"}),
    ],
    "absolute totals move the session only": [
        ("create_session", ["g", "discord"], {"model": "haiku"}),
        ("update_token_counts", ["g"], {"input_tokens": 10, "api_call_count": 1}),
        ("update_token_counts", ["g"], {"input_tokens": 500, "output_tokens": 80,
         "api_call_count": 4, "estimated_cost_usd": 0.3, "actual_cost_usd": 0.25,
         "absolute": True, "model": "haiku", "billing_provider": "anthropic"}),
        ("update_token_counts", ["g"], {"reasoning_tokens": 3, "cache_read_tokens": 40,
                                        "cache_write_tokens": 4}),
    ],
    "auxiliary calls have rows of their own and never borrow the session's route": [
        ("create_session", ["a", "cli"], {"model": "main-model"}),
        ("update_token_counts", ["a"], {"input_tokens": 1, "model": "main-model",
                                        "billing_provider": "main-co", "api_call_count": 1}),
        ("record_auxiliary_usage", ["a", "vision"], {"model": "gemini",
         "billing_provider": "google", "input_tokens": 300, "estimated_cost_usd": 0.001}),
        ("record_auxiliary_usage", ["a", "vision"], {"model": "gemini",
         "billing_provider": "google", "output_tokens": 30}),
        ("record_auxiliary_usage", ["a", "compression"], {"input_tokens": 2000}),
        ("record_auxiliary_usage", ["a", "title_generation"], {"model": "",
         "billing_base_url": "https://x", "reasoning_tokens": 5}),
        ("record_auxiliary_usage", ["a", ""], {"input_tokens": 1}),
        ("record_auxiliary_usage", ["", "vision"], {"input_tokens": 1}),
        ("record_auxiliary_usage", ["brand-new", "vision"], {"input_tokens": 4}),
    ],
}


@pytest.mark.parametrize("case", sorted(USAGE_CASES))
def test_usage_rows_and_totals_are_hermes_019s(
    hermes: RealHermes, db: SessionDB, tmp_path: Path, case: str
) -> None:
    _, ours = side_by_side(hermes, db, tmp_path, [*USAGE_CASES[case], TOTALS, USAGE_ROWS])
    if "nothing" not in case:
        assert ours[-1], "the case writes per-model rows"


def random_usage(seed: int) -> list[Step]:
    """Calls a busy agent makes: model switches, fallbacks, gateways' absolute totals, costs
    given or not, auxiliary calls, over three sessions."""
    rng = random.Random(seed)
    models = [None, "", "claude", "gpt-5", "qwen"]
    providers = [None, "", "anthropic", "openai", "openrouter"]
    steps: list[Step] = [("create_session", [sid, "cli"], {"model": rng.choice(models[2:])})
                         for sid in ("r1", "r2", "r3")]  # fmt: skip
    for _ in range(24):
        sid = rng.choice(["r1", "r2", "r3"])
        if rng.random() < 0.2:
            steps.append(("record_auxiliary_usage", [sid, rng.choice(["vision", "compression"])],
                          {"model": rng.choice(models), "input_tokens": rng.randint(0, 50),
                           "estimated_cost_usd": rng.choice([None, 0.0, 0.25])}))  # fmt: skip
            continue
        kwargs: dict[str, Any] = {
            "input_tokens": rng.choice([0, 0, 7, 120]),
            "output_tokens": rng.choice([0, 3, 40]),
            "cache_read_tokens": rng.choice([0, 11]),
            "reasoning_tokens": rng.choice([0, 2]),
            "api_call_count": rng.choice([0, 1, 1, 2]),
            "model": rng.choice(models),
            "billing_provider": rng.choice(providers),
            "billing_base_url": rng.choice([None, "", "https://a", "https://b"]),
            "billing_mode": rng.choice([None, "api", "subscription"]),
            "estimated_cost_usd": rng.choice([None, 0.0, 0.125, 1.5]),
            "actual_cost_usd": rng.choice([None, None, 0.5]),
            "cost_status": rng.choice([None, "estimated", "final"]),
            "cost_source": rng.choice([None, "table", "provider"]),
            "pricing_version": rng.choice([None, "v1"]),
        }
        if rng.random() < 0.15:
            kwargs["absolute"] = True
        steps.append(("update_token_counts", [sid], kwargs))
    return steps


@pytest.mark.parametrize("seed", range(6))
def test_random_usage_sequences_are_hermes_019s(
    hermes: RealHermes, db: SessionDB, tmp_path: Path, seed: int
) -> None:
    _, ours = side_by_side(hermes, db, tmp_path, [*random_usage(seed), TOTALS, USAGE_ROWS])
    assert len(ours[-1]) >= 3


def test_deleting_a_session_takes_its_usage_rows(
    hermes: RealHermes, db: SessionDB, tmp_path: Path
) -> None:
    steps: list[Step] = [
        ("create_session", ["d", "cli"], {}),
        ("create_session", ["e", "cli"], {}),
        ("update_token_counts", ["d"], {"input_tokens": 3, "model": "m",
                                        "billing_provider": "p"}),
        ("record_auxiliary_usage", ["e", "vision"], {"input_tokens": 1}),
        ("delete_session", ["d"], {}),
        USAGE_ROWS,
    ]
    _, ours = side_by_side(hermes, db, tmp_path, steps)
    assert [row["session_id"] for row in ours[-1]] == ["e"]


# -- origins, routing, reset boundaries ------------------------------------------------------

def gateway_family() -> list[Step]:
    peer = "record_gateway_session_peer"
    return [
        *make("tg-old", source="telegram", started=NOW - 5 * DAY),
        *make("tg-new", source="telegram", started=NOW - 4 * DAY),
        *make("tg-bob", source="telegram", started=NOW - 3 * DAY),
        *make("tg-thread", source="telegram", started=NOW - 2 * DAY),
        *make("dc-ended", source="discord", started=NOW - 2 * DAY, ended=NOW - DAY,
              reason="agent_close"),
        *make("dc-reaped", source="Discord", started=NOW - DAY, ended=NOW - DAY / 2,
              reason="ws_orphan_reap"),
        message("tg-old", "user", "old", NOW - 5 * DAY),
        message("tg-new", "user", "new", NOW - 4 * DAY),
        message("tg-bob", "user", "bob here", NOW - 3 * DAY),
        message("dc-ended", "user", "closed by accident", NOW - DAY),
        message("dc-reaped", "user", "reaped", NOW - DAY / 2),
        (peer, ["tg-old"], {"source": "telegram", "user_id": "alice", "session_key": "k:42",
                            "chat_id": "42", "chat_type": "group", "display_name": "Ops",
                            "origin_json": '{"chat_id": "42", "platform": "telegram"}'}),
        (peer, ["tg-new"], {"source": "telegram", "user_id": "alice", "session_key": "k:42",
                            "chat_id": "42", "chat_type": "group"}),
        (peer, ["tg-bob"], {"source": "telegram", "user_id": "bob", "session_key": "k:42:bob",
                            "chat_id": "42", "chat_type": "group", "display_name": "Bob"}),
        (peer, ["tg-thread"], {"source": "telegram", "user_id": "carol", "session_key": "k:7",
                               "chat_id": "7", "chat_type": "dm", "thread_id": "t1"}),
        (peer, ["dc-ended"], {"source": "discord", "user_id": "dan", "session_key": "k:d",
                              "chat_id": "9", "chat_type": "dm"}),
        (peer, ["dc-reaped"], {"source": "Discord", "user_id": "eve", "session_key": "k:e",
                               "chat_id": "9", "chat_type": "dm"}),
        ("record_gateway_session_peer", ["tg-new"], {"source": "telegram",
         "session_key": "k:42", "chat_id": "42", "chat_type": "group", "user_id": "alice",
         "display_name": "Ops (renamed)"}),
        ("set_expiry_finalized", ["tg-old"], {}),
        ("set_expiry_finalized", ["tg-bob"], {"finalized": True}),
        ("set_expiry_finalized", ["tg-bob"], {"finalized": False}),
        ("set_expiry_finalized", ["", True], {}),
        ("set_expiry_finalized", ["nobody"], {}),
    ]  # fmt: skip


ORIGIN_ROWS = select_rows(
    "SELECT id, session_key, display_name, origin_json, expiry_finalized, end_reason, "
    "ended_at FROM sessions ORDER BY id"
)


def test_origins_and_gateway_listings_are_hermes_019s(
    hermes: RealHermes, db: SessionDB, tmp_path: Path
) -> None:
    origin = "find_session_by_origin"
    steps = [
        *gateway_family(),
        ORIGIN_ROWS,
        ("list_gateway_sessions", [], {}),
        ("list_gateway_sessions", [], {"active_only": False}),
        ("list_gateway_sessions", [], {"platform": "TELEGRAM"}),
        ("list_gateway_sessions", [], {"platform": "discord", "active_only": False}),
        ("list_gateway_sessions", [], {"platform": "nothing"}),
        (origin, [], {"platform": "telegram", "chat_id": "42"}),
        (origin, [], {"platform": "telegram", "chat_id": "42", "user_id": "bob"}),
        (origin, [], {"platform": "telegram", "chat_id": "42", "user_id": "alice"}),
        (origin, [], {"platform": "telegram", "chat_id": "42", "user_id": "zed"}),
        (origin, [], {"platform": "Telegram", "chat_id": "7"}),
        (origin, [], {"platform": "telegram", "chat_id": "7", "thread_id": "t1"}),
        (origin, [], {"platform": "telegram", "chat_id": "7", "thread_id": "t2"}),
        (origin, [], {"platform": "telegram", "chat_id": "7", "user_id": "zed"}),
        (origin, [], {"platform": "discord", "chat_id": "9"}),
        (origin, [], {"platform": "", "chat_id": "9"}),
        (origin, [], {"platform": "telegram", "chat_id": ""}),
    ]
    theirs, _ = side_by_side(hermes, db, tmp_path, steps)
    found = theirs[-11:]
    assert found[:4] == [None, "tg-bob", "tg-new", None], "the scenario reaches every rule"


PEER_MOVES: list[Step] = [
    ("create_session", ["cli-1"], {"source": "cli", "user_id": "alice"}),
    ("append_message", ["cli-1", "user", "hello"], {}),
    # a CLI session handed off to Telegram: the gateway's peer is its latest word
    ("record_gateway_session_peer", ["cli-1"], {"source": "telegram", "user_id": "tg-7",
     "session_key": "agent:main:telegram:dm:7", "chat_id": "7", "chat_type": "dm",
     "thread_id": "t"}),
    ("find_latest_gateway_session_for_peer", [], {"source": "telegram",
     "session_key": "agent:main:telegram:dm:7"}),
    ("find_latest_gateway_session_for_peer", [], {"source": "telegram", "user_id": "tg-7",
     "chat_id": "7", "chat_type": "dm", "thread_id": "t"}),
    # a refresh without a sender or thread clears them, as Hermes writes what it is given
    ("record_gateway_session_peer", ["cli-1"], {"source": "telegram",
     "session_key": "agent:main:telegram:dm:7", "chat_id": "7", "chat_type": "dm"}),
    ("create_session", ["dc-1"], {"source": "discord", "user_id": "bob"}),
    ("record_gateway_session_peer", ["dc-1"], {"source": "discord", "user_id": "carol",
     "session_key": "agent:main:discord:group:9", "chat_id": "9", "chat_type": "group"}),
    select_rows("SELECT id, source, user_id, session_key, chat_id, chat_type, thread_id "
                "FROM sessions ORDER BY id"),
]  # fmt: skip


def test_a_peer_moves_a_session_to_its_platform_as_hermes_019s(
    hermes: RealHermes, db: SessionDB, tmp_path: Path
) -> None:
    theirs, _ = side_by_side(hermes, db, tmp_path, PEER_MOVES)
    assert [row["source"] for row in theirs[-1]] == ["telegram", "discord"]
    assert theirs[3]["id"] == "cli-1" and theirs[4] is None  # by its key; no key, no answer


def test_reset_promotion_and_recovery_are_hermes_019s(
    hermes: RealHermes, db: SessionDB, tmp_path: Path
) -> None:
    latest = "find_latest_gateway_session_for_peer"
    steps = [
        *gateway_family(),
        *make("compressed", source="discord", reason="compression", ended=NOW - DAY),
        (latest, [], {"source": "Discord", "session_key": "k:e"}),
        (latest, [], {"source": "discord", "session_key": "k:d"}),
        ("promote_to_session_reset", ["dc-reaped"], {}),
        ("promote_to_session_reset", ["dc-ended"], {"reason": "idle"}),
        ("promote_to_session_reset", ["tg-new"], {"reason": "daily"}),
        ("promote_to_session_reset", ["tg-new"], {}),
        ("promote_to_session_reset", ["compressed"], {}),
        ("promote_to_session_reset", ["nobody"], {}),
        ("promote_to_session_reset", [""], {}),
        (latest, [], {"source": "Discord", "session_key": "k:e"}),
        (latest, [], {"source": "discord", "session_key": "k:d"}),
        ORIGIN_ROWS,
    ]
    theirs, _ = side_by_side(hermes, db, tmp_path, steps)
    assert theirs[-10:-3] == [True, True, True, False, False, False, False]


def test_routing_entries_are_hermes_019s(
    hermes: RealHermes, db: SessionDB, tmp_path: Path
) -> None:
    load = "load_gateway_routing_entries"
    steps: list[Step] = [
        ("save_gateway_routing_entry", ["k1", '{"session_id": "a"}'], {}),
        ("save_gateway_routing_entry", ["k2", '{"session_id": "b"}'], {}),
        ("save_gateway_routing_entry", ["k1", '{"session_id": "a2"}'], {}),
        ("save_gateway_routing_entry", ["k1", '{"scoped": 1}'], {"scope": "/srv/sessions"}),
        ("save_gateway_routing_entry", ["", "{}"], {}),
        ("save_gateway_routing_entry", ["k3", ""], {}),
        (load, [], {}),
        (load, [], {"scope": "/srv/sessions"}),
        (load, [], {"scope": "elsewhere"}),
        ("replace_gateway_routing_entries", [{"k9": "{}", "k8": '{"x": 1}', "": "{}",
                                              "k7": ""}], {}),
        (load, [], {}),
        (load, [], {"scope": "/srv/sessions"}),
        ("delete_gateway_routing_entries", [["k9", "absent"]], {}),
        ("delete_gateway_routing_entries", [[]], {}),
        (load, [], {}),
        ("replace_gateway_routing_entries", [{}], {"scope": "/srv/sessions"}),
        (load, [], {"scope": "/srv/sessions"}),
        select_rows("SELECT scope, session_key, entry_json, updated_at FROM gateway_routing "
                    "ORDER BY scope, session_key"),
    ]  # fmt: skip
    side_by_side(hermes, db, tmp_path, steps)


# -- lineage and replay ---------------------------------------------------------------------

def replay_family() -> list[Step]:
    """The lineage family, each session with a conversation that needs repairs: two user
    turns in a row, a tool result answering nothing, a duplicate result, split assistant
    turns, a provisional verification candidate, a continuation repeating the user's request,
    and Hermes's background-review harness."""
    calls = [{"id": "call_1", "type": "function",
              "function": {"name": "terminal", "arguments": "{}"}}]  # fmt: skip
    return [
        *family(race=False),
        message("root", "assistant", "deploying", NOW - 10 * DAY + 1),
        message("root", "user", "and the logs?", NOW - 10 * DAY + 2),
        message("cont", "user", "and the logs?", NOW - 9 * DAY + 1),
        message("cont", "assistant", None, NOW - 9 * DAY + 2, tool_calls=calls),
        message("cont", "tool", "ok", NOW - 9 * DAY + 3, tool_call_id="call_1",
                tool_name="terminal", effect_disposition="applied"),
        message("cont", "tool", "ok again", NOW - 9 * DAY + 4, tool_call_id="call_1"),
        message("cont", "tool", "stray", NOW - 9 * DAY + 5, tool_call_id="call_x"),
        message("tip", "user", "scale it", NOW - 8 * DAY + 40),
        message("tip", "user", "to five nodes", NOW - 8 * DAY + 41,
                api_content="to five nodes\n<memory>prefers 5</memory>"),
        message("tip", "assistant", "candidate", NOW - 8 * DAY + 42,
                finish_reason="verification_required"),
        message("tip", "assistant", "scaled to five", NOW - 8 * DAY + 43, finish_reason="stop"),
        message("tip", "assistant", "and verified", NOW - 8 * DAY + 44),
        message("tip", "user", "Review the conversation above and consider saving to memory",
                NOW - 8 * DAY + 45),
        message("tip", "assistant", "saved", NOW - 8 * DAY + 46),
        message("tip", "user", "thanks", NOW - 8 * DAY + 47),
    ]  # fmt: skip


LINEAGE_IDS = ["root", "cont", "tip", "branch", "kid", "tooling", "live", "live-child",
               "quiet-child", "unknown"]  # fmt: skip
FORKS = {"branch", "kid", "tooling"}
"""Sessions whose replay with ancestors follows iot 0.22.2, not 0.19 (which walks into the
parent a branch copied): `tests/hermes/test_real_iot_fork_replay.py`."""


def test_lineage_reads_are_hermes_019s(hermes: RealHermes, db: SessionDB, tmp_path: Path) -> None:
    steps = [
        *replay_family(),
        *[(name, [sid], {}) for sid in LINEAGE_IDS
          for name in ("get_compression_lineage", "get_conversation_root",
                       "get_ancestor_display_prefix", "get_resume_conversations",
                       "export_session_lineage")
          if sid not in FORKS or name not in ("get_ancestor_display_prefix",
                                              "get_resume_conversations")],
        *[("get_messages_as_conversation", [sid], kwargs) for sid in ("cont", "tip")
          for kwargs in ({}, {"repair_alternation": True}, {"include_ancestors": True},
                         {"include_ancestors": True, "repair_alternation": True})],
    ]  # fmt: skip
    theirs, _ = side_by_side(hermes, db, tmp_path, steps)
    lineages = [answer for (name, _, _), answer in zip(steps, theirs, strict=True)
                if name == "get_compression_lineage"]  # fmt: skip
    assert lineages[:4] == [["root", "cont", "tip"]] * 3 + [["branch"]]


def test_messages_new_columns_and_paging_are_hermes_019s(
    hermes: RealHermes, db: SessionDB, tmp_path: Path
) -> None:
    parts = [{"type": "text", "text": "see"},
             {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}]  # fmt: skip
    sidecar = "set_latest_user_api_content"
    steps: list[Step] = [
        ("create_session", ["m", "cli"], {}),
        *[message("m", role, f"{role} {n}", NOW + n) for n, role in
          enumerate(["user", "assistant", "user", "tool", "user"])],
        message("m", "assistant", "done", NOW + 9, effect_disposition="noop",
                api_content="done (sent)"),
        (sidecar, ["m", "user 4", "user 4 + memory"], {}),
        (sidecar, ["m", "user 2", "not the newest"], {}),
        ("append_message", ["m", "user", parts], {"timestamp": NOW + 10}),
        (sidecar, ["m", parts, "multi-part sidecar"], {}),
        ("rewind_to_message", ["m", 5], {}),
        (sidecar, ["m", "user 4", "after rewind"], {}),
        (sidecar, ["nobody", "x", "y"], {}),
        *[("get_messages", ["m"], kwargs) for kwargs in (
            {}, {"limit": 2}, {"limit": 2, "offset": 3}, {"offset": 4}, {"limit": 0},
            {"limit": -1, "offset": 2}, {"offset": -3}, {"limit": 50, "offset": 50},
            {"include_inactive": True, "limit": 3, "offset": 5},
        )],
        ("get_messages_as_conversation", ["m"], {}),
    ]  # fmt: skip
    # Our rewind returns the target's id, role, decoded content and time (SPEC), Hermes's
    # the raw row: compared by what both hold.
    theirs, ours = side_by_side(hermes, db, tmp_path, steps, frozenset({"rewind_to_message"}))
    assert theirs[7:14] == [1, 0, 7, 1, theirs[11], 0, 0]
    assert {k: v for k, v in ours[11].items() if k != "target_message"} == {
        k: v for k, v in theirs[11].items() if k != "target_message"}


def test_titles_streaks_and_fts_rebuild_are_hermes_019s(
    hermes: RealHermes, db: SessionDB, tmp_path: Path
) -> None:
    auto = "set_auto_title_if_empty"
    steps: list[Step] = [
        ("create_session", ["t1", "cli"], {}),
        ("create_session", ["t2", "cli"], {}),
        (auto, ["t1", "  Generated   title "], {}),
        (auto, ["t1", "Another"], {}),
        ("set_session_title", ["t2", "Manual"], {}),
        (auto, ["t2", "Generated"], {}),
        (auto, ["nobody", "x"], {}),
        ("get_session_title", ["t1"], {}),
        ("set_compression_fallback_streak", ["t1", 3], {}),
        ("get_compression_fallback_streak", ["t1"], {}),
        ("set_compression_fallback_streak", ["t1", -2], {}),
        ("get_compression_fallback_streak", ["t1"], {}),
        ("get_compression_fallback_streak", ["nobody"], {}),
        ("get_compression_fallback_streak", [""], {}),
        ("append_message", ["t1", "user", "rebuild the kubernetes index"], {}),
        ("rebuild_fts", [], {}),
        ("search_messages", ["kubernetes"], {}),
    ]
    # Search snippets differ by the blanks Hermes's index keeps (tests/hermes/
    # test_real_hermes_files.py: assert_same_hits); the hits are compared by id.
    theirs, ours = side_by_side(hermes, db, tmp_path, steps, frozenset({"search_messages"}))
    assert theirs[2:7] == [True, False, True, False, False]
    assert ours[15] >= theirs[15] > 0
    assert [hit["id"] for hit in ours[16]] == [hit["id"] for hit in theirs[16]] == [1]


# -- listing keywords -------------------------------------------------------------------------

def test_search_query_and_compact_rows_are_hermes_019s(
    hermes: RealHermes, db: SessionDB, tmp_path: Path
) -> None:
    # Every tip titled: an untitled tip is listed under its root's title by iot 0.22.2
    # (#106165), which we follow; 0.19.0 lists it untitled.
    titles = ("root", "AN-94 rifle notes"), ("cont", "Deploy_the.cluster #2"), (
        "branch", "Helm charts"), ("live", "Café Ünïcode"), ("quiet", "100% done"), (
        "tip", "Rifle range")
    steps = [
        *family(race=False),
        *[("set_session_title", [sid, title], {}) for sid, title in titles],
        ("update_system_prompt", ["live", "a long system prompt " * 50], {}),
    ]
    queries = ["an94", "AN-94", "deploy the cluster", "deploytheclu", "helm", "tip", "CAFÉ",
               "café", "ünï", "100%", "%", "_", "  ", "--", "nothing", "live-child"]
    for query in queries:
        for extra in ({}, {"compact_rows": True}, {"include_children": True}):
            steps.append(("list_sessions_rich", [], {"order_by_last_active": True,
                                                     "search_query": query, **extra}))
    steps.append(("list_sessions_rich", [], {"search_query": "helm"}))
    steps.append(("list_sessions_rich", [], {"compact_rows": True, "limit": 5}))
    theirs, _ = side_by_side(hermes, db, tmp_path, steps)
    found = {q: [row["id"] for row in theirs[len(steps) - 2 - 3 * len(queries) + 3 * i]]
             for i, q in enumerate(queries)}  # fmt: skip
    assert found["an94"] and found["deploytheclu"] and not found["nothing"]
    assert all("system_prompt" not in row for row in theirs[-1])


# -- bulk filters ---------------------------------------------------------------------------

def prune_family() -> list[Step]:
    steps: list[Step] = []
    for n, (source, reason, model, provider, branch) in enumerate([
        ("cli", "user_exit", "claude-sonnet", "Anthropic", "main"),
        # Not 'compression': a compression ancestor ages with its conversation in iot 0.22.2
        # and ours, not in 0.19.0 (tests/hermes/test_real_iot_prune_age.py has that rule).
        ("cli", "timeout", "gpt-5", "openai", "feature/x"),
        ("telegram", "user_exit", "claude-haiku", "anthropic", None),
        ("cron", None, "qwen", "openrouter", "main"),
        ("cli", "error", "CLAUDE-opus", "ANTHROPIC", "Feature/Y"),
    ]):
        sid = f"p{n}"
        ended = None if reason is None else NOW - (20 - n) * DAY
        steps += make(sid, source=source, started=NOW - (30 - 5 * n) * DAY, ended=ended,
                      reason=reason, title=f"Title {n}", archived=int(n == 4), api_calls=n)
        steps.append(sql(
            "UPDATE sessions SET model = :m, billing_provider = :p, git_branch = :b, "
            "input_tokens = :i, output_tokens = :o, estimated_cost_usd = :e, "
            "actual_cost_usd = :a, tool_call_count = :t, user_id = :u, chat_id = :c, "
            "chat_type = :ct, cwd = :cwd, message_count = :mc WHERE id = :id",
            m=model, p=provider, b=branch, i=100 * n, o=10 * n, e=0.5 * n,
            a=None if n % 2 else 0.25 * n, t=n, u=f"user{n % 2}", c=f"chat{n}",
            ct="dm" if n % 2 else "group", cwd=f"/w/app{n % 3}", mc=2 * n, id=sid,
        ))
    steps.append(("create_session", ["p1-child", "cli"], {"parent_session_id": "p1"}))
    steps.append(sql("UPDATE sessions SET started_at = :s WHERE id = 'p1-child'",
                     s=NOW - 19 * DAY))
    return steps


PRUNE_FILTERS: list[dict[str, Any]] = [
    {}, {"older_than_days": 22}, {"older_than_days": None}, {"source": "cli"},
    {"title_like": "TITLE 1"}, {"end_reason": "user_exit"}, {"cwd_prefix": "/w/app1"},
    {"min_messages": 4}, {"max_messages": 4}, {"archived": True}, {"archived": False},
    {"model_like": "claude"}, {"provider": "anthropic"}, {"user_id": "user1"},
    {"chat_id": "chat2"}, {"chat_type": "dm"}, {"branch_like": "feature"},
    {"min_tokens": 200}, {"max_tokens": 120}, {"min_cost": 1.0}, {"max_cost": 0.6},
    {"min_tool_calls": 2}, {"max_tool_calls": 1}, {"started_after": NOW - 21 * DAY},
    {"started_before": NOW - 26 * DAY, "older_than_days": 1},
    {"source": "cli", "model_like": "claude", "archived": None},
]  # fmt: skip
ARCHIVE_FLAGS = select_rows("SELECT id, archived FROM sessions ORDER BY id")


@pytest.mark.parametrize("index", range(len(PRUNE_FILTERS)))
def test_bulk_filters_select_archive_and_prune_as_hermes_019(
    hermes: RealHermes, db: SessionDB, tmp_path: Path, index: int
) -> None:
    filters = PRUNE_FILTERS[index]
    steps: list[Step] = [
        *prune_family(),
        ("list_prune_candidates", [], filters),
        ("archive_sessions", [], filters),
        ARCHIVE_FLAGS,
        ("prune_sessions", [], {"older_than_days": 0, **filters}
         if "older_than_days" not in filters else filters),
        select_rows("SELECT id, parent_session_id FROM sessions ORDER BY id"),
    ]  # fmt: skip
    side_by_side(hermes, db, tmp_path, steps)


def test_an_unknown_filter_is_a_type_error_on_both_sides(db: SessionDB) -> None:
    for method in (db.list_prune_candidates, db.archive_sessions, db.prune_sessions):
        with pytest.raises(TypeError):
            method(older_than_days=1, colour="red")


# -- import ---------------------------------------------------------------------------------

def import_payload() -> list[dict[str, Any]]:
    base = {"source": "cli", "model": "claude", "started_at": NOW - DAY, "ended_at": NOW,
            "input_tokens": 12, "estimated_cost_usd": 0.5, "title": "Imported",
            "model_config": {"temperature": 0.1}, "archived": 1}  # fmt: skip
    messages = [
        {"role": "user", "content": "hello", "timestamp": NOW - DAY},
        {"role": "assistant", "content": None, "reasoning": "think",
         "reasoning_details": '[{"type": "reasoning.text"}]',
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "t", "arguments": "{}"}}]},
        {"role": "tool", "content": "out", "tool_call_id": "c1", "reasoning": "dropped",
         "effect_disposition": "applied", "api_content": "out (sent)", "message_id": "p-1"},
        {"role": "user", "content": [{"type": "text", "text": "parts"}], "observed": True,
         "token_count": "7", "timestamp": "not a time"},
    ]
    return [
        {**base, "id": "i-root", "messages": messages},
        {"id": "i-child", "parent_session_id": "i-root", "messages": [], "title": None},
        {"id": "i-orphan", "parent_session_id": "missing", "source": None},
        {"id": "existing", "title": "would clash"},
        {"id": "i-loop-a", "parent_session_id": "i-loop-b"},
        {"id": "i-loop-b", "parent_session_id": "i-loop-a"},
    ]


IMPORTED = select_rows(
    "SELECT id, source, user_id, model, model_config, parent_session_id, started_at, "
    "ended_at, message_count, tool_call_count, input_tokens, estimated_cost_usd, title, "
    "archived FROM sessions ORDER BY id"
)
IMPORTED_MESSAGES = select_rows(
    # content through get_messages: PostgreSQL keeps multi-part content's NUL marker as U+FFFD
    "SELECT session_id, role, tool_call_id, tool_calls, tool_name, "
    "effect_disposition, token_count, reasoning, reasoning_details, platform_message_id, "
    "observed, active, api_content FROM messages ORDER BY id"
)


def test_import_sessions_is_hermes_019s(hermes: RealHermes, db: SessionDB, tmp_path: Path) -> None:
    bad = [
        ["not a dict"], [{"id": " "}], [{"id": "x"}, {"id": "x"}],
        [{"id": "x", "messages": "no"}], [{"id": "x", "messages": [1]}],
        [{"id": "x", "messages": [{"role": ""}]}], [{"id": "x", "title": 5}],
        [{"id": "x", "model_config": "[1]"}], [{"id": "x", "model_config": "{bad"}],
        [{"id": "x", "messages": [{"role": "user", "token_count": "many"}]}],
        [{"id": "ok"}, {"id": "y", "messages": [{"role": "user", "tool_name": 3}]}],
    ]  # fmt: skip
    steps: list[Step] = [
        ("create_session", ["existing", "cli"], {}),
        ("import_sessions", [import_payload()], {}),
        ("import_sessions", [import_payload()], {}),
        *[("import_sessions", [payload], {}) for payload in bad],
        IMPORTED,
        IMPORTED_MESSAGES,
        ("get_messages", ["i-root"], {}),
    ]
    theirs, _ = side_by_side(hermes, db, tmp_path, steps)
    assert theirs[1]["imported"] == 5 and theirs[1]["detached"] >= 2


def test_importing_our_own_export_round_trips(db: SessionDB, tmp_path: Path) -> None:
    db.create_session("s", "cli", model="claude")
    db.append_message("s", "user", "hello", api_content="hello + memory")
    db.append_message("s", "assistant", "hi", effect_disposition="noop")
    exported = json.loads(json.dumps(db.export_all()))
    other = SessionDB(db_path=tmp_path / "other.db")
    try:
        assert other.import_sessions(exported)["imported_ids"] == ["s"]
        assert [
            {k: m[k] for k in ("role", "content", "api_content", "effect_disposition")}
            for m in other.get_messages("s")
        ] == [
            {"role": "user", "content": "hello", "api_content": "hello + memory",
             "effect_disposition": None},
            {"role": "assistant", "content": "hi", "api_content": None,
             "effect_disposition": "noop"},
        ]  # fmt: skip
    finally:
        other.close()
