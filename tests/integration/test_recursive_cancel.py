"""cancel() as in Ray: recursive by default, queued actor calls, force on actor calls."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import cloudpickle
import psutil
import pytest

import tracedray
from tracedray import exceptions

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.integration


@tracedray.remote(num_cpus=0)
def child(marker: str) -> None:
    Path(marker).write_text(str(os.getpid()))
    for _ in range(600):  # short sleeps: a cancel interrupts between two of them
        time.sleep(0.1)
    Path(marker).write_text("finished")


@tracedray.remote(num_cpus=0)
def parent(marker: str) -> None:
    ref = child.remote(marker)
    tracedray.get(ref)


@tracedray.remote
class Sleeper:
    def nap(self, seconds: float) -> float:
        time.sleep(seconds)
        return seconds


def _wait_for_file(path: Path, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


@pytest.mark.parametrize("force", [False, True])
def test_cancelling_a_task_cancels_the_tasks_it_submitted(
        shared_ray: Any, tmp_path: Path, force: bool) -> None:
    marker = tmp_path / "child"
    outer = parent.remote(str(marker))
    _wait_for_file(marker)
    # The child's ref is owned by the parent's worker: ask the cluster's task table.
    shared_ray.cancel(outer, force=force)
    with pytest.raises((exceptions.TaskCancelledError, exceptions.WorkerCrashedError)):
        shared_ray.get(outer, timeout=30)
    pid = int(marker.read_text())
    if force:  # the child's worker is ended too
        deadline = time.monotonic() + 30
        while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the child's worker still runs"
            time.sleep(0.2)
        return
    from tracedray.util.state import list_tasks

    def child_state() -> str:
        rows = [t for t in list_tasks() if t["name"].endswith("child")]
        return rows[-1]["state"] if rows else ""

    deadline = time.monotonic() + 30
    while child_state() not in ("FAILED", "CANCELLED"):
        assert time.monotonic() < deadline, f"the child is still {child_state()}"
        time.sleep(0.2)
    assert marker.read_text() == str(pid)  # interrupted, never finished


def test_queued_actor_calls_are_cancelled_and_force_is_refused(shared_ray: Any) -> None:
    actor = Sleeper.remote()
    running = actor.nap.remote(1.5)
    queued = actor.nap.remote(0.1)
    after = actor.nap.remote(0.2)
    with pytest.raises(ValueError, match="force=True is not supported for actor tasks"):
        shared_ray.cancel(queued, force=True)
    shared_ray.cancel(queued)
    with pytest.raises(exceptions.TaskCancelledError):
        shared_ray.get(queued, timeout=30)
    assert shared_ray.get([running, after], timeout=30) == [1.5, 0.2]
    shared_ray.kill(actor)
