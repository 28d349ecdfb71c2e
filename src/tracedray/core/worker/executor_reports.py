"""What executors reported about the tasks they answered, kept by the caller until it
knows their reports reached the GCS.

An executor records a task's RUNNING and FINISHED (or FAILED) and its flusher sends them
every 0.1 s (task_events.py); the result reaches the caller sooner. An executor killed
in between (SIGKILL, the OOM killer) takes those events with it: the GCS would show a
task the caller saw finish still SUBMITTED_TO_WORKER, failed later by its job's end, and
an actor call whose caller left its first state to the actor not at all.

So a result says which of its executor's task events is its own (``report_seq``) and
up to which one they have reached the GCS (``reported_through``), with the times and
failure they record. The caller keeps, per connection, what each answered task's events
say until a later result on that connection confirms them, and records them itself when
the connection breaks first (``lost``): the same states, times and worker, so that a
report that did arrive merges with its copy unchanged. An entry also goes after
``KEEP_S`` (``answered`` prunes): an executor alive that long has sent its events, or
keeps them until the GCS answers.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple

from tracedray import logs
from tracedray._proto.v1 import common_pb2
from tracedray.core.worker.task_events import FIRST_STATE, TaskEventBuffer

log = logs.get_logger(__name__)
KEEP_S = 5.0


class _Answered(NamedTuple):
    """What a result said its executor recorded (not the result: it holds the values)."""
    seq: int
    answered_at: float  # monotonic
    spec: common_pb2.TaskSpec
    attempt: int
    failed: bool
    started_at: float
    finished_at: float
    node_id: str
    worker_id: str
    worker_pid: int
    error_type: str
    error_message: str


@dataclass(frozen=True)
class ExecutorReportStatistics:
    kept: int  # answered tasks whose executor's report is not known to be delivered
    connections: int
    recorded_for_lost_total: int  # tasks whose report their caller recorded itself


class ExecutorReports:
    def __init__(self, events: TaskEventBuffer, *, keep_s: float = KEEP_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._events = events
        self._keep_s = keep_s
        self._clock = clock
        self._lock = threading.Lock()
        self._by_conn: dict[object, deque[_Answered]] = {}
        self._pruned_at = clock()
        self._recorded = 0

    def answered(self, conn: object,
                 pairs: Iterable[tuple[common_pb2.TaskSpec, common_pb2.TaskResult]]) -> None:
        """Results read from ``conn``, with their tasks' specs (before any retry changes
        them: a result names its own attempt)."""
        now = self._clock()
        through = 0
        entries = []
        for spec, result in pairs:
            if result.reported_through > through:
                through = result.reported_through
            if result.report_seq:
                entries.append(_Answered(
                    result.report_seq, now, spec, result.attempt, result.is_application_error,
                    result.started_at, result.finished_at, result.node_id, result.worker_id,
                    result.worker_pid, result.error_type, result.error_message))
        with self._lock:
            kept = self._by_conn.get(conn)
            if kept is None and entries:
                kept = self._by_conn[conn] = deque()
            if kept is not None:
                kept.extend(entries)
                _confirm(kept, through, now - self._keep_s)
                if not kept:
                    del self._by_conn[conn]
            if now - self._pruned_at > self._keep_s:
                self._prune_locked(now)

    def lost(self, conn: object) -> int:
        """``conn`` broke: record what its executor's unconfirmed reports said. Returns
        how many tasks that was."""
        with self._lock:
            kept = self._by_conn.pop(conn, None)
        if not kept:
            return 0
        oldest = self._clock() - self._keep_s
        count = 0
        record = self._events.record
        for entry in kept:
            if entry.answered_at < oldest:
                continue
            spec, r = entry.spec, entry
            if not r.attempt and spec.submitted_at:  # the actor reported the first state
                record(spec, FIRST_STATE, at=spec.submitted_at, attempt=0)
            record(spec, "RUNNING", at=r.started_at, node_id=r.node_id, worker_id=r.worker_id,
                   worker_pid=r.worker_pid, attempt=r.attempt)
            record(spec, "FAILED" if r.failed else "FINISHED",
                   at=r.finished_at, node_id=r.node_id, worker_id=r.worker_id,
                   worker_pid=r.worker_pid, error_type=r.error_type,
                   error_message=r.error_message, attempt=r.attempt)
            count += 1
        if count:
            with self._lock:
                self._recorded += count
            log.info("task_events.recorded_for_executor", tasks=count,
                     meaning="the connection to the worker that ran these tasks broke "
                             "before its own task events were known to reach the GCS; "
                             "their caller recorded what the worker's results said")
        return count

    def statistics(self) -> ExecutorReportStatistics:
        with self._lock:
            return ExecutorReportStatistics(sum(len(k) for k in self._by_conn.values()),
                                            len(self._by_conn), self._recorded)

    def _prune_locked(self, now: float) -> None:
        self._pruned_at = now
        for conn in list(self._by_conn):
            kept = self._by_conn[conn]
            _confirm(kept, 0, now - self._keep_s)
            if not kept:
                del self._by_conn[conn]


def _confirm(kept: deque[_Answered], through: int, oldest: float) -> None:
    """Drop, from the front, the entries whose report was delivered or that are older
    than ``oldest`` (entries come in report order, nearly: a later one stays until
    those before it go)."""
    while kept and (kept[0].seq <= through or kept[0].answered_at < oldest):
        kept.popleft()
