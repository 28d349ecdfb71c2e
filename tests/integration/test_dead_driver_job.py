"""A driver that dies without finishing its job (SIGKILL) has its job failed and its
job's end run as for a finished one; a driver that ends cleanly has its job finished
(a real cluster started with the CLI, drivers in their own processes).

Killed: the raylet it registered with sees its process gone and tells the GCS, which
marks the job FAILED (with the evidence), withdraws the creation of its actor still
waiting for a CPU (no worker is ever started for it), kills its non-detached actor, and
leaves its detached actor alone: the next driver still calls it.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from cli_support import PINGS_KEPT, isolated_root, run, run_json, start_head, workers_by_pid
from multinode_support import log_events, spans_named, wait_for

pytestmark = pytest.mark.integration

# Within this long of the driver's death its job has ended: the raylet looks about once
# a second, and the GCS ends the job at once (a slow, shared machine gets some slack).
ENDED_WITHIN_S = 10.0
UNFINISHED = ("PENDING_ARGS_AVAIL", "PENDING_NODE_ASSIGNMENT", "SUBMITTED_TO_WORKER",
              "RUNNING", "INFEASIBLE")

# Two actors take both CPUs, a non-detached one and a detached one; a third waits for a
# CPU, and a call to it with it. Then `ending` ends the script (on a line from stdin).
LEAVES_ACTORS = textwrap.dedent("""
    import os, sys
    import tracedray as ray

    ray.init(address="auto", namespace="dead-driver")

    @ray.remote(num_cpus=1)
    class Holder:
        def pid(self):
            return os.getpid()
        def ping(self):
            return "pong"

    owned = Holder.remote()
    kept = Holder.options(name="kept", lifetime="detached").remote()
    owned_pid, kept_pid = ray.get([owned.pid.remote(), kept.pid.remote()], timeout=60)
    waiting = Holder.remote()  # no CPU left: its creation waits in the raylet
    call = waiting.ping.remote()
    print("READY", owned._actor_id.hex(), owned_pid, kept._actor_id.hex(), kept_pid,
          waiting._actor_id.hex(), call.task_id().hex(), flush=True)
    sys.stdin.readline()
    {ending}
""")

class Leaver:
    """LEAVES_ACTORS, running until its actors are settled and the third one waits."""

    def __init__(self, folder: Path, ending: str) -> None:
        script = folder / "leaver.py"
        script.write_text(LEAVES_ACTORS.format(ending=ending))
        self.process = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line.startswith("READY"), f"{line!r}, exit {self.process.poll()}"
        fields = line.split()[1:]
        self.owned, self.kept, self.waiting = fields[0], fields[2], fields[4]
        self.call = fields[5]
        self.owned_pid, self.kept_pid = int(fields[1]), int(fields[3])
        wait_for(lambda: _node()["pending"] == 1, 30,
                 "the third actor's creation to wait in the raylet for a CPU")
        # The driver reports its tasks every 0.1 s: a kill before loses the call's.
        wait_for(lambda: run_json("list", "tasks", "--filter", f"task_id={self.call}"), 30,
                 "the call to the third actor to reach the task table")

    def end(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.flush()
        assert self.process.wait(timeout=60) == 0

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def close(self) -> None:
        if self.process.poll() is None:
            self.kill()


def _node() -> dict[str, Any]:
    (node,) = run_json("status")["nodes"]
    return dict(node)


def _job_of(pid: int) -> dict[str, Any]:
    (job,) = [j for j in run_json("list", "jobs") if j["driver_pid"] == pid]
    return dict(job)


def _ended_job(pid: int) -> dict[str, Any] | None:
    job = _job_of(pid)
    return job if job["state"] != "RUNNING" else None


def _actors() -> dict[str, dict[str, Any]]:
    return {a["actor_id"]: a for a in run_json("list", "actors")}


def _check_actor_tasks(leaver: Leaver, job_id: str, error_type: str,
                       call_error_types: tuple[str, ...]) -> None:
    """The job's actor tasks ended too: the waiting actor's creation and the call to it
    failed (the call as the job ended, or as the driver saw its actor die:
    ``call_error_types``); the detached actor's creation stays as it ended."""
    tasks = wait_for(lambda: _ended_tasks(job_id), ENDED_WITHIN_S, "every task of the job to end")
    by_actor = {(t["actor_id"], t["type"]): t for t in tasks}
    call = run_json("get", "task", leaver.call)
    assert (call["type"], call["state"]) == ("ACTOR_TASK", "FAILED"), call
    assert call["error_type"] in call_error_types, call
    creation = by_actor[(leaver.waiting, "ACTOR_CREATION_TASK")]
    assert (creation["state"], creation["error_type"]) == ("FAILED", error_type), creation
    assert by_actor[(leaver.kept, "ACTOR_CREATION_TASK")]["state"] == "FINISHED"


def _ended_tasks(job_id: str) -> list[dict[str, Any]] | None:
    """The job's tasks once every one has ended; None before."""
    tasks = run_json("list", "tasks", "--limit", "0", "--filter", f"job_id={job_id}")
    return tasks if tasks and all(t["state"] not in UNFINISHED for t in tasks) else None


def test_a_killed_drivers_job_fails_and_takes_its_non_detached_actors(tmp_path: Path) -> None:
    with isolated_root(tmp_path):
        start_head()  # 2 CPUs
        (session,) = tmp_path.glob("session_2*")
        leaver = Leaver(tmp_path, ending="ray.shutdown()")
        try:
            pid = leaver.process.pid
            # Alive all along (the raylet has looked a few times by now): nothing ended.
            assert _job_of(pid)["state"] == "RUNNING"
            assert [r for r in log_events(session, "driver.exit") if r["driver_pid"] == pid] == []
            killed_at = time.time()
            leaver.kill()

            # RUNNING for ever before, its actors alive and the waiting one created.
            job = wait_for(lambda: _ended_job(pid), ENDED_WITHIN_S,
                           "the killed driver's job to end")
        finally:
            leaver.close()
        assert job["state"] == "FAILED", job
        # The raylet may look in the moment between the SIGKILL and kill()'s reaping.
        died = (f"process {pid} is gone", f"process {pid} exited (a zombie, not yet reaped)")
        assert job["end_reason"].startswith(tuple(f"its driver died: {why}" for why in died)), job
        assert job["end_time"] >= killed_at - 1, (job, killed_at)
        actors = _actors()
        assert actors[leaver.owned]["state"] == "DEAD", actors[leaver.owned]
        assert "failed, its driver died" in actors[leaver.owned]["death_cause"]
        assert actors[leaver.waiting]["state"] == "DEAD", actors[leaver.waiting]
        assert actors[leaver.kept]["state"] == "ALIVE", actors[leaver.kept]
        _check_actor_tasks(leaver, job["job_id"], "OWNER_DIED", ("OWNER_DIED",))
        # The non-detached actor's worker is gone; the waiting creation was withdrawn
        # before that freed a CPU, so no worker was ever started for it.
        wait_for(lambda: workers_by_pid()[leaver.owned_pid]["state"] == "DEAD", ENDED_WITHIN_S,
                 "the non-detached actor's worker to exit")
        assert [w for w in workers_by_pid().values() if w["actor_id"] == leaver.waiting] == []
        (withdrawn,) = [r for r in log_events(session, "actor.creation_withdrawn")
                        if r["actor_id"] == leaver.waiting]
        assert withdrawn["requests_withdrawn"] == 1 and withdrawn["killed_worker_pids"] == []
        node = _node()
        assert node["pending"] == 0 and node["resources_available"]["CPU"] == 1, node

        # Who saw it, and the job's end as the GCS records every end.
        (seen,) = [r for r in log_events(session, "driver.exit") if r["driver_pid"] == pid]
        assert seen["level"] == "warning" and seen["job_ended"] and seen["job_state"] == "FAILED"
        assert seen["why"] in died, seen
        (span,) = [s for s in spans_named(session, "job.finish")
                   if s["tracedray.job.id"] == job["job_id"]]
        assert span["tracedray.job.state"] == "FAILED"
        assert span["tracedray.job.end_reason"] == job["end_reason"]

        # The detached actor outlived its job.
        script = tmp_path / "pings.py"
        script.write_text(PINGS_KEPT)
        pings = subprocess.run([sys.executable, str(script), "dead-driver"], capture_output=True,
                               text=True, timeout=60)
        assert pings.returncode == 0 and "PING pong" in pings.stdout, pings.stderr[-3000:]
        assert workers_by_pid()[leaver.kept_pid]["state"] == "ACTOR"


@pytest.mark.parametrize("ending", ["ray.shutdown()", "pass  # the exit hook's shutdown"])
def test_a_driver_that_ends_cleanly_finishes_its_job(tmp_path: Path, ending: str) -> None:
    with isolated_root(tmp_path):
        start_head()  # 2 CPUs
        (session,) = tmp_path.glob("session_2*")
        leaver = Leaver(tmp_path, ending=ending)
        try:
            leaver.end()
        finally:
            leaver.close()
        pid = leaver.process.pid
        # The raylet saw the process go after the job had ended, and changed nothing.
        (seen,) = wait_for(lambda: [r for r in log_events(session, "driver.exit")
                                    if r["driver_pid"] == pid], ENDED_WITHIN_S,
                           "the raylet to see the driver exit")
        assert seen["level"] == "info" and not seen["job_ended"], seen
        assert seen["job_state"] == "FINISHED", seen
        job = _job_of(pid)
        assert job["state"] == "FINISHED", job
        assert job["end_reason"] == "its driver finished it (shutdown() or exit)", job
        actors = _actors()
        assert "finished (the actor is not detached)" in actors[leaver.owned]["death_cause"]
        assert actors[leaver.waiting]["state"] == "DEAD" and actors[leaver.kept]["state"] == "ALIVE"
        # The driver, finishing, may fail the call itself first (without an error type).
        _check_actor_tasks(leaver, job["job_id"], "JOB_ENDED", ("JOB_ENDED", ""))


# Tasks left behind: one that finished, then SLOW_TASKS that cannot end before the driver
# does (two run, the rest wait for a CPU). `ending` ends the script (on a line from stdin).
LEAVES_TASKS = textwrap.dedent("""
    import sys, time
    import tracedray as ray

    ray.init(address="auto")

    @ray.remote
    def quick():
        return 1

    @ray.remote
    def slow(i):
        time.sleep(120)
        return i

    done = quick.remote()
    ray.get(done, timeout=60)
    refs = [slow.remote(i) for i in range({count})]
    print("READY", done.task_id().hex(), flush=True)
    sys.stdin.readline()
    {ending}
""")
SLOW_TASKS = 1000


def _summary(name: str) -> dict[str, Any]:
    rows = [r for r in run_json("summary", "tasks") if r["func_or_class_name"].endswith(name)]
    return dict(rows[0]) if rows else {}


def _leave_tasks(folder: Path, ending: str) -> tuple[subprocess.Popen[str], str]:
    """Start LEAVES_TASKS; return it and its finished task's id once every task it
    submitted is in the task table and two of them run."""
    script = folder / "leaves_tasks.py"
    script.write_text(LEAVES_TASKS.format(count=SLOW_TASKS, ending=ending))
    process = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("READY"), f"{line!r}, exit {process.poll()}"
    wait_for(lambda: _summary("slow").get("total") == SLOW_TASKS
             and _summary("slow")["state_counts"].get("RUNNING") == 2, 60,
             "every task in the task table, two of them running")
    return process, line.split()[1]


def _agree(task_id: str) -> dict[str, Any]:
    """`get task` and `trace` tell the same end, with the same attempts; returns get's."""
    task = run_json("get", "task", task_id)
    story = json.loads(run("trace", task_id, "--format", "json").stdout)
    assert story["final_state"] == task["state"], (story, task)
    assert [a["attempt"] for a in story["attempts"]] == list(range(task["attempt_number"] + 1))
    return dict(task)


def _check_every_task_ended(job_id: str, finished_id: str, error_type: str,
                            reason_start: str) -> None:
    tasks = run_json("list", "tasks", "--limit", "0", "--detail", "--filter", f"job_id={job_id}")
    assert len(tasks) == SLOW_TASKS + 1
    assert [t for t in tasks if t["state"] in UNFINISHED] == []
    slow = _summary("slow")
    assert slow["state_counts"] == {"FAILED": SLOW_TASKS}, slow
    assert slow["error_type_counts"] == {error_type: SLOW_TASKS}, slow
    assert _summary("quick")["state_counts"] == {"FINISHED": 1}

    finished = _agree(finished_id)
    assert (finished["state"], finished["error_type"]) == ("FINISHED", "")
    ran, waited = [], []
    for task in tasks:
        if task["name"].endswith("slow"):
            states = {e["state"] for e in task["events"]}
            (ran if "RUNNING" in states else waited).append(task)
    assert len(ran) == 2 and waited, [t["state"] for t in tasks]
    for task in (ran[0], waited[0]):
        got = _agree(task["task_id"])
        assert (got["state"], got["error_type"]) == ("FAILED", error_type), got
        assert got["error_message"].startswith(reason_start), got
        assert got["events"][-1]["state"] == "FAILED"
        assert got["events"][-1]["error_type"] == error_type


def test_a_killed_drivers_queued_and_running_tasks_fail_as_their_owner_died(
        tmp_path: Path) -> None:
    with isolated_root(tmp_path):
        start_head()  # 2 CPUs
        (session,) = tmp_path.glob("session_2*")
        process, finished_id = _leave_tasks(tmp_path, ending="")
        try:
            pid = process.pid
            job_id = _job_of(pid)["job_id"]
            process.send_signal(signal.SIGKILL)
            process.wait()
            wait_for(lambda: _summary("slow")["state_counts"] == {"FAILED": SLOW_TASKS},
                     ENDED_WITHIN_S + 20, "every task of the killed driver to end")
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        _check_every_task_ended(job_id, finished_id, "OWNER_DIED",
                                f"owner died: job {job_id} failed, its driver died: ")
        # A line per task, and one for the job, as each verdict was recorded.
        logged = [r for r in log_events(session, "task.job_end") if r["job_id"] == job_id]
        assert len(logged) == SLOW_TASKS
        (summary,) = [r for r in log_events(session, "job.tasks_failed")
                      if r["job_id"] == job_id]
        assert summary["tasks"] == SLOW_TASKS and summary["error_type"] == "OWNER_DIED"


def test_a_driver_that_exits_with_tasks_unfinished_fails_them_as_its_job_ended(
        tmp_path: Path) -> None:
    with isolated_root(tmp_path):
        start_head()  # 2 CPUs
        process, finished_id = _leave_tasks(tmp_path, ending="pass  # the exit hook's shutdown")
        try:
            job_id = _job_of(process.pid)["job_id"]
            assert process.stdin is not None
            process.stdin.write("\n")
            process.stdin.flush()
            assert process.wait(timeout=60) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        wait_for(lambda: _summary("slow")["state_counts"] == {"FAILED": SLOW_TASKS},
                 ENDED_WITHIN_S, "every task of the finished job to end")
        _check_every_task_ended(job_id, finished_id, "JOB_ENDED",
                                f"job ended: job {job_id} finished, its driver finished it")


DIES_AS_ITS_TASK_STARTS = textwrap.dedent("""\
    import os, signal, sys, time
    import tracedray as ray

    ray.init(address="auto")

    @ray.remote
    def started(path):
        open(path, "w").close()
        time.sleep(120)

    ref = started.remote(sys.argv[1])
    while not os.path.exists(sys.argv[1]):
        time.sleep(0.001)
    print(ref.task_id().hex(), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # well within its 0.1 s flush of task events
""")


def test_a_task_dispatched_just_before_its_driver_was_killed_shows_where_it_went(
        tmp_path: Path) -> None:
    # The worker records the dispatch (dispatch_record.py), so a driver killed before its
    # own flush takes neither the task's SUBMITTED_TO_WORKER nor its first state with it.
    with isolated_root(tmp_path):
        start_head()
        script = tmp_path / "dies.py"
        script.write_text(DIES_AS_ITS_TASK_STARTS)
        process = subprocess.run([sys.executable, str(script), str(tmp_path / "started")],
                                 capture_output=True, text=True, timeout=120)
        assert process.returncode == -signal.SIGKILL, process.stderr
        task_id = process.stdout.strip()

        def ended() -> dict[str, Any] | None:
            # Unknown until the worker's first flush: the driver's own never happened.
            found = run_json("list", "tasks", "--detail", "--filter", f"task_id={task_id}")
            return found[0] if found and found[0]["state"] not in UNFINISHED else None

        task = wait_for(ended, ENDED_WITHIN_S + 20, "the task to end")
        assert (task["state"], task["error_type"]) == ("FAILED", "OWNER_DIED"), task
        at = {e["state"]: e for e in task["events"]}
        # Its first state too: flushed by the driver before the dispatch, or, if the
        # task went out at once, recorded by the worker with the rest.
        assert {"PENDING_ARGS_AVAIL", "SUBMITTED_TO_WORKER", "RUNNING"} <= set(at), \
            task["events"]
        dispatched = at["SUBMITTED_TO_WORKER"]
        assert dispatched["worker_pid"] == at["RUNNING"]["worker_pid"] > 0, task["events"]
        assert dispatched["time"] <= at["RUNNING"]["time"], task["events"]
