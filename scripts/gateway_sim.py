"""A chat gateway on ``AsyncSessionDB``: many simulated chats kept alive at once, one event loop.

    python scripts/gateway_sim.py                       # the default store, 60 chats, 5 turns each
    python scripts/gateway_sim.py --db gw.db --chats 200 --turns 3
    python scripts/gateway_sim.py --url postgresql+psycopg://user@host/db

Telegram, Discord and Slack chats arrive together. For each incoming message the gateway does
what Hermes's gateway does with its session store: find the chat's session by its peer (or
start one and record the peer), log the user's message, let a scripted model think (an
``asyncio.sleep``, as a real API call would await), log the assistant's tool call, the tool's
answer and the reply as one turn (``append_messages``), count the tokens, and now and then
search the history or title the chat. A 1 ms ticker measures how late the loop wakes.
``main`` returns what it observed (the CLI prints it as JSON); every count is checked against
the store at the end, so a lost or doubled message is reported, not hidden.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sessionstore import AsyncSessionDB  # noqa: E402

PLATFORMS = ("telegram", "discord", "slack")
MODEL = "anthropic/claude-sonnet-4"


@dataclass
class Chat:
    platform: str
    chat_id: str
    user_id: str
    session_id: str = ""
    messages: int = 0
    tool_calls: int = 0

    @property
    def session_key(self) -> str:
        """Hermes's gateway key of a direct chat."""
        return f"agent:main:{self.platform}:dm:{self.chat_id}"


@dataclass
class Observed:
    turns: int = 0
    searches: int = 0
    failures: list[str] = field(default_factory=list)
    lags_ms: list[float] = field(default_factory=list)


async def open_session(db: AsyncSessionDB, chat: Chat) -> str:
    """The chat's latest session, or a new one with its peer recorded."""
    found = await db.find_latest_gateway_session_for_peer(
        source=chat.platform, user_id=chat.user_id, session_key=chat.session_key,
        chat_id=chat.chat_id, chat_type="dm",
    )  # fmt: skip
    if found is not None:
        return str(found["id"])
    session_id = f"{chat.platform}-{chat.chat_id}-{int(time.time() * 1000)}"
    await db.create_session(session_id, chat.platform, model=MODEL, user_id=chat.user_id)
    await db.record_gateway_session_peer(
        session_id, source=chat.platform, user_id=chat.user_id,
        session_key=chat.session_key, chat_id=chat.chat_id, chat_type="dm",
    )  # fmt: skip
    return session_id


async def handle(db: AsyncSessionDB, chat: Chat, n: int, rng: random.Random,
                 observed: Observed) -> None:
    """One incoming message and the agent's answer to it."""
    if not chat.session_id:
        chat.session_id = await open_session(db, chat)
    await db.append_message(chat.session_id, "user", f"{chat.platform} question {n}: deploy?")
    chat.messages += 1
    await asyncio.sleep(rng.uniform(0.001, 0.02))  # the model thinks
    call_id = f"call_{chat.chat_id}_{n}"
    call = {"id": call_id, "type": "function",
            "function": {"name": "terminal", "arguments": json.dumps({"cmd": "git status"})}}
    await db.append_messages(chat.session_id, [
        {"role": "assistant", "content": None, "tool_calls": [call],
         "reasoning": "Look at the working tree first."},
        {"role": "tool", "tool_call_id": call_id, "content": "nothing to commit"},
        {"role": "assistant", "content": f"Answer {n}: the tree is clean, deploying."},
    ])  # fmt: skip
    chat.messages += 3
    chat.tool_calls += 1
    await db.update_token_counts(chat.session_id, input_tokens=120, output_tokens=40,
                                 model=MODEL, api_call_count=2)
    if n == 0:
        await db.set_session_title(chat.session_id, f"{chat.platform} chat {chat.chat_id}")
    if rng.random() < 0.3:
        await db.search_messages("deploy", source_filter=[chat.platform], limit=5)
        observed.searches += 1
    observed.turns += 1


async def serve(db: AsyncSessionDB, chats: list[Chat], turns: int, seed: int) -> Observed:
    observed = Observed()
    done = asyncio.Event()

    async def tick() -> None:
        loop = asyncio.get_running_loop()
        while not done.is_set():
            before = loop.time()
            await asyncio.sleep(0.001)
            observed.lags_ms.append((loop.time() - before - 0.001) * 1e3)

    async def converse(index: int, chat: Chat) -> None:
        rng = random.Random(seed * 100_003 + index)
        for n in range(turns):
            try:
                await handle(db, chat, n, rng, observed)
            except Exception as exc:  # a gateway keeps serving the other chats
                observed.failures.append(f"{chat.platform}/{chat.chat_id}: {exc!r}")
            await asyncio.sleep(rng.uniform(0, 0.01))  # the user types

    ticking = asyncio.create_task(tick())
    await asyncio.gather(*(converse(i, chat) for i, chat in enumerate(chats)))
    done.set()
    await ticking
    return observed


async def check(db: AsyncSessionDB, chats: list[Chat]) -> list[str]:
    """Every chat's session holds exactly the messages the gateway logged, and can resume."""
    problems = []
    for chat in chats:
        session = await db.get_session(chat.session_id)
        rows = await db.message_count(chat.session_id)
        if session is None:
            problems.append(f"{chat.session_id}: missing")
            continue
        counted = (session["message_count"], session["tool_call_count"], rows)
        if counted != (chat.messages, chat.tool_calls, chat.messages):
            problems.append(f"{chat.session_id}: counters/rows {counted}, logged "
                            f"{(chat.messages, chat.tool_calls)}")
        history = await db.get_messages_as_conversation(chat.session_id)
        if len(history) != chat.messages:
            problems.append(f"{chat.session_id}: resumes with {len(history)} messages")
    return problems


async def run_gateway(db: AsyncSessionDB, chat_count: int, turns: int,
                      seed: int = 1) -> dict[str, Any]:
    run = f"{seed}{random.Random().randrange(10**6):06d}"
    chats = [Chat(PLATFORMS[i % 3], f"{run}-{i}", f"user{i}") for i in range(chat_count)]
    started = time.perf_counter()
    observed = await serve(db, chats, turns, seed)
    seconds = time.perf_counter() - started
    lags = sorted(observed.lags_ms)
    return {
        "chats": chat_count,
        "turns": observed.turns,
        "messages": sum(chat.messages for chat in chats),
        "searches": observed.searches,
        "seconds": round(seconds, 2),
        "loop_lag_p99_ms": round(lags[int(len(lags) * 0.99)], 2) if lags else None,
        "failures": observed.failures,
        "problems": await check(db, chats),
    }


async def main(db_path: str | None, url: str | None, chats: int, turns: int,
               seed: int) -> dict[str, Any]:
    async with AsyncSessionDB(db_path, url=url) as db:
        return await run_gateway(db, chats, turns, seed)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", help="a SQLite file")
    parser.add_argument("--url", help="a database URL (SQLite or PostgreSQL)")
    parser.add_argument("--chats", type=int, default=60)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    report = asyncio.run(main(args.db, args.url, args.chats, args.turns, args.seed))
    print(json.dumps(report, indent=2))
    sys.exit(1 if report["failures"] or report["problems"] else 0)
