"""The raylet's worker processes: start, register, lease, reap.

The raylet is the parent of every worker, so it is the one that sees each exit
code and signal; it records them (span + log) even when the worker could not.
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

from tracedray.core import ids
from tracedray.core.address import Address
from tracedray.core.raylet.exit_meaning import describe_exit

STARTING, IDLE, LEASED, BLOCKED, ACTOR, DEAD = (
    "STARTING", "IDLE", "LEASED", "BLOCKED", "ACTOR", "DEAD")


@dataclass
class WorkerProcess:
    worker_id: str
    process: subprocess.Popen[bytes]
    state: str = STARTING
    port: int = 0
    task_port: int = 0  # where callers open task streams to it
    lease_id: str = ""
    resources: dict[str, float] = field(default_factory=dict)
    actor_id: bytes = b""
    started_at: float = field(default_factory=time.time)
    ended_at: float = 0.0
    exit_code: int = 0
    exit_signal: str = ""
    exit_meaning: str = ""
    kill_intended: bool = False
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
    dead: int
    started_total: int


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
        worker = WorkerProcess(worker_id, process)
        self.workers[worker_id] = worker
        self._started_total += 1
        threading.Thread(target=self._reap, args=(worker,), daemon=True,
                         name=f"tracedray-reap-{process.pid}").start()
        return worker

    def _reap(self, worker: WorkerProcess) -> None:
        returncode = worker.process.wait()
        worker.exit_code, worker.exit_signal, worker.exit_meaning = describe_exit(returncode)
        worker.ended_at = time.time()
        worker.registered.set()  # wake anyone waiting for a registration that will never come
        # on_exit marks the worker DEAD under the raylet's lock, together with releasing
        # its lease's resources: a state change outside that lock could race a
        # ReturnWorker and leak the lease's CPUs.
        self._on_exit(worker)

    def address_of(self, worker: WorkerProcess) -> Address:
        return Address(self._node_id, self._ip, worker.port, worker.worker_id, worker.pid,
                       worker.task_port)

    def idle_worker(self) -> WorkerProcess | None:
        for worker in self.workers.values():
            if worker.state == IDLE:
                return worker
        return None

    def count(self, state: str) -> int:
        return sum(1 for w in self.workers.values() if w.state == state)

    def kill_all(self, timeout_s: float = 2.0) -> None:
        live = [w for w in self.workers.values() if w.process.poll() is None]
        for worker in live:
            worker.kill_intended = True
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
                                    self.count(BLOCKED), self.count(ACTOR), self.count(DEAD),
                                    self._started_total)
