from __future__ import annotations

import json

from cli_traces_builders import (
    DRIVER,
    NODE_A,
    NODE_B,
    RAYLET_B,
    TASK,
    TRACE,
    TRACEBACK,
    Proc,
    Recorder,
    _schedule,
    _submit,
    raised_scenario,
    sigkill_retry_scenario,
    success_scenario,
)

from tracedray.cli.tracestore.render import print_story, story_json, story_to_dict
from tracedray.cli.tracestore.story import (
    FAILED,
    FINISHED,
    JOB_ENDED,
    RAISED,
    RETURNED,
    WORKER_DIED,
    TaskStory,
    UnknownTask,
    close_matches,
    task_story,
)
from tracedray.telemetry import attributes as attr


def kinds(story: TaskStory) -> list[str]:
    return [event.kind for event in story.events]


def test_success_story_in_order_with_origin_placement_and_output(parse, tmp_path):
    spans, logs = parse(success_scenario(), tmp_path)
    story = task_story(spans, logs, TASK)
    assert isinstance(story, TaskStory)
    assert kinds(story) == ["submitted", "scheduled", "dispatched", "started", "output",
                            "ended", "final"]
    submitted, scheduled, dispatched, started, output, ended, final = story.events
    assert submitted.summary == ("submitted by driver pid 100 on head (10.0.0.1) "
                                 "from demo.py:12 in main")
    assert scheduled.details["chosen_node"] == NODE_B
    assert "most input bytes" in scheduled.summary
    assert dispatched.summary == "dispatched to worker pid 201 on node 10.0.0.2"
    assert started.summary == "started in worker pid 201 on node-b"
    assert started.duration_ns == 20_000_000
    assert output.details["line"] == "hello from work" and output.attempt == 0
    assert ended.details["outcome"] == RETURNED
    assert story.final_state == FINISHED and "after 1 attempt" in final.summary
    assert story.trace_id == TRACE and story.function == "demo.work"
    assert story.jaeger_link == ""
    times = [event.time_ns for event in story.events]
    assert times == sorted(times)


def test_raised_story_carries_the_traceback(parse, tmp_path):
    spans, logs = parse(raised_scenario(), tmp_path)
    story = task_story(spans, logs, TASK, jaeger_url="http://jaeger:16686/")
    assert isinstance(story, TaskStory)
    assert [a.outcome for a in story.attempts] == [RAISED]
    ended = next(e for e in story.events if e.kind == "ended")
    assert ended.summary == "attempt 0 raised ValueError: bad input 42"
    assert ended.traceback == TRACEBACK
    assert story.final_state == FAILED
    assert story.jaeger_link == f"http://jaeger:16686/trace/{TRACE}"
    output = next(e for e in story.events if e.kind == "output")
    assert output.summary == "stderr: about to fail"


def test_sigkill_then_retry_success(parse, tmp_path):
    spans, logs = parse(sigkill_retry_scenario(), tmp_path)
    story = task_story(spans, logs, TASK)
    assert isinstance(story, TaskStory)
    assert [(a.attempt, a.outcome) for a in story.attempts] == [(0, WORKER_DIED), (1, RETURNED)]
    died = next(e for e in story.events if e.kind == "ended" and e.attempt == 0)
    assert died.summary == ("attempt 0: worker pid 201 died: SIGKILL (exit 137): killed by the "
                            "OS, often the OOM killer; node memory was 96% used")
    assert died.details["exit_code"] == 137 and died.details["signal"] == "SIGKILL"
    retry = next(e for e in story.events if e.kind == "retry")
    assert retry.attempt == 1
    assert retry.summary == "retry: attempt 1 of 4 after attempt 0 lost its worker"
    assert kinds(story).index("retry") > kinds(story).index("ended")
    outputs = [(e.attempt, e.details["line"]) for e in story.events if e.kind == "output"]
    assert outputs == [(0, "attempt zero starting"), (1, "attempt one starting"), (1, "done")]
    assert story.final_state == FINISHED
    assert story.events[-1].summary == "final state FINISHED after 2 attempts"


def test_unknown_id_suggests_prefix_and_lookalikes(parse, tmp_path):
    spans, logs = parse(sigkill_retry_scenario(), tmp_path)
    result = task_story(spans, logs, TASK[:10])
    assert isinstance(result, UnknownTask)
    assert result.suggestions == (TASK,)
    assert result.message == f"no task with id {TASK[:10]}; did you mean: {TASK}?"
    typo = TASK[:-1] + ("0" if TASK[-1] != "0" else "1")
    assert task_story(spans, logs, typo).suggestions == (TASK,)  # type: ignore[union-attr]
    nothing = task_story(spans, logs, "zzzz")
    assert isinstance(nothing, UnknownTask) and nothing.suggestions == ()
    assert nothing.message == "no task with id zzzz"


def test_close_matches_orders_prefix_before_fuzzy():
    known = ["abcdef01", "abcdef02", "abcxef01", "ffffffff"]
    assert close_matches("abcdef", known) == ("abcdef01", "abcdef02", "abcxef01")
    assert close_matches("abcdef01ff", known)[0] == "abcdef01"  # an over-long paste
    assert close_matches("", known) == ()


def test_json_and_text_rendering(parse, tmp_path):
    from rich.console import Console

    spans, logs = parse(sigkill_retry_scenario(), tmp_path)
    story = task_story(spans, logs, TASK, jaeger_url="http://j:16686")
    assert isinstance(story, TaskStory)
    data = json.loads(story_json(story))
    assert data == json.loads(json.dumps(story_to_dict(story)))
    assert data["final_state"] == FINISHED and data["jaeger_link"].endswith(TRACE)
    assert data["events"][0]["time"] == "2026-01-01T00:00:00.000Z"
    assert [a["outcome"] for a in data["attempts"]] == [WORKER_DIED, RETURNED]
    console = Console(record=True, width=200)
    print_story(story, console)
    text = console.export_text()
    assert "SIGKILL (exit 137)" in text and "retry: attempt 1" in text
    assert "00:00:00.070" in text  # UTC clock times on every line
    assert f"http://j:16686/trace/{TRACE}" in text
    unknown = json.loads(story_json(task_story(spans, logs, "nope")))
    assert unknown["error"] == "no task with id nope" and unknown["suggestions"] == []


GCS = Proc("gcs", 40, NODE_A, "head", "10.0.0.1")
OWNER_DIED = ("owner died: job 01000000 failed, its driver died: process 100 is gone (pid 100, "
              "node aaaaaaaaaaaa), while the task was RUNNING (attempt 0)")


def _job_end(rec: Recorder, parent: str, at_ms: float, attempt: int = 0) -> None:
    rec.span(GCS, "task.job_end", at_ms, at_ms, {
        attr.TASK_ID: TASK, attr.TASK_ATTEMPT: attempt, attr.TASK_FUNCTION: "demo.work",
        attr.TASK_STATE: "FAILED", attr.JOB_ID: "01000000", attr.ERROR_TYPE: "OWNER_DIED",
        attr.TASK_FAILURE_REASON: OWNER_DIED}, parent=parent,
        error=f"OWNER_DIED: {OWNER_DIED}")


def test_a_task_its_job_left_unfinished_ends_failed_as_the_gcs_recorded(parse, tmp_path):
    rec = Recorder()
    submit = _submit(rec, max_retries=0)
    _schedule(rec, submit, 0, 1)
    rec.span(DRIVER, "task.dispatch", 2, 2, {  # never answered: the driver died
        attr.TASK_ID: TASK, attr.TASK_ATTEMPT: 0, attr.WORKER_PID: 201})
    _job_end(rec, submit, 500)
    spans, logs = parse(rec, tmp_path)
    story = task_story(spans, logs, TASK)
    assert isinstance(story, TaskStory)
    assert [(a.attempt, a.outcome) for a in story.attempts] == [(0, JOB_ENDED)]
    ended = next(e for e in story.events if e.kind == "ended")
    assert ended.summary == f"attempt 0 failed by the GCS: {OWNER_DIED}"
    assert ended.details["error_type"] == "OWNER_DIED"
    assert ended.details["recorded_by"] == "gcs pid 40 on head (10.0.0.1)"
    assert story.final_state == FAILED


def test_a_dispatch_that_ended_as_its_task_went_back_is_no_reply(parse, tmp_path):
    # Its worker handed the task back unstarted; the driver sent it again and died before
    # that dispatch ended (so its span is not there): the task did not return.
    rec = Recorder()
    submit = _submit(rec, max_retries=0)
    rec.span(DRIVER, "task.dispatch", 2, 30, {
        attr.TASK_ID: TASK, attr.TASK_ATTEMPT: 0, attr.WORKER_PID: 201,
        attr.DISPATCH_NOTE: "requeued"}, parent=submit)
    _job_end(rec, submit, 500)
    spans, logs = parse(rec, tmp_path)
    story = task_story(spans, logs, TASK)
    assert isinstance(story, TaskStory)
    assert [(a.attempt, a.outcome) for a in story.attempts] == [(0, JOB_ENDED)]
    assert story.final_state == FAILED


def test_a_task_never_dispatched_is_found_by_its_job_end_alone(parse, tmp_path):
    rec = Recorder()
    _job_end(rec, "", 500)  # the driver's spans were lost with it
    spans, logs = parse(rec, tmp_path)
    story = task_story(spans, logs, TASK)
    assert isinstance(story, TaskStory) and story.final_state == FAILED
    assert [a.outcome for a in story.attempts] == [JOB_ENDED]


def test_the_tasks_own_end_beats_the_job_end_as_in_list_tasks(parse, tmp_path):
    rec = success_scenario()
    submit = next(s["spanId"] for s in rec.spans[DRIVER] if s["name"] == "task.submit")
    _job_end(rec, submit, 500)
    spans, logs = parse(rec, tmp_path)
    story = task_story(spans, logs, TASK)
    assert isinstance(story, TaskStory)
    assert [a.outcome for a in story.attempts] == [RETURNED]
    assert story.final_state == FINISHED


def test_a_task_whose_worker_died_as_its_job_ended_says_both(parse, tmp_path):
    rec = Recorder()
    submit = _submit(rec, max_retries=0)
    _schedule(rec, submit, 0, 1)
    rec.span(RAYLET_B, "worker.exit", 300, 300.5, {  # the raylet reclaimed its lease
        attr.WORKER_PID: 201, attr.EXIT_CODE: 137, attr.EXIT_SIGNAL: "SIGKILL",
        attr.TASK_ID: TASK, attr.TASK_ATTEMPT: 0}, parent=submit)
    _job_end(rec, submit, 500)
    spans, logs = parse(rec, tmp_path)
    story = task_story(spans, logs, TASK)
    assert isinstance(story, TaskStory)
    assert [a.outcome for a in story.attempts] == [WORKER_DIED]
    assert story.final_state == FAILED
    note = next(e for e in story.events if e.kind == "job_end")
    assert note.summary == f"the GCS recorded it failed: {OWNER_DIED}"
    assert note.details["error_type"] == "OWNER_DIED"
    assert kinds(story)[-2:] == ["job_end", "final"]
