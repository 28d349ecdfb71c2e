"""Idle workers beyond the soft limit are reaped (real raylet, real workers).

On one CPU, a nested burst starts a worker per blocked level; once it is over, the
raylet stops the idle extras (oldest first) down to the soft limit (the CPU count),
records each exit as an intended one, and keeps a worker that owns an object the
driver still uses.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
from multinode_support import log_events, spans_named, wait_for

import tracedray
from tracedray._proto.v1 import raylet_pb2
from tracedray.util import state

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.integration
TIMEOUT_S = 0.5


@tracedray.remote
def leaf(x: int, delay_s: float) -> int:
    time.sleep(delay_s)
    return x + 1


@tracedray.remote
def middle(x: int, delay_s: float) -> int:
    return sum(tracedray.get([leaf.remote(x, delay_s), leaf.remote(x + 1, delay_s)]))


@tracedray.remote
def top(n: int, delay_s: float) -> int:
    return sum(tracedray.get([middle.remote(i, delay_s) for i in range(n)]))


@tracedray.remote
def make_owned() -> list[Any]:
    return [tracedray.put("kept by its owner")]


EXPECTED = sum((i + 1) + (i + 2) for i in range(3))


@pytest.fixture
def one_cpu(no_leaks: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    monkeypatch.setenv("TRACEDRAY_IDLE_WORKER_TIMEOUT_S", str(TIMEOUT_S))
    info = tracedray.init(num_cpus=1, object_store_memory=64 << 20)
    try:
        yield info
    finally:
        tracedray.shutdown()


def _stats() -> raylet_pb2.NodeStats:
    return tracedray.api.calls.global_worker().raylet.node_stats()


def _live_task_workers(stats: raylet_pb2.NodeStats) -> list[Any]:
    return [w for w in stats.workers if w.state not in ("DEAD", "STOPPING") and not w.actor_id]


def _settled(stats: raylet_pb2.NodeStats) -> bool:
    """No worker is between its SIGTERM and its recorded exit."""
    return not any(w.state == "STOPPING" for w in stats.workers)


def test_idle_workers_beyond_the_soft_limit_are_reaped(one_cpu: dict[str, Any]) -> None:
    session = Path(one_cpu["session_dir"])
    outer = make_owned.remote()  # kept: the worker's object stays referenced through it
    held = tracedray.get(outer, timeout=60)
    owner_pid = held[0].owner_address.pid

    # The burst: top and the middles block in get(), each lending its CPU out (the
    # leaves' short sleep keeps the three middles blocked at the same time).
    assert tracedray.get(top.remote(3, 0.2), timeout=120) == EXPECTED
    started = len(_stats().workers)
    assert started >= 4, f"the burst should have started extra workers, started {started}"

    # Down to the soft limit (1 CPU): the worker that owns `held` is the one kept.
    def shrunk() -> bool:
        stats = _stats()
        return _settled(stats) and [w.pid for w in _live_task_workers(stats)] == [owner_pid]

    wait_for(shrunk, 30, "the pool to shrink to the worker owning an object in use")
    assert tracedray.get(held[0], timeout=30) == "kept by its owner"

    reaped = [w for w in _stats().workers if w.state == "DEAD"]
    assert len(reaped) == started - 1
    for worker in reaped:
        assert worker.exit_code == 0 and not worker.exit_signal, worker
        assert worker.exit_meaning.startswith("reaped as idle by the raylet"), worker
    rows = {r["pid"]: r for r in state.list_workers(address=one_cpu["address"])}
    assert all(rows[w.pid]["exit_meaning"] == w.exit_meaning for w in reaped)

    # Recorded as intended exits, not crashes: info level, reason "idle".
    exits = {r["worker_pid"]: r for r in log_events(session, "worker.exit")}
    assert set(exits) == {w.pid for w in reaped}
    for record in exits.values():
        assert record["reason"] == "idle" and record["level"] == "info", record
        assert record["exit_code"] == 0 and record["meaning"].startswith("reaped as idle")
    decisions = log_events(session, "worker.reap")
    assert sorted(r["worker_pid"] for r in decisions) == sorted(exits)
    assert max(r["reaped_total"] for r in decisions) == len(reaped)
    assert all(r["soft_limit"] == 1 and r["idle_s"] >= TIMEOUT_S for r in decisions)
    idle_exit_spans = [s for s in spans_named(session, "worker.exit")
                       if s.get("tracedray.exit.reason") == "idle"]
    assert len(idle_exit_spans) == len(reaped)

    # A following burst, whose leaves outlast the idle timeout: workers go while others
    # are blocked or leased, and none of the work is lost.
    assert tracedray.get(top.remote(3, TIMEOUT_S * 1.5), timeout=120) == EXPECTED
    wait_for(lambda: len(_live_task_workers(_stats())) == 1 and _settled(_stats()), 30,
             "the pool to shrink again")
    assert tracedray.get(top.remote(2, 0.0), timeout=120) == sum(
        (i + 1) + (i + 2) for i in range(2))
    unexpected = [r for r in log_events(session, "worker.exit") if r["reason"] != "idle"]
    assert unexpected == []
    assert tracedray.get(held[0], timeout=30) == "kept by its owner"
    del outer, held


def test_workers_up_to_the_soft_limit_stay(no_leaks: None,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEDRAY_IDLE_WORKER_TIMEOUT_S", str(TIMEOUT_S))
    monkeypatch.setenv("TRACEDRAY_IDLE_WORKER_SOFT_LIMIT", "3")
    tracedray.init(num_cpus=1, object_store_memory=64 << 20)
    try:
        assert tracedray.get(top.remote(3, 0.2), timeout=120) == EXPECTED
        assert len(_stats().workers) > 3
        wait_for(lambda: len(_live_task_workers(_stats())) == 3, 30,
                 "the pool to shrink to the configured soft limit")
        time.sleep(TIMEOUT_S * 3)  # and no further
        assert len(_live_task_workers(_stats())) == 3
    finally:
        tracedray.shutdown()
