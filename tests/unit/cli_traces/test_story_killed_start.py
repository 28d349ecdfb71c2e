"""A SIGKILLed attempt's story says when it started (issue 21, point 8): its worker could
not end its task.execute span, but the raylet's worker.exit carries the start its flight
recorder held."""

from __future__ import annotations

from cli_traces_builders import MS, RAYLET_B, T0, TASK, Recorder, _dispatch, _schedule, _submit
from cli_traces_builders import WORKER_1 as WORKER

from tracedray.cli.tracestore.story import TaskStory, task_story
from tracedray.telemetry import attributes as attr


def _killed(started_ms: float | None) -> Recorder:
    rec = Recorder()
    submit = _submit(rec, max_retries=0, end_ms=60)
    _schedule(rec, submit, 0, 1)
    _dispatch(rec, submit, 0, WORKER, 2, 60, error="worker died: SIGKILL")
    exit_attributes = {
        attr.WORKER_PID: WORKER.pid, attr.WORKER_ID: f"w{WORKER.pid}", attr.EXIT_CODE: 137,
        attr.EXIT_SIGNAL: "SIGKILL", attr.EXIT_MEANING: "killed by the OOM killer",
        attr.TASK_ID: TASK, attr.TASK_ATTEMPT: 0}
    if started_ms is not None:
        exit_attributes[attr.TASK_STARTED] = T0 + int(started_ms * MS)
    rec.span(RAYLET_B, "worker.exit", 55, 55.5, exit_attributes, parent=submit)
    return rec


def test_a_killed_attempt_started_when_its_flight_recorder_says(parse, tmp_path) -> None:
    spans, logs = parse(_killed(started_ms=5), tmp_path)
    story = task_story(spans, logs, TASK)
    assert isinstance(story, TaskStory)
    assert [e.kind for e in story.events] == ["submitted", "scheduled", "dispatched",
                                              "started", "ended", "final"]
    started = next(e for e in story.events if e.kind == "started")
    assert started.time_ns == T0 + 5 * MS and started.attempt == 0
    assert started.duration_ns == 50 * MS  # until the raylet saw it die
    assert started.summary.startswith(f"started in worker pid {WORKER.pid} on node-b")
    assert started.details["worker_pid"] == WORKER.pid


def test_without_the_start_no_started_line_is_made_up(parse, tmp_path) -> None:
    spans, logs = parse(_killed(started_ms=None), tmp_path)
    story = task_story(spans, logs, TASK)
    assert isinstance(story, TaskStory)
    assert "started" not in [e.kind for e in story.events]
