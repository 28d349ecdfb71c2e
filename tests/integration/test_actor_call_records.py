"""An actor call's task record says when it ran, where, and how it ended; a call still
running shows RUNNING; a failed call FAILED; and a call that finished stays FINISHED
when its caller dies right after (the actor reports the states it saw itself: a caller
that was handed them could die before it told the GCS)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
from cli_support import isolated_root, run_json, start_head

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


CALLS_THEN_DIES = textwrap.dedent("""
    import os, signal
    import tracedray as ray

    ray.init(address="auto", namespace="records")

    @ray.remote
    class Pinger:
        def ping(self):
            return "pong"

    pinger = Pinger.options(name="pinger", lifetime="detached").remote()
    ref = pinger.ping.remote()
    assert ray.get(ref) == "pong"
    print(ref.task_id().hex(), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # before any flush of its own could run
""")


def test_a_finished_call_stays_finished_when_its_caller_is_killed_right_after(
        tmp_path: Path) -> None:
    with isolated_root(tmp_path):
        start_head()
        script = tmp_path / "calls_then_dies.py"
        script.write_text(CALLS_THEN_DIES)
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == -9, done.stderr[-2000:]
        task_id = done.stdout.split()[-1]
        deadline = time.monotonic() + WITHIN_S
        task: dict[str, Any] = {}
        while time.monotonic() < deadline:
            found = run_json("list", "tasks", "--filter", f"task_id={task_id}")
            task = dict(found[0]) if found else {}
            if task.get("state") in ("FINISHED", "FAILED"):
                break
            time.sleep(0.2)
        assert task.get("state") == "FINISHED", task
        time.sleep(2.0)  # the driver's death is known by now: no verdict overrides the end
        (task,) = run_json("list", "tasks", "--filter", f"task_id={task_id}")
        assert (task["state"], task["error_type"]) == ("FINISHED", ""), task
