"""Helpers for the async tests: a loop in a thread, and AsyncSessionDB behind sync calls.

``BlockingAsyncSessionDB`` lets the facade's table tests (``tests/api/test_session_db.py``) run
through ``AsyncSessionDB`` unchanged: every coroutine method is awaited on an event loop that runs
in a thread of its own, so the test body stays sync while each call goes through the async layer
(its threads, its retry loop, its turn) for real.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from sessionstore import AsyncSessionDB

T = TypeVar("T")


class LoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


class BlockingAsyncSessionDB:
    """``AsyncSessionDB(*args, **kwargs)``, each coroutine method awaited to its end."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._loop = LoopThread()
        self.async_db = AsyncSessionDB(*args, **kwargs)
        try:
            self._loop.run(self.async_db.open())
        except BaseException:
            self._loop.stop()
            raise

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self.async_db, name)
        if not inspect.iscoroutinefunction(attribute):
            return attribute

        def blocking(*args: Any, **kwargs: Any) -> Any:
            return self._loop.run(attribute(*args, **kwargs))

        return blocking

    def close(self) -> None:
        try:
            self._loop.run(self.async_db.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> BlockingAsyncSessionDB:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def ticker(gaps: list[float], stop: asyncio.Event, period_s: float = 0.001) -> Callable[[], Any]:
    """A coroutine function that sleeps ``period_s`` until ``stop``, recording each lateness."""

    async def tick() -> None:
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            before = loop.time()
            await asyncio.sleep(period_s)
            gaps.append(loop.time() - before - period_s)

    return tick
