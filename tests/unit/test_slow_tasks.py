"""Hung-task detection's pure parts: when an attempt is slow, the durations' median, and
that each slow attempt is flagged once (and again only as a new attempt)."""

from __future__ import annotations

from typing import Any

import pytest

from tracedray._proto.v1 import common_pb2, gcs_pb2
from tracedray.core.protocol.state_rows import attempt_timing
from tracedray.core.worker.slow_tasks import (
    HUNG_TASK_WARN_S,
    SLOW_MARK,
    FunctionDurations,
    SlowTaskWatch,
    is_slow,
)
from tracedray.core.worker.stack_dump import LiveTask
from tracedray.exceptions import ConfigError


@pytest.mark.parametrize(("running", "median", "slow"), [
    (59.0, None, False),  # under the threshold, whatever the history
    (61.0, None, True),  # no history: the threshold alone
    (61.0, 1.0, True),  # 61 > 10 x 1
    (61.0, 10.0, False),  # a function that usually takes 10 s is not slow at 61 s
    (101.0, 10.0, True),
])
def test_is_slow(running: float, median: float | None, slow: bool) -> None:
    assert is_slow(running, 60.0, 10.0, median) is slow


def test_durations_keep_the_latest_for_the_median() -> None:
    durations = FunctionDurations(kept=3)
    assert durations.median("f") is None
    for seconds in (100.0, 1.0, 2.0, 3.0):
        durations.observe("f", seconds)
    assert durations.median("f") == 2.0  # 100 fell out
    assert durations.median("g") is None


def test_threshold_variable_rejects_nonsense() -> None:
    assert HUNG_TASK_WARN_S.get({}) == 60.0
    assert HUNG_TASK_WARN_S.get({"TRACEDRAY_HUNG_TASK_WARN_S": "2.5"}) == 2.5
    with pytest.raises(ConfigError, match="TRACEDRAY_HUNG_TASK_WARN_S"):
        HUNG_TASK_WARN_S.get({"TRACEDRAY_HUNG_TASK_WARN_S": "-1"})


class _Span:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def add_event(self, name: str, attributes: dict[str, Any]) -> None:
        self.events.append((name, attributes))


def _live(task: bytes, attempt: int, started: float, span: Any = None) -> LiveTask:
    spec = common_pb2.TaskSpec(task_id=task, attempt=attempt, function_name="m.f")
    return LiveTask(spec, started, 0, span or _Span())


def test_each_slow_attempt_is_flagged_once() -> None:
    reported: list[gcs_pb2.TaskEvent] = []
    live: list[LiveTask] = []
    watch = SlowTaskWatch(live=lambda: live, durations=FunctionDurations(),
                          report=reported.append, node_id="n", worker_id="w", pid=1,
                          threshold_s=5.0, factor=10.0)
    span = _Span()
    live.append(_live(b"t1", 0, 100.0, span))
    assert watch.check(104.0) == []
    assert [t.spec.task_id for t in watch.check(106.0)] == [b"t1"]
    assert watch.check(200.0) == []  # flagged already
    assert [name for name, _ in span.events] == ["task.slow"]
    assert "tracedray.task.stack" in span.events[0][1]
    [event] = reported
    assert (event.task_id, event.attempt, event.state) == (b"t1", 0, "RUNNING")
    assert SLOW_MARK in event.state_times
    live[:] = [_live(b"t1", 1, 300.0)]  # a retry is a new attempt
    assert [t.spec.attempt for t in watch.check(306.0)] == [1]
    assert watch.statistics().flagged_total == 2


def test_a_function_that_is_usually_slow_is_not_flagged_early() -> None:
    durations = FunctionDurations()
    durations.observe("m.f", 30.0)
    watch = SlowTaskWatch(live=lambda: [_live(b"t", 0, 0.0)], durations=durations,
                          report=lambda e: None, node_id="n", worker_id="w", pid=1,
                          threshold_s=5.0, factor=10.0)
    assert watch.check(100.0) == []
    assert len(watch.check(301.0)) == 1


def test_attempt_timing_reads_the_latest_attempt() -> None:
    record = gcs_pb2.TaskRecord(state="RUNNING", attempt=1)
    old = record.events.add(attempt=0, state="FAILED")
    old.state_times["RUNNING"] = 10.0
    old.state_times[SLOW_MARK] = 20.0
    new = record.events.add(attempt=1, state="RUNNING")
    new.state_times["RUNNING"] = 50.0
    assert attempt_timing(record, 60.0) == (10.0, False)  # attempt 0's flag is not its
    record.events.add(attempt=1, state="RUNNING").state_times[SLOW_MARK] = 55.0
    assert attempt_timing(record, 60.0) == (10.0, True)
    record.state = "FINISHED"
    assert attempt_timing(record, 60.0) == (None, True)
