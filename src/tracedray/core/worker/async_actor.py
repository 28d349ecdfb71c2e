"""Async actors: an actor whose class has ``async def`` methods runs their coroutines on
an event loop of its own, as Ray's asyncio actors do.

Each call still arrives on one of the actor's threads (up to ``max_concurrency``, 1,000
by default for an async actor, as in Ray); that thread hands the coroutine to the loop
and waits for it, so calls that await (each other, timers, I/O) run concurrently on
the one loop. The coroutine is made in the actor and never pickled. It runs in a copy
of the calling thread's context: its log lines and spans carry the call's task.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import threading
from collections.abc import Coroutine
from typing import Any

DEFAULT_ASYNC_MAX_CONCURRENCY = 1000


def is_async_actor(cls: type) -> bool:
    """Whether the class has ``async def`` methods (then it is an async actor, as in Ray)."""
    return any(inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member)
               for _, member in inspect.getmembers(cls, predicate=inspect.isfunction))


def actor_concurrency(given: int, is_async: bool) -> int:
    """The actor's thread count: what ``max_concurrency`` says, else Ray's default."""
    if given > 0:
        return given
    return DEFAULT_ASYNC_MAX_CONCURRENCY if is_async else 1


class ActorEventLoop:
    """One event loop on a thread of its own, running the actor's coroutines."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="tracedray-actor-loop")
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coroutine`` on the loop and wait for its result (or its exception)."""
        context = contextvars.copy_context()
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def settle(task: asyncio.Task[Any]) -> None:
            if task.cancelled():
                done.set_exception(asyncio.CancelledError())
            elif task.exception() is not None:
                done.set_exception(task.exception())
            else:
                done.set_result(task.result())

        def start() -> None:
            self._loop.create_task(coroutine, context=context).add_done_callback(settle)

        self._loop.call_soon_threadsafe(start)
        return done.result()
