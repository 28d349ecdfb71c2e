"""Nested tasks on a one-CPU cluster: a task blocked in get() gives its CPU back."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import cloudpickle
import pytest

import tracedray

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.integration


@tracedray.remote
def leaf(x: int) -> int:
    return x + 1


@tracedray.remote
def middle(x: int) -> int:
    return sum(tracedray.get([leaf.remote(x), leaf.remote(x + 1)]))


@tracedray.remote
def top(n: int) -> int:
    return sum(tracedray.get([middle.remote(i) for i in range(n)]))


@tracedray.remote
def waits_on(ref_list: list[Any]) -> int:
    return sum(tracedray.get(ref_list))


@pytest.fixture(scope="module")
def one_cpu() -> Iterator[Any]:
    tracedray.init(num_cpus=1, object_store_memory=64 << 20)
    try:
        yield tracedray
    finally:
        tracedray.shutdown()


def test_three_levels_of_nesting_on_one_cpu(one_cpu: Any) -> None:
    expected = sum((i + 1) + (i + 2) for i in range(3))
    assert one_cpu.get(top.remote(3), timeout=120) == expected


def test_many_blocked_callers_on_one_cpu(one_cpu: Any) -> None:
    ray = one_cpu
    outers = [middle.remote(i) for i in range(4)]
    assert ray.get(outers, timeout=120) == [(i + 1) + (i + 2) for i in range(4)]


def test_task_waiting_on_refs_submitted_after_it(one_cpu: Any) -> None:
    ray = one_cpu
    later = [leaf.remote(i) for i in range(3)]
    assert ray.get(waits_on.remote(later), timeout=120) == 6


@tracedray.remote
def parent_of_one(i: int) -> int:
    return int(tracedray.get(leaf.remote(i)))


def test_nested_blocking_stays_bounded(one_cpu: Any) -> None:
    """A thousand tasks that each get a child on one CPU: blocked callers lend their CPU,
    but the workers started for that stay few (a caller keeps at most 16 lease requests
    out per scheduling key), not one per blocked task."""
    import threading

    import psutil

    peak = 0
    done = threading.Event()

    def watch() -> None:
        nonlocal peak
        me = psutil.Process()
        while not done.is_set():
            workers = sum(1 for p in me.children(recursive=True)
                          if "tracedray.api.worker_main" in " ".join(_cmdline(p)))
            peak = max(peak, workers)
            done.wait(0.1)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        results = one_cpu.get([parent_of_one.remote(i) for i in range(1000)], timeout=600)
    finally:
        done.set()
        watcher.join()
    assert results == [i + 1 for i in range(1000)]
    assert 0 < peak <= 40, f"{peak} worker processes at once for 1,000 nested tasks"


def _cmdline(process: Any) -> list[str]:
    import psutil

    try:
        return list(process.cmdline())
    except psutil.Error:
        return []
