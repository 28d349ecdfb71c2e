"""Async actors as in Ray: coroutines on the actor's event loop, concurrently."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import cloudpickle
import pytest

import tracedray

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.integration


@tracedray.remote
class AsyncBarrier:
    """Calls wait for each other: only concurrent execution lets them all finish."""

    def __init__(self, parties: int) -> None:
        self.parties = parties
        self.arrived = 0
        self.event = asyncio.Event()

    async def arrive(self) -> int:
        self.arrived += 1
        if self.arrived == self.parties:
            self.event.set()
        await self.event.wait()
        return self.arrived

    async def fails(self) -> None:
        await asyncio.sleep(0)
        raise ValueError("from a coroutine")

    def sync_method(self) -> str:
        return "sync still works"


@tracedray.remote
class Bounded:
    def __init__(self) -> None:
        self.running = 0
        self.peak = 0

    async def work(self) -> int:
        self.running += 1
        self.peak = max(self.peak, self.running)
        await asyncio.sleep(0.2)
        self.running -= 1
        return self.peak


@tracedray.remote
class Awaiter:
    async def first(self, refs: list[Any]) -> Any:
        return await refs[0]  # a ref inside a list arrives as a ref, not its value


def test_refs_resolve_by_await_in_an_actor_and_by_future_in_the_driver(shared_ray: Any
                                                                       ) -> None:
    value = shared_ray.put("the value")
    actor = Awaiter.remote()
    assert shared_ray.get(actor.first.remote([value]), timeout=60) == "the value"
    assert value.future().result(timeout=60) == "the value"
    shared_ray.kill(actor)


def test_async_calls_run_concurrently_on_the_actors_loop(shared_ray: Any) -> None:
    actor = AsyncBarrier.remote(50)
    refs = [actor.arrive.remote() for _ in range(50)]
    assert shared_ray.get(refs, timeout=60) == [50] * 50
    with pytest.raises(ValueError, match="from a coroutine"):
        shared_ray.get(actor.fails.remote(), timeout=60)
    assert shared_ray.get(actor.sync_method.remote(), timeout=60) == "sync still works"
    shared_ray.kill(actor)


def test_max_concurrency_bounds_an_async_actor(shared_ray: Any) -> None:
    actor = Bounded.options(max_concurrency=3).remote()
    peaks = shared_ray.get([actor.work.remote() for _ in range(9)], timeout=60)
    assert max(peaks) == 3
    shared_ray.kill(actor)
