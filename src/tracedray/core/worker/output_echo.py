"""Echo of what tasks print to the driver of their job, as Ray's ``log_to_driver``.

Lines are kept with the job they belong to (the flusher sends them after the task
ended) and sent in one batch per job; a driver that is gone loses only the echo,
the lines are in the log files.
"""

from __future__ import annotations

import contextlib
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from tracedray._proto.v1 import common_pb2, core_worker_pb2, core_worker_pb2_grpc, gcs_pb2
from tracedray.core import rpc
from tracedray.core.address import Address
from tracedray.exceptions import RaySystemError

MAX_PENDING_LINES = 10_000


@dataclass(frozen=True)
class OutputEchoStatistics:
    pending_lines: int
    forwarded_total: int  # lines kept to echo
    dropped_total: int  # lines past MAX_PENDING_LINES, in the log files only
    batches_sent: int  # PrintOutput calls made (answered or not)


class OutputEcho:
    def __init__(self, get_jobs: Callable[[], list[gcs_pb2.JobInfo]], *, ip: str, pid: int,
                 job_id: bytes, current_task: Callable[[], common_pb2.TaskSpec | None]) -> None:
        self._get_jobs = get_jobs  # the GCS's job table, to find a job's driver
        self._ip = ip
        self._pid = pid
        self._job_id = job_id
        self._current_task = current_task
        self._lines: list[tuple[bytes, core_worker_pb2.OutputLine]] = []
        self._lock = threading.Lock()
        self._drivers: dict[bytes, str] = {}  # job id -> its driver's address
        self._forwarded = self._dropped = self._batches = 0

    def forward(self, stream: str, line: str, fields: Any) -> None:
        spec = self._current_task()
        name = echo_name(spec.function_name, spec.kind) if spec is not None else "worker"
        job_id = spec.job_id if spec is not None else self._job_id
        with self._lock:
            if len(self._lines) < MAX_PENDING_LINES:
                self._forwarded += 1
                self._lines.append((job_id, core_worker_pb2.OutputLine(
                    task_name=name, pid=self._pid, stream=stream, line=line, ip=self._ip)))
            else:
                self._dropped += 1

    def flush(self) -> None:
        """Echo printed lines to their jobs' drivers now (cheap when nothing was printed)."""
        with self._lock:
            lines, self._lines = self._lines, []
        if not lines:
            return
        by_job: dict[bytes, list[core_worker_pb2.OutputLine]] = defaultdict(list)
        for job_id, line in lines:
            by_job[job_id].append(line)
        for job_id, batch in by_job.items():
            target = self._job_driver(job_id)
            if target is None:
                continue
            with self._lock:
                self._batches += 1
            with contextlib.suppress(grpc.RpcError):
                core_worker_pb2_grpc.CoreWorkerServiceStub(rpc.channel(target)).PrintOutput(
                    core_worker_pb2.OutputBatch(lines=batch), timeout=5)

    def statistics(self) -> OutputEchoStatistics:
        with self._lock:
            return OutputEchoStatistics(len(self._lines), self._forwarded, self._dropped,
                                        self._batches)

    def _job_driver(self, job_id: bytes) -> str | None:
        target = self._drivers.get(job_id)
        if target is None:
            try:
                for job in self._get_jobs():
                    if job.job_id == job_id:
                        target = self._drivers[job_id] = Address.from_proto(job.driver).target
            except RaySystemError:
                return None
        return target


def echo_name(function_name: str, kind: int) -> str:
    """The name in a printed line's prefix, as Ray shows it: ``(f pid=..)``, ``(Counter pid=..)``.

    ``function_name`` is ``module.qualname`` for a function and ``Class.method`` for
    an actor call; the prefix keeps the function's own name, or the actor's class.
    """
    if kind in (common_pb2.ACTOR_METHOD, common_pb2.ACTOR_CREATION):
        return function_name.rsplit(".", 1)[0].rsplit(".", 1)[-1]
    return function_name.rsplit(".", 1)[-1]
