"""An actor call's task record: the actor leaves the states of a call that returned to
its caller (one event per call at the GCS, worker/task_events.py), yet the record says
as much as when the actor reported them itself: when it ran, where, and how it ended;
a call still running shows RUNNING; a failed call is the actor's to record."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

import cloudpickle
import pytest

import tracedray
from tracedray.util import state

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.integration
WITHIN_S = 20.0


@tracedray.remote
class Worker:
    def pid(self) -> int:
        return os.getpid()

    def ping(self) -> str:
        return "pong"

    def nap(self, seconds: float) -> str:
        time.sleep(seconds)
        return "rested"

    def fail(self) -> None:
        raise ValueError("no")


def _record(task_id: str, until: Any) -> dict[str, Any]:
    deadline = time.monotonic() + WITHIN_S
    while True:
        row = state.get_task(task_id)
        if row is not None and until(row):
            return dict(row)
        assert time.monotonic() < deadline, row
        time.sleep(0.1)


def _state_times(task_id: str) -> dict[str, float]:
    """Every state of the task's attempt with its time, from the GCS's record."""
    client = state._client(None)  # noqa: SLF001 - the record's events, not the row
    (record,) = client.gcs.get_tasks(task_ids=[bytes.fromhex(task_id)]).tasks
    times: dict[str, float] = {}
    for event in record.events:
        times.update(event.state_times)
    return times


def test_an_actor_calls_record_has_its_run_its_place_and_its_end(ray: Any) -> None:
    actor = Worker.remote()
    pid = ray.get(actor.pid.remote())
    before = time.time()
    ref = actor.ping.remote()
    assert ray.get(ref) == "pong"
    task_id = ref.task_id().hex()
    row = _record(task_id, lambda r: r["state"] == "FINISHED")
    assert (row["type"], row["name"], row["worker_pid"]) == ("ACTOR_TASK", "Worker.ping", pid)
    assert row["node_id"] and row["worker_id"] and row["call_site"]
    times = _state_times(task_id)
    assert {"PENDING_ARGS_AVAIL", "RUNNING", "FINISHED"} <= set(times), times
    assert before <= times["PENDING_ARGS_AVAIL"] <= times["RUNNING"] <= times["FINISHED"]


def test_a_running_call_shows_running_and_a_failed_one_failed(ray: Any) -> None:
    actor = Worker.remote()
    pid = ray.get(actor.pid.remote())
    napping = actor.nap.remote(3.0)
    task_id = napping.task_id().hex()
    row = _record(task_id, lambda r: r["state"] == "RUNNING")
    assert row["worker_pid"] == pid and row["running_for_s"] is not None
    done = threading.Event()
    threading.Thread(target=lambda: (ray.get(napping), done.set()), daemon=True).start()
    assert _record(task_id, lambda r: r["state"] == "FINISHED")["worker_pid"] == pid
    failing = actor.fail.remote()
    with pytest.raises(ValueError):
        ray.get(failing)
    failed = _record(failing.task_id().hex(), lambda r: r["state"] == "FAILED")
    assert (failed["error_type"], failed["worker_pid"]) == ("ValueError", pid)
    assert "RUNNING" in _state_times(failing.task_id().hex())
    assert done.wait(WITHIN_S)
