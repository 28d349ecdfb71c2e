"""A worker that dies in one task, with more of its caller's tasks queued behind it (a
caller pipelines up to 8 tasks on a leased worker): as in Ray, where a worker holds one
task at a time, only the task it died in fails; the others never started and run on
another worker without using a retry (leases.started_orphans)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import cloudpickle
import pytest

import tracedray
from tracedray import exceptions

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.integration


@tracedray.remote(max_retries=0)
def crashes_after(delay_s: float) -> None:
    time.sleep(delay_s)
    os._exit(1)


@tracedray.remote(max_retries=0)
def echo(value: int) -> int:
    return value


@pytest.fixture
def one_cpu(ray: Any) -> Any:
    """The ``ray`` fixture's cluster, with one CPU: one worker leased at a time."""
    ray.shutdown()
    ray.init(num_cpus=1, object_store_memory=128 << 20)
    return ray


def _records(refs: list[Any]) -> list[Any]:
    worker = tracedray.api.calls.global_worker()
    worker.flush_background_work()
    return list(worker.gcs.get_tasks(
        task_ids=[bytes.fromhex(r.task_id().hex()) for r in refs]).tasks)


def test_only_the_task_a_worker_died_in_fails_and_the_ones_behind_it_run(one_cpu: Any) -> None:
    before = [echo.remote(i) for i in range(2)]  # finished on that worker first
    crashing = crashes_after.remote(0.3)
    queued = [echo.remote(i) for i in range(6)]
    with pytest.raises(exceptions.WorkerCrashedError):
        one_cpu.get(crashing)
    assert one_cpu.get(before + queued, timeout=60) == [0, 1, *range(6)]
    deadline = time.monotonic() + 20
    while True:
        records = _records(queued)
        if all(r.state == "FINISHED" for r in records) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    # They ran once, as their first attempt, on a worker other than the one that died.
    assert [(r.state, r.attempt) for r in records] == [("FINISHED", 0)] * 6
    (dead,) = _records([crashing])
    assert dead.state == "FAILED" and {r.worker_pid for r in records} != {dead.worker_pid}
