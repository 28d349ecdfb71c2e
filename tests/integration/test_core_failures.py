"""Worker deaths, retries and cancellation through a real cluster.

Every test here kills or interrupts only the workers of its own tasks, so they
share one cluster; each waits on files or results, never on fixed sleeps.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import cloudpickle
import pytest
from multinode_support import wait_for

import tracedray
from tracedray import exceptions

cloudpickle.register_pickle_by_value(sys.modules[__name__])

pytestmark = pytest.mark.integration


def _attempt(log: str) -> int:
    """Append this attempt's pid to ``log``; returns the attempt number (1-based)."""
    with open(log, "a") as handle:
        handle.write(f"{os.getpid()}\n")
    return len(Path(log).read_text().split())


@tracedray.remote
def always_sigkill(log: str) -> None:
    _attempt(log)
    os.kill(os.getpid(), signal.SIGKILL)


@tracedray.remote(max_retries=1)
def wait_to_be_killed(log: str) -> str:
    if _attempt(log) == 1:
        time.sleep(120)  # the test SIGKILLs this process meanwhile
    return "second attempt"


@tracedray.remote(max_retries=0)
def exit_one() -> None:
    os._exit(1)


@tracedray.remote(max_retries=0)
def segfault() -> None:
    # A real fault in native code: the signal hits this thread at once. (os.kill of
    # SIGSEGV is process-directed and, being a core-dump signal, takes the whole
    # process down a little later: long enough for the task to return and answer.)
    import ctypes

    ctypes.string_at(0)


@tracedray.remote
def nested_crash() -> str:
    try:
        tracedray.get(exit_one.remote())
    except exceptions.WorkerCrashedError as exc:
        return f"caught: {exc.exit_code}"
    return "not raised"


@tracedray.remote
def needs_a_cpu() -> str:
    return "ran"


@tracedray.remote(num_cpus=2, max_retries=0)
def unbalanced_until_cancelled(log: str) -> None:
    """Leave this worker as a cancel's interrupt landing inside a get()'s
    blocked/unblocked bookkeeping would (told blocked, never unblocked), then wait to be
    cancelled."""
    from tracedray.api import runtime

    runtime.current().blocked().__enter__()  # the matching __exit__ never runs
    _attempt(log)
    while True:
        time.sleep(0.01)


@tracedray.remote(num_cpus=2, max_retries=0)
def lend_both_cpus() -> tuple[int, str]:
    """get() a task that needs a CPU: it can start only if this task lends out its CPUs
    while it waits. Returns this worker's pid and the outcome."""
    try:
        return os.getpid(), tracedray.get(needs_a_cpu.remote(), timeout=15)
    except exceptions.GetTimeoutError:
        return os.getpid(), "the nested task never started"


@tracedray.remote(max_retries=0)
def loop_until_cancelled(log: str) -> str:
    _attempt(log)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(0.01)
    return "finished"


@tracedray.remote(max_retries=0)
def swallow_exceptions_until_cancelled(log: str, seen: str) -> str:
    _attempt(log)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            try:  # noqa: SIM105 -- spelled out: it is what user code does
                time.sleep(0.01)
            except Exception:  # what many libraries do; a cancel must get through it
                pass
    except KeyboardInterrupt:  # as in Ray: the cancel arrives as one
        Path(seen).write_text("interrupted")
        raise
    return "finished"


@tracedray.remote
def quick(value: Any) -> Any:
    return value


def _wait_for_lines(path: Path, count: int, timeout: float = 60.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            pids = [int(p) for p in path.read_text().split()]
            if len(pids) >= count:
                return pids
        time.sleep(0.02)
    raise AssertionError(f"{path} did not reach {count} lines")


def test_sigkilled_task_retried_then_worker_crashed_error(shared_ray: Any,
                                                          tmp_path: Path) -> None:
    ray = shared_ray
    log = tmp_path / "attempts"
    with pytest.raises(exceptions.WorkerCrashedError) as info:
        ray.get(always_sigkill.remote(str(log)), timeout=120)
    # default max_retries is 3, as in Ray: 1 attempt + 3 retries
    assert len(log.read_text().split()) == 4
    error = info.value
    assert error.exit_code == 137 and error.signal_name == "SIGKILL"
    assert "OOM" in error.meaning
    assert "SIGKILL" in str(error) and "OOM" in str(error)


def test_sigkill_from_outside_mid_task_is_retried(shared_ray: Any, tmp_path: Path) -> None:
    ray = shared_ray
    log = tmp_path / "attempts"
    ref = wait_to_be_killed.remote(str(log))
    (pid,) = _wait_for_lines(log, 1)
    os.kill(pid, signal.SIGKILL)
    assert ray.get(ref, timeout=120) == "second attempt"
    assert len(log.read_text().split()) == 2


def test_exit_code_and_native_crash_are_explained(shared_ray: Any) -> None:
    ray = shared_ray
    with pytest.raises(exceptions.WorkerCrashedError) as exited:
        ray.get(exit_one.remote(), timeout=120)
    assert exited.value.exit_code == 1 and exited.value.signal_name is None
    assert "exit code 1" in str(exited.value)
    with pytest.raises(exceptions.WorkerCrashedError) as crashed:
        ray.get(segfault.remote(), timeout=120)
    assert crashed.value.signal_name == "SIGSEGV" and crashed.value.exit_code == 139
    assert "native code" in crashed.value.meaning


def test_crash_of_a_nested_task_reaches_its_caller(shared_ray: Any) -> None:
    assert shared_ray.get(nested_crash.remote(), timeout=120) == "caught: 1"


def test_cluster_keeps_working_after_crashes(shared_ray: Any) -> None:
    ray = shared_ray
    assert ray.get([quick.remote(i) for i in range(20)], timeout=60) == list(range(20))
    # every crashed worker's lease gave its CPU back (idle leases are returned after a linger)
    raylet = tracedray.api.calls.global_worker().raylet
    deadline = time.monotonic() + 30
    while raylet.node_stats().resources_available["CPU"] != 2.0:
        assert time.monotonic() < deadline, dict(raylet.node_stats().resources_available)
        time.sleep(0.05)


def test_cancel_queued_task(shared_ray: Any, tmp_path: Path) -> None:
    ray = shared_ray
    logs = [tmp_path / f"busy{i}" for i in range(2)]
    busy = [loop_until_cancelled.remote(str(log)) for log in logs]
    for log in logs:
        _wait_for_lines(log, 1)  # both CPUs are taken now
    queued_log = tmp_path / "queued"
    queued = loop_until_cancelled.remote(str(queued_log))
    ray.cancel(queued)
    with pytest.raises(exceptions.TaskCancelledError):
        ray.get(queued, timeout=30)
    assert not queued_log.exists()
    for ref in busy:
        ray.cancel(ref, force=True)
    for ref in busy:
        with pytest.raises(exceptions.TaskCancelledError):
            ray.get(ref, timeout=60)


def test_cancel_running_task(shared_ray: Any, tmp_path: Path) -> None:
    ray = shared_ray
    log = tmp_path / "running"
    ref = loop_until_cancelled.remote(str(log))
    (pid,) = _wait_for_lines(log, 1)
    ray.cancel(ref)
    with pytest.raises(exceptions.TaskCancelledError):
        ray.get(ref, timeout=30)
    # a cooperative cancel leaves the worker alive and usable
    os.kill(pid, 0)
    assert ray.get(quick.remote("after"), timeout=30) == "after"


def test_cancel_gets_through_a_task_that_catches_exception(shared_ray: Any,
                                                          tmp_path: Path) -> None:
    # The cancel is raised in the task as a KeyboardInterrupt (Ray's behaviour), not as
    # an Exception that the task's own ``except Exception`` (or a library's, or a
    # telemetry guard's) would swallow while the task runs on.
    ray = shared_ray
    log, seen = tmp_path / "swallowing", tmp_path / "seen"
    ref = swallow_exceptions_until_cancelled.remote(str(log), str(seen))
    (pid,) = _wait_for_lines(log, 1)
    ray.cancel(ref)
    try:
        with pytest.raises(exceptions.TaskCancelledError):
            ray.get(ref, timeout=30)
    except BaseException:
        ray.cancel(ref, force=True)  # free the CPU for the other tests
        raise
    assert seen.read_text() == "interrupted"
    # the worker lives on, and its next tasks run normally (no interrupt left pending)
    os.kill(pid, 0)
    assert ray.get([quick.remote(i) for i in range(20)], timeout=60) == list(range(20))


def test_a_cancel_inside_gets_bookkeeping_leaves_the_worker_able_to_lend_its_cpu(
        shared_ray: Any, tmp_path: Path) -> None:
    # The interrupt is asynchronous: it can land between a get()'s "blocked" and
    # "unblocked" notices. The task's end settles that; without it the worker's next
    # get() keeps its CPUs, and a nested task that needs one never starts.
    from tracedray.util import state

    ray = shared_ray
    log = tmp_path / "unbalanced"
    wait_for(lambda: not any(row["state"] == "STARTING" for row in state.list_workers()),
             30, "no worker starting")
    ref = unbalanced_until_cancelled.remote(str(log))
    (pid,) = _wait_for_lines(log, 1)
    ray.cancel(ref)
    with pytest.raises(exceptions.TaskCancelledError):
        ray.get(ref, timeout=30)
    # Once its lease is back (a lease is kept a moment for reuse, and a reused one would
    # hide the fault), a new lease goes to the most recently idle worker: this one, as
    # no other was starting.
    wait_for(lambda: any(row["pid"] == pid and row["state"] == "IDLE"
                         for row in state.list_workers()), 30, f"worker {pid} idle")
    probe_pid, outcome = ray.get(lend_both_cpus.remote(), timeout=60)
    assert probe_pid == pid, "no later task ran on the cancelled task's worker"
    assert outcome == "ran"


def test_force_cancel_kills_the_worker(shared_ray: Any, tmp_path: Path) -> None:
    ray = shared_ray
    log = tmp_path / "forced"
    ref = loop_until_cancelled.remote(str(log))
    (pid,) = _wait_for_lines(log, 1)
    ray.cancel(ref, force=True)
    with pytest.raises(exceptions.TaskCancelledError):
        ray.get(ref, timeout=30)
    deadline = time.monotonic() + 30
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(pid)
    assert len(log.read_text().split()) == 1  # not retried
    with pytest.raises(TypeError):
        ray.cancel("not a ref")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return "Z"


def test_cancel_finished_task_is_harmless(shared_ray: Any) -> None:
    ray = shared_ray
    ref = quick.remote(5)
    assert ray.get(ref) == 5
    ray.cancel(ref)
    assert ray.get(ref) == 5
