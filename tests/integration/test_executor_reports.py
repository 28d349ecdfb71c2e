"""A worker killed right after it answered: the tasks it answered stay in the record as
they ended (core/worker/executor_reports.py). Its own task events, sent every 0.1 s,
die with it; the caller, which saw the answers, records what they said."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

import cloudpickle
import pytest

import tracedray

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.integration


def _kill_me_soon() -> int:
    """SIGKILL this process 10 ms from now (well within its flusher's 0.1 s)."""
    threading.Timer(0.01, os.kill, args=(os.getpid(), signal.SIGKILL)).start()
    return os.getpid()


@tracedray.remote
class Doomed:
    def ready(self) -> int:
        return os.getpid()

    def answer_then_die(self) -> int:
        return _kill_me_soon()


@tracedray.remote(max_retries=0)
def finish_then_die() -> int:
    return _kill_me_soon()


def _record(ref: Any) -> Any:
    worker = tracedray.api.calls.global_worker()
    worker.flush_background_work()
    (record,) = worker.gcs.get_tasks(task_ids=[bytes.fromhex(ref.task_id().hex())]).tasks
    return record


def _times(record: Any) -> dict[str, float]:
    return {state: at for event in record.events for state, at in
            (event.state_times.items() or [(event.state, event.time)])}


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)
    raise AssertionError(f"pid {pid} still alive")


def test_an_answered_call_and_a_finished_task_stay_finished_when_their_worker_is_killed(
        ray: Any) -> None:
    actor = Doomed.remote()  # type: ignore[attr-defined]
    ray.get(actor.ready.remote())
    call = actor.answer_then_die.remote()
    call_pid = ray.get(call)
    task = finish_then_die.remote()  # type: ignore[attr-defined]
    task_pid = ray.get(task)
    _wait_gone(call_pid)
    _wait_gone(task_pid)
    # Poll: a flush of the driver's own events may still be on its way.
    deadline = time.monotonic() + 20
    while True:
        records = {"call": _record(call), "task": _record(task)}
        times = {name: _times(record) for name, record in records.items()}
        if (all({"PENDING_ARGS_AVAIL", "RUNNING", "FINISHED"} <= set(t)
                for t in times.values()) and "SUBMITTED_TO_WORKER" in times["task"]) \
                or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for name, pid in (("call", call_pid), ("task", task_pid)):
        record, at = records[name], times[name]
        assert record.state == "FINISHED", (name, record)
        assert record.worker_pid == pid, (name, record)
        assert {"PENDING_ARGS_AVAIL", "RUNNING", "FINISHED"} <= set(at), (name, record)
        assert at["PENDING_ARGS_AVAIL"] <= at["RUNNING"] <= at["FINISHED"], at
    # The task's worker records its dispatch with its start (dispatch_record.py): its
    # caller's copy brings that back too.
    dispatched = times["task"]
    assert dispatched["PENDING_ARGS_AVAIL"] <= dispatched["SUBMITTED_TO_WORKER"] \
        <= dispatched["RUNNING"], dispatched
    assert records["call"].call_site and records["call"].trace_id  # its first state's fields
    stats = tracedray.api.calls.global_worker().executor_reports.statistics()
    assert stats.recorded_for_lost_total >= 2, stats
