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
``KEEP_S`` (``prune``, run by the flusher): an executor alive that long has sent its
events, or keeps them until the GCS answers.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from tracedray import logs
from tracedray._proto.v1 import common_pb2
from tracedray.core.worker.task_events import TaskEventBuffer

log = logs.get_logger(__name__)
KEEP_S = 5.0


class _Batch(NamedTuple):
    """Results read together, kept whole until the last of their reports is confirmed
    (one entry per batch: a result costs its caller a tuple, not an object of its own).
    They keep their values alive meanwhile: a tenth of a second or so, normally."""
    last_seq: int
    answered_at: float  # monotonic
    pairs: list[tuple[common_pb2.TaskSpec, common_pb2.TaskResult]]


class _Kept:
    """A connection's unconfirmed batches, and the last report confirmed on it."""

    __slots__ = ("batches", "through")

    def __init__(self) -> None:
        self.batches: deque[_Batch] = deque()
        self.through = 0


@dataclass(frozen=True)
class ExecutorReportStatistics:
    kept: int  # answered tasks kept (their batch's reports are not all known delivered)
    connections: int
    recorded_for_lost_total: int  # tasks whose report their caller recorded itself


class ExecutorReports:
    def __init__(self, events: TaskEventBuffer, *, keep_s: float = KEEP_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._events = events
        self._keep_s = keep_s
        self._clock = clock
        self._lock = threading.Lock()
        self._by_conn: dict[object, _Kept] = {}
        self._recorded = 0

    def answered(self, conn: object,
                 pairs: list[tuple[common_pb2.TaskSpec, common_pb2.TaskResult]]) -> None:
        """Results read from ``conn``, with their tasks' specs (a result names its own
        attempt: a retry may change the spec's)."""
        now = self._clock()
        through = last = 0
        for _, result in pairs:
            if result.reported_through > through:
                through = result.reported_through
            if result.report_seq > last:
                last = result.report_seq
        with self._lock:
            kept = self._by_conn.get(conn)
            if kept is None and last > through:
                kept = self._by_conn[conn] = _Kept()
            if kept is not None:
                if through > kept.through:
                    kept.through = through
                if last > kept.through:
                    kept.batches.append(_Batch(last, now, pairs))
                _confirm(kept.batches, kept.through, now - self._keep_s)
                if not kept.batches:
                    del self._by_conn[conn]

    def prune(self) -> None:
        """Let go of what was kept past ``KEEP_S`` (the flusher calls this: a connection
        that answers nothing more must not keep its last results' values alive)."""
        if not self._by_conn:
            return
        now = self._clock()
        with self._lock:
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
        for batch in kept.batches:
            if batch.answered_at < oldest:
                continue
            for spec, r in batch.pairs:
                if r.report_seq <= kept.through:  # delivered, or nothing recorded (0)
                    continue
                # What the caller left to it: an actor call's first state, a task's
                # first state and dispatch.
                self._events.record_left_by_caller(spec, r.attempt, r.node_id, r.worker_id,
                                                   r.worker_pid)
                record(spec, "RUNNING", at=r.started_at, node_id=r.node_id,
                       worker_id=r.worker_id, worker_pid=r.worker_pid, attempt=r.attempt)
                record(spec, "FAILED" if r.is_application_error else "FINISHED",
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
            return ExecutorReportStatistics(
                sum(len(b.pairs) for k in self._by_conn.values() for b in k.batches),
                len(self._by_conn), self._recorded)

    def _prune_locked(self, now: float) -> None:
        for conn in list(self._by_conn):
            kept = self._by_conn[conn]
            _confirm(kept.batches, kept.through, now - self._keep_s)
            if not kept.batches:
                del self._by_conn[conn]


def _confirm(kept: deque[_Batch], through: int, oldest: float) -> None:
    """Drop, from the front, the batches whose reports were all delivered or that are
    older than ``oldest`` (batches come in report order, nearly: a later one stays until
    those before it go)."""
    while kept and (kept[0].last_seq <= through or kept[0].answered_at < oldest):
        kept.popleft()
