"""The background work of a core worker, done on one thread every ``FLUSH_INTERVAL_S``:
freeing what dropped refs let go, reference updates to other owners, task events to
the GCS, printed lines to the drivers, and letting go of executors' reports kept past
their time (executor_reports.py).

One flush at a time: two could send a task's events or a job's output out of order
(the raylet's GetExitBlockers and the shutdown flush run it besides the thread).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from tracedray import logs
from tracedray.core.worker.executor_reports import ExecutorReports
from tracedray.core.worker.output_echo import OutputEcho
from tracedray.core.worker.ownership import Ownership
from tracedray.core.worker.reference_table import ReferenceTable
from tracedray.core.worker.task_events import TaskEventBuffer

log = logs.get_logger(__name__)
FLUSH_INTERVAL_S = 0.1


@dataclass(frozen=True)
class FlusherStatistics:
    flushes: int
    errors: int  # flushes that raised (logged as flusher.error)
    early_releases: int  # frees done for a put, ahead of the flusher


class Flusher:
    def __init__(self, ownership: Ownership, references: ReferenceTable,
                 task_events: TaskEventBuffer, output: OutputEcho,
                 executor_reports: ExecutorReports) -> None:
        self._ownership = ownership
        self._references = references
        self._task_events = task_events
        self._executor_reports = executor_reports
        self._output = output
        self._lock = threading.Lock()
        self._flushes = self._errors = self._early = 0  # changed under _lock

    def start(self, stopped: threading.Event) -> None:
        threading.Thread(target=self._loop, args=(stopped,), daemon=True,
                         name="tracedray-flusher").start()

    def _loop(self, stopped: threading.Event) -> None:
        while not stopped.wait(FLUSH_INTERVAL_S):
            self.flush(periodic=True)

    def flush(self, *, periodic: bool = False) -> None:
        """Send what the process buffered; ``periodic`` (the flusher's loop) lets actor
        calls' first states wait for their actors (task_events.py)."""
        try:
            with self._lock:
                self._flushes += 1
                try:
                    self._ownership.release_deferred()
                    self._ownership.flush_reference_updates()
                    self._task_events.flush(periodic=periodic)
                    self._output.flush()
                    self._executor_reports.prune()
                except Exception:
                    self._errors += 1
                    raise
        except Exception as exc:  # noqa: BLE001 - the flusher must survive anything
            log.error("flusher.error", error=repr(exc))

    def release_dropped_refs(self) -> None:
        """Free now what refs dropped since the last flush let go (a put does this first,
        so that the store can give it back the file of the object it just dropped);
        left to the flusher when it is at work."""
        if not self._references.has_dropped_refs() or not self._lock.acquire(False):
            return
        try:
            self._early += 1
            self._ownership.release_deferred()
        finally:
            self._lock.release()

    def statistics(self) -> FlusherStatistics:
        with self._lock:
            return FlusherStatistics(self._flushes, self._errors, self._early)
