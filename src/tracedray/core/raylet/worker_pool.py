"""The raylet's worker processes: spawn, signal, and describe each exit.

The raylet is the parent of every worker, so it is the one that sees each exit
code and signal; it records them (span + log) even when the worker could not. For a
SIGKILL it also tells whether the OOM killer sent it, and for which limit, from the
kernel's OOM kill counts read at the worker's start and at its death
(memory_evidence.py, exit_meaning.explain_sigkill).

The pool holds process facts only; which worker is idle, leased or stopping is the lease
book's (``leasing.py``), and only the pool's own methods change its records.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tracedray.core.address import Address
from tracedray.core.raylet import memory_evidence
from tracedray.core.raylet.exit_meaning import MemoryEvidence, describe_exit, explain_sigkill
from tracedray.core.raylet.worker_states import STOP_IDLE, STOP_KILLED, STOP_SHUTDOWN
from tracedray.exceptions import RaySystemError

# A reaped worker that ignores SIGTERM this long is killed (as at shutdown).
STOP_GRACE_S = 2.0


@dataclass
class WorkerProcess:
    worker_id: str
    process: subprocess.Popen[bytes]
    port: int = 0
    task_port: int = 0  # where callers open task streams to it
    started_at: float = field(default_factory=time.time)
    started_monotonic: float = field(default_factory=time.monotonic)
    ended_at: float = 0.0
    exit_code: int = 0
    exit_signal: str = ""
    exit_meaning: str = ""
    kill_intended: bool = False
    stop_reason: str = ""
    # Memory facts for its exit: the kernel's OOM kill counts when it started, what was
    # read when it died, and why a SIGKILL came (exit_meaning's KillVerdict.cause).
    memory_at_start: memory_evidence.MemoryCounts | None = None
    memory: MemoryEvidence | None = None
    exit_cause: str = ""
    # The node's memory use at its exit, kept only where that memory is (or may be)
    # what killed it.
    node_memory_percent: float | None = None
    # The task (hex, "": none) and attempt its flight recorder named at its exit.
    running_task_id: str = ""
    running_attempt: int = 0

    @property
    def pid(self) -> int:
        return self.process.pid


@dataclass(frozen=True)
class WorkerPoolStatistics:
    starting: int
    idle: int
    leased: int
    blocked: int
    actors: int
    stopping: int
    dead: int
    started_total: int
    reaped_total: int  # idle workers stopped beyond the soft limit


class WorkerPool:
    def __init__(self, *, node_id: str, ip: str, raylet_port: int, gcs_address: str,
                 session_dir: Path, object_path_prefix: str,
                 on_exit: Callable[[WorkerProcess], None]) -> None:
        self._node_id = node_id
        self._ip = ip
        self._raylet_port = raylet_port
        self._gcs_address = gcs_address
        self._session_dir = session_dir
        self._object_path_prefix = object_path_prefix
        self._on_exit = on_exit
        self.workers: dict[str, WorkerProcess] = {}
        self._started_total = 0
        self._reaped_total = 0
        self._oom_kills = memory_evidence.OomKillLedger()

    def start_worker(self, worker_id: str) -> WorkerProcess:
        """Spawn a worker process (never under the raylet's lock: it forks)."""
        command = [sys.executable, "-m", "tracedray.api.worker_main",
                   "--gcs", self._gcs_address, "--raylet", f"{self._ip}:{self._raylet_port}",
                   "--node-id", self._node_id, "--worker-id", worker_id,
                   "--session-dir", str(self._session_dir), "--ip", self._ip,
                   "--object-path-prefix", self._object_path_prefix,
                   "--parent-pid", str(os.getpid())]
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, close_fds=True,
                                   start_new_session=True)
        worker = WorkerProcess(worker_id, process, memory_at_start=_counts_for(process.pid))
        self.workers[worker_id] = worker
        self._started_total += 1
        threading.Thread(target=self._reap, args=(worker,), daemon=True,
                         name=f"tracedray-reap-{process.pid}").start()
        return worker

    def _reap(self, worker: WorkerProcess) -> None:
        returncode, peak_rss = memory_evidence.wait_with_peak_rss(worker.process)
        # Only the raylet sets a meaning before the exit: why it stopped the worker
        # (reaped as idle, lease reclaimed). It comes first, the exit's own follows.
        stopped_because = worker.exit_meaning
        worker.exit_code, worker.exit_signal, worker.exit_meaning = describe_exit(returncode)
        worker.memory = MemoryEvidence(peak_rss_bytes=peak_rss)
        if worker.exit_signal == "SIGKILL":
            worker.memory = self._oom_kills.evidence(worker.memory_at_start, peak_rss)
            verdict = explain_sigkill(worker.memory)
            worker.exit_cause, worker.exit_meaning = verdict.cause, verdict.meaning
            worker.node_memory_percent = verdict.node_memory_percent
        if stopped_because:
            worker.exit_meaning = f"{stopped_because}; {worker.exit_meaning}"
        worker.ended_at = time.time()
        # on_exit has the lease book mark the worker DEAD under the raylet's lock, together
        # with releasing its lease's resources: a change outside that lock could race a
        # ReturnWorker and leak the lease's CPUs.
        self._on_exit(worker)

    def address_of(self, worker: WorkerProcess) -> Address:
        return Address(self._node_id, self._ip, worker.port, worker.worker_id, worker.pid,
                       worker.task_port)

    def registered(self, worker_id: str, port: int, task_port: int) -> WorkerProcess:
        worker = self.workers.get(worker_id)
        if worker is None:
            raise RaySystemError(f"unknown worker {worker_id}")
        worker.port, worker.task_port = port, task_port
        return worker

    def kill(self, worker_id: str, force: bool, *, reason: str = "", meaning: str = "") -> None:
        """Stop a worker on purpose. ``reason`` (its exit's stop reason) and ``meaning``
        (what its exit meant) are set before the signal, so that the exit handler, which
        may run at once, records why the raylet killed it."""
        worker = self.workers.get(worker_id)
        if worker is None:
            return
        if reason:
            worker.stop_reason = reason
        if meaning:
            worker.exit_meaning = meaning
        if worker.process.poll() is not None:
            return
        worker.kill_intended = True
        worker.stop_reason = worker.stop_reason or STOP_KILLED
        if force:
            worker.process.kill()
        else:
            worker.process.terminate()

    def stop_idle(self, worker_id: str, meaning: str) -> None:
        """Stop a worker the lease book marked STOPPING as the node's shutdown does
        (SIGTERM: it ends its log with process.exit and flushes its spans), then SIGKILL
        if it ignores that. Its exit is recorded as intended, with ``meaning`` saying why."""
        worker = self.workers[worker_id]
        worker.kill_intended = True
        worker.stop_reason = STOP_IDLE
        worker.exit_meaning = meaning  # the exit's own meaning is appended by _reap
        self._reaped_total += 1
        with contextlib.suppress(ProcessLookupError):
            worker.process.terminate()
        timer = threading.Timer(STOP_GRACE_S, _kill_if_alive, args=(worker.process,))
        timer.daemon = True
        timer.start()

    def snapshot(self) -> list[WorkerProcess]:
        """Every worker started, in start order (a copy: workers are added outside the
        raylet's lock)."""
        return list(self.workers.values())

    def exited(self) -> list[WorkerProcess]:
        """The workers whose exit was recorded."""
        return [w for w in self.snapshot() if w.ended_at]

    def kill_all(self, timeout_s: float = STOP_GRACE_S) -> None:
        live = [w for w in self.snapshot() if w.process.poll() is None]
        for worker in live:
            worker.kill_intended = True
            worker.stop_reason = worker.stop_reason or STOP_SHUTDOWN
            with contextlib.suppress(ProcessLookupError):
                worker.process.terminate()
        deadline = time.monotonic() + timeout_s
        for worker in live:
            try:
                worker.process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()

    @property
    def started_total(self) -> int:
        return self._started_total

    @property
    def reaped_total(self) -> int:
        return self._reaped_total


def _counts_for(pid: int) -> memory_evidence.MemoryCounts | None:
    try:
        return memory_evidence.counts_for(pid)
    except (OSError, ValueError):  # an unusual /proc: the exit is described without them
        return None


def _kill_if_alive(process: subprocess.Popen[bytes]) -> None:
    # returncode, not poll(): poll() answers None while the reaper thread is in wait().
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
