"""The raylet's worker processes: start, register, lease, reap.

The raylet is the parent of every worker, so it is the one that sees each exit
code and signal; it records them (span + log) even when the worker could not. For a
SIGKILL it also tells whether the OOM killer sent it, and for which limit, from the
kernel's OOM kill counts read at the worker's start and at its death
(memory_evidence.py, exit_meaning.explain_sigkill).

Idle workers beyond a soft limit (the node's CPU count) are stopped once they have
been idle long enough: a task blocked in ``get`` lends its CPU out, so a burst of
nested work can start many more workers than CPUs, and without this they would sit
idle, holding memory, until the node stops. ``workers_to_reap`` decides which.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from tracedray.core import ids
from tracedray.core.address import Address
from tracedray.core.raylet import memory_evidence
from tracedray.core.raylet.exit_meaning import (
    MemoryEvidence,
    describe_exit,
    explain_sigkill,
    new_oom_kills,
)
from tracedray.exceptions import RaySystemError
from tracedray.telemetry import attributes as A

STARTING, IDLE, LEASED, BLOCKED, ACTOR, DEAD = (
    "STARTING", "IDLE", "LEASED", "BLOCKED", "ACTOR", "DEAD")
# Chosen for reaping and sent SIGTERM: never leased again, DEAD once the process is gone.
STOPPING = "STOPPING"
# Why the raylet meant a worker to exit (``WorkerProcess.stop_reason``; "" = it did not).
# A reclaimed lease's reason goes on to name the lessee that died; an abandoned one's,
# the lessee that shut down while the worker still ran its tasks; a dead actor's, why
# the GCS declared the actor dead while its creation was under way; an unused actor
# worker's, why the GCS does not use it (a restarted GCS did not know it, or the GCS that
# asked for it went away before the grant).
STOP_IDLE, STOP_SHUTDOWN, STOP_KILLED = "idle", "shutdown", "killed"
STOP_LESSEE_DIED = "lessee died"
STOP_LESSEE_LEFT = "lessee left its tasks running"
STOP_ACTOR_DEAD = "actor dead"
STOP_ACTOR_UNUSED = "actor worker unused"
STOP_NOT_REGISTERED = "did not register"
# Actor workers stopped because the GCS does not want them: it is not told of their exit
# (it knows; and a restarted GCS creating the actor again would count it as a failure).
STOPS_FOR_THE_GCS = (STOP_ACTOR_DEAD, STOP_ACTOR_UNUSED)
# A reaped worker that ignores SIGTERM this long is killed (as at shutdown).
STOP_GRACE_S = 2.0


@dataclass
class WorkerProcess:
    worker_id: str
    process: subprocess.Popen[bytes]
    state: str = STARTING
    port: int = 0
    task_port: int = 0  # where callers open task streams to it
    lease_id: str = ""
    # Who holds its task lease (the lessee); None when idle, and for an actor's lease,
    # whose lifetime the GCS decides.
    lessee: Address | None = None
    resources: dict[str, float] = field(default_factory=dict)
    actor_id: bytes = b""
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
    idle_since: float = 0.0  # time.monotonic() when it last became IDLE
    registered: threading.Event = field(default_factory=threading.Event)

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


@dataclass(frozen=True)
class IdleWorker:
    """What the reaping decision needs to know about one IDLE task worker."""

    worker_id: str
    idle_since: float  # same clock as ``now`` in workers_to_reap
    # It still holds something other processes need (objects it owns or borrows,
    # tasks it submitted): stopping it would lose them. Unknown counts as busy.
    busy: bool = False


def not_registered_in_time(workers: Iterable[WorkerProcess], now: float,
                           timeout_s: float) -> list[WorkerProcess]:
    """The workers still STARTING ``timeout_s`` after they were started (``now`` on the
    monotonic clock), not already being killed (pure)."""
    return [w for w in workers if w.state == STARTING and not w.kill_intended
            and now - w.started_monotonic >= timeout_s]


def workers_to_reap(idle: Sequence[IdleWorker], live_workers: int, soft_limit: int,
                    now: float, threshold_s: float) -> list[str]:
    """Ids of the idle workers to stop now, oldest-idle first.

    ``live_workers`` counts the node's task workers that are alive and not already
    stopping (starting, idle, leased, blocked; actor workers are not in the pool's
    budget). Only as many as it exceeds ``soft_limit`` by are stopped, and only
    workers idle for at least ``threshold_s`` that are not busy, as Ray's
    ``idle_worker_killing_time_threshold_ms``: a short pause between two bursts
    keeps its warm workers.
    """
    excess = live_workers - soft_limit
    if excess <= 0:
        return []
    ready = sorted((w for w in idle_longer_than(idle, now, threshold_s) if not w.busy),
                   key=lambda w: (w.idle_since, w.worker_id))
    return [w.worker_id for w in ready[:excess]]


def with_answers(idle: Sequence[IdleWorker],
                 answers: Mapping[IdleWorker, list[str] | None]) -> list[IdleWorker]:
    """``idle`` (as it is now) with ``busy`` set from what the workers answered when
    asked what they still hold (``answers``, keyed by the worker as it was then). Free
    means: asked during its current idle spell (same ``idle_since``: not leased since)
    and answered "nothing". Not asked, not answering or holding something: busy."""
    free = {(w.worker_id, w.idle_since) for w, reasons in answers.items() if reasons == []}
    return [IdleWorker(w.worker_id, w.idle_since, busy=(w.worker_id, w.idle_since) not in free)
            for w in idle]


def idle_longer_than(idle: Sequence[IdleWorker], now: float,
                     threshold_s: float) -> list[IdleWorker]:
    return [w for w in idle if now - w.idle_since >= threshold_s]


def unused_actor_workers(workers: Iterable[WorkerProcess],
                         in_use: Collection[str]) -> list[WorkerProcess]:
    """The live workers granted to an actor that the GCS does not use (``in_use``: the
    ids of its ALIVE actors' workers), leaving those being killed already."""
    return [w for w in workers if w.state == ACTOR and w.actor_id and not w.kill_intended
            and w.worker_id not in in_use]


def exit_concerns_the_gcs(worker: WorkerProcess) -> bool:
    """Whether the GCS is told of this worker's exit: an actor's worker, unless it was
    stopped because the GCS does not want it."""
    return bool(worker.actor_id) and not worker.stop_reason.startswith(STOPS_FOR_THE_GCS)


def soft_limit(cpus: float, configured: int | None) -> int:
    """How many task workers a node keeps alive when idle: the configured number, or
    its CPU count; at least 1 (a node with no CPUs still runs zero-CPU tasks)."""
    if configured is not None:
        return max(1, configured)
    return max(1, int(cpus))


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
        # OOM kills already blamed for a worker's death, per cgroup directory ("" = the
        # node): workers sharing a cgroup must not each take the same kill.
        self._oom_kills_counted: dict[str, int] = {}
        self._oom_lock = threading.Lock()

    def start_worker(self) -> WorkerProcess:
        worker_id = ids.new_worker_id()
        command = [sys.executable, "-m", "tracedray.core.worker.main",
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
            worker.memory = self._memory_evidence(worker, peak_rss)
            verdict = explain_sigkill(worker.memory)
            worker.exit_cause, worker.exit_meaning = verdict.cause, verdict.meaning
            worker.node_memory_percent = verdict.node_memory_percent
        if stopped_because:
            worker.exit_meaning = f"{stopped_because}; {worker.exit_meaning}"
        worker.ended_at = time.time()
        worker.registered.set()  # wake anyone waiting for a registration that will never come
        # on_exit marks the worker DEAD under the raylet's lock, together with releasing
        # its lease's resources: a state change outside that lock could race a
        # ReturnWorker and leak the lease's CPUs.
        self._on_exit(worker)

    def _memory_evidence(self, worker: WorkerProcess, peak_rss: int | None) -> MemoryEvidence:
        try:
            node_percent: float | None = psutil.virtual_memory().percent
        except (OSError, RuntimeError):
            node_percent = None
        before = worker.memory_at_start
        if before is None:
            return MemoryEvidence(peak_rss_bytes=peak_rss, node_memory_percent=node_percent)
        try:
            after = memory_evidence.counts_again(before)
            limit = memory_evidence.memory_limit(before.cgroup)
        except (OSError, ValueError):
            return MemoryEvidence(peak_rss_bytes=peak_rss, node_memory_percent=node_percent)
        cgroup = before.cgroup
        with self._oom_lock:
            counted = self._oom_kills_counted
            in_cgroup = node = None
            if cgroup is not None:
                key = str(cgroup.directory)
                in_cgroup, counted[key] = new_oom_kills(
                    before.cgroup_oom_kills, after.cgroup_oom_kills, counted.get(key))
            node, counted[""] = new_oom_kills(before.node_oom_kills, after.node_oom_kills,
                                              counted.get(""))
        return MemoryEvidence(cgroup.name if cgroup is not None else "", in_cgroup, limit, node,
                              peak_rss, node_percent)

    def address_of(self, worker: WorkerProcess) -> Address:
        return Address(self._node_id, self._ip, worker.port, worker.worker_id, worker.pid,
                       worker.task_port)

    # Callers hold the raylet's lock for everything below that reads or changes
    # states: a lease is granted under it, so a worker cannot be both leased and reaped.
    def mark_idle(self, worker: WorkerProcess) -> None:
        worker.state = IDLE
        worker.idle_since = time.monotonic()

    def idle_worker(self) -> WorkerProcess | None:
        """The most recently idle worker: reusing it keeps a warm one busy and lets the
        others age towards reaping."""
        idle = [w for w in self.workers.values() if w.state == IDLE]
        return max(idle, key=lambda w: w.idle_since) if idle else None

    def idle_task_workers(self) -> list[IdleWorker]:
        return [IdleWorker(w.worker_id, w.idle_since) for w in self.workers.values()
                if w.state == IDLE and not w.actor_id]

    def live_task_workers(self) -> int:
        return sum(1 for w in self.workers.values()
                   if w.state in (STARTING, IDLE, LEASED, BLOCKED) and not w.actor_id)

    def stop_idle(self, worker: WorkerProcess, meaning: str) -> None:
        """Stop an IDLE worker as the node's shutdown does (SIGTERM: it ends its log
        with process.exit and flushes its spans), then SIGKILL if it ignores that.
        Its exit is recorded as intended, with ``meaning`` saying why."""
        if worker.state != IDLE:  # the caller's lock makes this impossible: a bug if seen
            raise RaySystemError(f"worker {worker.worker_id} is {worker.state}, not IDLE: "
                                 "only idle workers are reaped")
        worker.state = STOPPING
        worker.kill_intended = True
        worker.stop_reason = STOP_IDLE
        worker.exit_meaning = meaning  # the exit's own meaning is appended by _reap
        self._reaped_total += 1
        with contextlib.suppress(ProcessLookupError):
            worker.process.terminate()
        timer = threading.Timer(STOP_GRACE_S, _kill_if_alive, args=(worker.process,))
        timer.daemon = True
        timer.start()

    def count(self, state: str) -> int:
        return sum(1 for w in self.workers.values() if w.state == state)

    def kill_all(self, timeout_s: float = STOP_GRACE_S) -> None:
        live = [w for w in self.workers.values() if w.process.poll() is None]
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

    def statistics(self) -> WorkerPoolStatistics:
        return WorkerPoolStatistics(self.count(STARTING), self.count(IDLE), self.count(LEASED),
                                    self.count(BLOCKED), self.count(ACTOR),
                                    self.count(STOPPING), self.count(DEAD),
                                    self._started_total, self._reaped_total)


def exit_memory_attributes(worker: WorkerProcess) -> dict[str, Any]:
    """The memory facts of a worker's exit, as worker.exit span attributes."""
    return {_ATTRIBUTE_OF[name]: value for name, value in exit_memory_fields(worker).items()}


def exit_memory_fields(worker: WorkerProcess) -> dict[str, Any]:
    """The memory facts of a worker's exit that are known, as log fields."""
    memory = worker.memory or MemoryEvidence()
    found: dict[str, Any] = {"cause": worker.exit_cause, "cgroup": memory.cgroup,
                             "memory_limit": memory.limit_bytes,
                             "peak_rss": memory.peak_rss_bytes,
                             "node_memory_percent": worker.node_memory_percent}
    return {name: value for name, value in found.items() if value not in (None, "")}


_ATTRIBUTE_OF = {"cause": A.EXIT_CAUSE, "cgroup": A.EXIT_CGROUP,
                 "memory_limit": A.EXIT_MEMORY_LIMIT, "peak_rss": A.EXIT_PEAK_RSS,
                 "node_memory_percent": A.NODE_MEMORY_PERCENT}


def attempt_start_attributes(slot: Mapping[str, Any]) -> dict[str, Any]:
    """When the attempt in a dead worker's flight recorder slot started (worker.exit)."""
    started = slot.get("started_at")
    if isinstance(started, int | float) and not isinstance(started, bool) and started > 0:
        return {A.TASK_STARTED: int(started * 1e9)}
    return {}


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
