"""The caller's copy of what executors reported, kept until their reports are known to
have reached the GCS (executor_reports.py), and the numbers that say so (task_events)."""

from __future__ import annotations

from collections.abc import Sequence

from tracedray._proto.v1 import common_pb2, gcs_pb2
from tracedray.core.worker.executor_reports import ExecutorReports
from tracedray.core.worker.task_events import DISPATCHED_STATE, FIRST_STATE, TaskEventBuffer
from tracedray.exceptions import RaySystemError


class _Gcs:
    def __init__(self) -> None:
        self.events: list[gcs_pb2.TaskEvent] = []
        self.down = False

    def add_encoded_task_events(self, events: Sequence[bytes]) -> None:
        if self.down:
            raise RaySystemError("the GCS is unreachable")
        self.events += [gcs_pb2.TaskEvent.FromString(e) for e in events]


class _Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def _answer(n: int, *, seq: int, through: int, attempt: int = 0, failed: bool = False,
            submitted_at: float = 0.0, dispatched_at: float = 0.0,
            ) -> tuple[common_pb2.TaskSpec, common_pb2.TaskResult]:
    spec = common_pb2.TaskSpec(task_id=bytes([n]) * 24, function_name="f", attempt=attempt,
                               submitted_at=submitted_at, dispatched_at=dispatched_at,
                               call_site="x.py:1")
    result = common_pb2.TaskResult(
        task_id=spec.task_id, attempt=attempt, worker_id="w", worker_pid=42, node_id="n",
        started_at=10.0 + n, finished_at=11.0 + n, report_seq=seq, reported_through=through,
        is_application_error=failed, error_type="ValueError" if failed else "",
        error_message="bad" if failed else "")
    return spec, result


def _reports() -> tuple[ExecutorReports, TaskEventBuffer, _Gcs, _Clock]:
    gcs, clock = _Gcs(), _Clock()
    events = TaskEventBuffer(gcs)  # type: ignore[arg-type]
    return ExecutorReports(events, keep_s=5.0, clock=clock), events, gcs, clock


def test_a_lost_executors_unconfirmed_reports_are_recorded_as_it_recorded_them() -> None:
    reports, events, gcs, _ = _reports()
    conn = object()
    reports.answered(conn, [_answer(1, seq=5, through=0),
                            _answer(2, seq=6, through=0, failed=True, attempt=1),
                            _answer(3, seq=7, through=0, submitted_at=9.0)])
    # 5 and 6 reached the GCS; 4 is a normal task whose worker recorded its dispatch.
    reports.answered(conn, [_answer(4, seq=9, through=6, dispatched_at=13.5)])
    assert reports.statistics().kept == 4  # whole batches: the first holds 7
    assert reports.lost(conn) == 2
    events.flush()
    by_task = {e.task_id[0]: e for e in gcs.events}
    assert sorted(by_task) == [3, 4]
    call = by_task[3]  # an actor call's first state, left to its actor, comes back too
    assert dict(call.state_times) == {FIRST_STATE: 9.0, "RUNNING": 13.0, "FINISHED": 14.0}
    assert (call.state, call.time, call.worker_pid, call.node_id) == ("FINISHED", 14.0, 42, "n")
    assert call.call_site == "x.py:1"
    assert dict(by_task[4].state_times) == {DISPATCHED_STATE: 13.5, "RUNNING": 14.0,
                                            "FINISHED": 15.0}
    assert reports.lost(conn) == 0 and reports.statistics().recorded_for_lost_total == 2


def test_a_failed_attempt_is_recorded_failed_at_its_own_attempt() -> None:
    reports, events, gcs, _ = _reports()
    conn = object()
    reports.answered(conn, [_answer(1, seq=1, through=0, failed=True, attempt=2)])
    reports.lost(conn)
    events.flush()
    [event] = gcs.events
    assert (event.state, event.attempt, event.error_type, event.error_message) == (
        "FAILED", 2, "ValueError", "bad")


def test_confirmed_expired_and_unnumbered_reports_are_not_kept() -> None:
    reports, events, gcs, clock = _reports()
    first, second = object(), object()
    reports.answered(first, [_answer(1, seq=0, through=0)])  # not the executor's report
    assert reports.statistics().connections == 0
    reports.answered(first, [_answer(2, seq=3, through=3)])  # delivered already
    assert reports.statistics().kept == 0
    reports.answered(second, [_answer(3, seq=4, through=0)])
    clock.now += 4.0
    reports.prune()  # the flusher's
    assert reports.statistics().kept == 1
    clock.now += 2.0  # an executor alive that long has sent its report
    reports.prune()
    assert reports.statistics().kept == 0 and reports.statistics().connections == 0
    assert reports.lost(second) == 0
    events.flush()
    assert gcs.events == []


def test_delivered_through_passes_only_what_a_flush_delivered() -> None:
    gcs = _Gcs()
    events = TaskEventBuffer(gcs)  # type: ignore[arg-type]
    spec = common_pb2.TaskSpec(task_id=b"t" * 24, function_name="f")
    first = events.record(spec, "RUNNING")
    gcs.down = True
    events.flush()  # kept back: not delivered
    assert events.delivered_through == 0
    second = events.record(spec, "FINISHED")
    gcs.down = False
    events.flush()
    assert second > first and events.delivered_through == second
