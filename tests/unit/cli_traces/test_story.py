from __future__ import annotations

import json

from cli_traces_builders import (
    NODE_B,
    TASK,
    TRACE,
    TRACEBACK,
    raised_scenario,
    sigkill_retry_scenario,
    success_scenario,
)

from tracedray.cli.tracestore.render import print_story, story_json, story_to_dict
from tracedray.cli.tracestore.story import (
    FAILED,
    FINISHED,
    RAISED,
    RETURNED,
    WORKER_DIED,
    TaskStory,
    UnknownTask,
    close_matches,
    task_story,
)


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
