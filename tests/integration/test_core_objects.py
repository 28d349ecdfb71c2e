"""Object lifetime and capacity: freed when no reference remains, a full store says why."""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Iterator
from typing import Any

import cloudpickle
import numpy as np
import pytest

import tracedray
from tracedray import exceptions

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.integration
MB = 1 << 20


@tracedray.remote
def big_array(megabytes: int) -> np.ndarray:
    return np.ones(megabytes * MB // 8)


@tracedray.remote
def wrap_in_list(megabytes: int) -> list[Any]:
    # The worker owns the inner object; the list that carries it keeps it alive.
    return [tracedray.put(np.ones(megabytes * MB // 8))]


@tracedray.remote
def total(array: np.ndarray) -> float:
    return float(array.sum())


@tracedray.remote
class Holder:
    def __init__(self) -> None:
        self.kept: list[Any] = []

    def keep(self, refs: list[Any]) -> int:
        self.kept.extend(refs)
        return len(self.kept)

    def total(self) -> float:
        return float(sum(tracedray.get(ref).sum() for ref in self.kept))

    def drop(self) -> None:
        self.kept.clear()


def _store_used() -> int:
    worker = tracedray.api.calls.global_worker()
    return int(worker.raylet.node_stats().store_used)


def _wait_store_used(predicate: Any, timeout: float = 30.0) -> int:
    deadline = time.monotonic() + timeout
    while True:
        gc.collect()
        used = _store_used()
        if predicate(used) or time.monotonic() > deadline:
            return used
        time.sleep(0.05)


def test_objects_are_freed_when_no_reference_remains(ray: Any) -> None:
    assert _store_used() == 0
    put_ref = ray.put(np.ones(4 * MB // 8))
    task_ref = big_array.remote(4)
    assert ray.get(total.remote(task_ref)) == 4 * MB // 8
    assert _store_used() >= 8 * MB
    del put_ref, task_ref
    assert _wait_store_used(lambda used: used == 0) == 0


def test_refs_inside_values_keep_their_objects_alive(ray: Any) -> None:
    outer = wrap_in_list.remote(4)
    (inner,) = ray.get(outer)
    assert isinstance(inner, ray.ObjectRef)
    del inner
    gc.collect()
    # the outer value still holds the inner ref: its object must stay readable
    (inner_again,) = ray.get(outer)
    assert ray.get(inner_again).sum() == 4 * MB // 8
    del inner_again
    del outer
    assert _wait_store_used(lambda used: used == 0) == 0


def test_borrowed_refs_held_by_an_actor(ray: Any) -> None:
    holder = Holder.remote()
    refs = [ray.put(np.ones(2 * MB // 8)) for _ in range(2)]
    assert ray.get(holder.keep.remote(refs)) == 2
    del refs
    gc.collect()
    # the driver dropped its refs; the actor's borrowed refs keep the objects alive
    assert ray.get(holder.total.remote()) == 2 * (2 * MB // 8)
    assert _store_used() >= 4 * MB
    ray.get(holder.drop.remote())
    assert _wait_store_used(lambda used: used == 0) == 0


@pytest.fixture
def small_store(no_leaks: None) -> Iterator[Any]:
    tracedray.init(num_cpus=2, object_store_memory=64 * MB, object_spilling=False)
    try:
        yield tracedray
    finally:
        tracedray.shutdown()


def test_full_store_without_spilling(small_store: Any) -> None:
    ray = small_store
    held = ray.put(np.ones(40 * MB // 8))
    with pytest.raises(exceptions.ObjectStoreFullError) as info:
        ray.put(np.ones(40 * MB // 8))
    message = str(info.value)
    # how much is used, by what (call site), and where to look next
    assert "40.0 MiB of 64.0 MiB used" in message
    assert "created at test_core_objects.py" in message
    assert "tracedray memory" in message
    with pytest.raises(exceptions.ObjectStoreFullError):
        ray.get(big_array.options(max_retries=0).remote(40), timeout=60)
    del held
    assert _wait_store_used(lambda used: used == 0) == 0
    # with the space back, the same put works
    assert ray.get(ray.put(np.ones(40 * MB // 8))).sum() == 40 * MB // 8
