"""Hung-task detection: a task attempt running far longer than its function usually takes.

A worker's watch thread looks at the tasks it runs a few times per threshold. An
attempt is slow once it has run ``TRACEDRAY_HUNG_TASK_WARN_S`` (default 60 s) and,
when this worker has seen attempts of the same function end, more than
``TRACEDRAY_HUNG_TASK_FACTOR`` (default 10) times their median. Each slow attempt is
flagged once: a ``task.slow`` warning log line and span event (on its
``task.execute``) with its thread's stack, and a ``SLOW`` mark in the task table that
``tracedray list tasks`` / ``get task`` show. The decision (``is_slow``) and the
durations (``FunctionDurations``) are pure; the watch does the I/O.
"""

from __future__ import annotations

import collections
import contextlib
import os
import statistics as stats
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tracedray import config, logs
from tracedray._proto.v1 import gcs_pb2
from tracedray.core.worker import stack_dump
from tracedray.core.worker.stack_dump import LiveTask

if TYPE_CHECKING:
    from tracedray.core.address import Address
    from tracedray.core.worker.task_executor import TaskExecutor

log = logs.get_logger(__name__)
# The durations kept per function: enough for a stable median, bounded memory.
KEPT_DURATIONS = 64
SLOW_MARK = "SLOW"  # the state_times key a slow attempt's task event carries


def _parse_threshold(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise ValueError(f"expected a positive number of seconds, got {text!r}")
    return value


HUNG_TASK_WARN_S: config.Variable[float] = config.Variable(
    "TRACEDRAY_HUNG_TASK_WARN_S", _parse_threshold, lambda: 60.0,
    "Seconds a task attempt runs before it can be flagged as slow (task.slow log line and "
    "span event with its stack, SLOW in `tracedray list tasks`).")
HUNG_TASK_FACTOR: config.Variable[float] = config.Variable(
    "TRACEDRAY_HUNG_TASK_FACTOR", _parse_threshold, lambda: 10.0,
    "A task attempt past TRACEDRAY_HUNG_TASK_WARN_S is flagged only if it also ran this many "
    "times the median duration of its function's attempts that ended in the same worker.")


def is_slow(running_for_s: float, threshold_s: float, factor: float,
            median_s: float | None) -> bool:
    """Whether an attempt running for ``running_for_s`` is slow (pure)."""
    if running_for_s < threshold_s:
        return False
    return median_s is None or running_for_s > factor * median_s


class FunctionDurations:
    """The latest durations of each function's ended attempts, for their median.

    ``observe`` runs once per task on the executor's thread: a dict lookup and an append.
    """

    def __init__(self, kept: int = KEPT_DURATIONS) -> None:
        self._kept = kept
        self._durations: dict[str, collections.deque[float]] = {}

    def observe(self, function: str, seconds: float) -> None:
        durations = self._durations.get(function)
        if durations is None:
            durations = self._durations[function] = collections.deque(maxlen=self._kept)
        durations.append(seconds)

    def median(self, function: str) -> float | None:
        durations = self._durations.get(function)
        return stats.median(list(durations)) if durations else None


@dataclass(frozen=True)
class SlowTaskStatistics:
    threshold_s: float
    factor: float
    checks: int
    flagged_total: int


class SlowTaskWatch:
    """Flags each slow attempt of this worker once (see the module's doc)."""

    def __init__(self, *, live: Callable[[], Iterable[LiveTask]], durations: FunctionDurations,
                 report: Callable[[gcs_pb2.TaskEvent], None], node_id: str, worker_id: str,
                 pid: int, threshold_s: float | None = None,
                 factor: float | None = None) -> None:
        self._live = live
        self._durations = durations
        self._report = report
        self._node_id, self._worker_id, self._pid = node_id, worker_id, pid
        self.threshold_s = HUNG_TASK_WARN_S.get() if threshold_s is None else threshold_s
        self.factor = HUNG_TASK_FACTOR.get() if factor is None else factor
        self._flagged: set[tuple[bytes, int]] = set()
        self._checks = self._flagged_total = 0

    def start(self, stopped: threading.Event) -> None:
        interval = min(max(self.threshold_s / 4, 0.2), 5.0)
        threading.Thread(target=self._loop, args=(stopped, interval), daemon=True,
                         name="tracedray-slow-tasks").start()

    def _loop(self, stopped: threading.Event, interval: float) -> None:
        while not stopped.wait(interval):
            try:
                self.check(time.time())
            except Exception as exc:  # noqa: BLE001 - a watch never breaks the worker
                log.warning("task.slow_check_failed", error=repr(exc))

    def newly_slow(self, live: Iterable[LiveTask], now: float) -> list[LiveTask]:
        """The attempts slow now and not flagged before (forgets those that ended)."""
        live = list(live)
        keys = {(t.spec.task_id, t.spec.attempt) for t in live}
        self._flagged &= keys
        slow = [t for t in live if (t.spec.task_id, t.spec.attempt) not in self._flagged
                and is_slow(now - t.started_at, self.threshold_s, self.factor,
                            self._durations.median(t.spec.function_name))]
        self._flagged.update((t.spec.task_id, t.spec.attempt) for t in slow)
        return slow

    def check(self, now: float) -> list[LiveTask]:
        self._checks += 1
        slow = self.newly_slow(self._live(), now)
        for task in slow:
            self._flag(task, now)
        return slow

    def _flag(self, task: LiveTask, now: float) -> None:
        spec = task.spec
        frame = sys._current_frames().get(task.thread_id)
        stack = stack_dump.format_frames(stack_dump.frames_of(frame)) if frame else ""
        running_for = round(now - task.started_at, 3)
        median = self._durations.median(spec.function_name)
        self._flagged_total += 1
        attributes = {"tracedray.task.running_for_s": running_for,
                      "tracedray.task.threshold_s": self.threshold_s,
                      "tracedray.task.stack": stack[-8000:]}
        if median is not None:
            attributes["tracedray.task.median_s"] = round(median, 6)
        with contextlib.suppress(Exception):  # telemetry never breaks the runtime
            task.span.add_event("task.slow", attributes)
        with logs.task_context(job_id=spec.job_id.hex(), task_id=spec.task_id.hex(),
                               actor_id=spec.actor_id.hex(), worker_id=self._worker_id,
                               task_name=spec.function_name, attempt=spec.attempt):
            log.warning("task.slow", function=spec.function_name, attempt=spec.attempt,
                        running_for_s=running_for, threshold_s=self.threshold_s,
                        median_s=median, factor=self.factor, stack=stack[-8000:])
        event = gcs_pb2.TaskEvent(task_id=spec.task_id, attempt=spec.attempt, state="RUNNING",
                                  time=now, function_name=spec.function_name,
                                  job_id=spec.job_id, actor_id=spec.actor_id,
                                  node_id=self._node_id, worker_id=self._worker_id,
                                  worker_pid=self._pid)
        event.state_times[SLOW_MARK] = now
        self._report(event)

    def statistics(self) -> SlowTaskStatistics:
        return SlowTaskStatistics(self.threshold_s, self.factor, self._checks,
                                  self._flagged_total)


def start_watch(address: Address, executor: TaskExecutor,
                report: Callable[[gcs_pb2.TaskEvent], None],
                stopped: threading.Event) -> SlowTaskWatch:
    """A worker's watch over the tasks its executor runs, started; ``report`` takes
    the task event of a task found slow."""
    watch = SlowTaskWatch(live=lambda: list(executor.live.values()),
                          durations=executor.durations, report=report,
                          node_id=address.node_id, worker_id=address.worker_id, pid=os.getpid())
    watch.start(stopped)
    return watch
