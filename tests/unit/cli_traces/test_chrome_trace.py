from __future__ import annotations

import json
from collections import Counter

from cli_traces_builders import (
    NODE_A,
    NODE_B,
    TASK,
    Recorder,
    sigkill_retry_scenario,
    success_scenario,
)
from cli_traces_builders import _submit as submit_span

from tracedray.cli.tracestore.chrome_trace import (
    LANE_STRIDE,
    assign_lanes,
    build_chrome_trace,
    node_pids,
)
from tracedray.cli.tracestore.model import parse_resource_spans


def spans_of(rec: Recorder):
    spans, warnings = parse_resource_spans(rec.resource_spans())
    assert warnings == []
    return spans


def test_chrome_trace_is_valid_json_with_rows_phases_and_paired_flows():
    spans = spans_of(sigkill_retry_scenario())
    document = json.loads(json.dumps(build_chrome_trace(spans)))
    events = document["traceEvents"]
    for event in events:
        assert {"name", "ph", "pid", "tid"} <= event.keys()
        assert isinstance(event["pid"], int) and isinstance(event["tid"], int)
    pids = node_pids([NODE_A, NODE_B])
    names = {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "process_name"}
    assert names == {(pids[NODE_A], f"node 10.0.0.1 ({NODE_A[:12]})"),
                     (pids[NODE_B], f"node 10.0.0.2 ({NODE_B[:12]})")}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e["name"] == "thread_name"}
    assert threads[(pids[NODE_B], 201)] == "worker 201"  # SIGKILLed: its row shows worker.exit
    assert threads[(pids[NODE_B], 202)] == "worker 202"
    assert threads[(pids[NODE_A], 100)] == "driver 100"
    complete = [e for e in events if e["ph"] == "X"]
    assert Counter(e["name"] for e in complete) == Counter({
        "task.submit": 1, "task.schedule": 2, "task.dispatch": 2, "task.execute": 1,
        "worker.exit": 1})
    died = next(e for e in complete if e["name"] == "worker.exit")
    assert (died["pid"], died["tid"]) == (pids[NODE_B], 201)
    execute = next(e for e in complete if e["name"] == "task.execute")
    assert (execute["pid"], execute["tid"]) == (pids[NODE_B], 202)
    assert execute["dur"] == 60_000.0 and execute["args"]["tracedray.task.id"] == TASK
    failed = next(e for e in complete if e["name"] == "task.dispatch" and "status" in e["args"])
    assert failed["cname"] == "terrible"
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    finishes = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == finishes.keys() and len(starts) == 1
    (flow_id,) = starts
    assert (starts[flow_id]["pid"], starts[flow_id]["tid"]) == (pids[NODE_A], 100)
    assert finishes[flow_id]["bp"] == "e" and finishes[flow_id]["ts"] == execute["ts"]


def test_task_filter_keeps_only_that_tasks_trace():
    rec = success_scenario()
    other = "ab" * 12
    submit_span(rec, task=other)
    rec.spans[next(iter(rec.spans))][-1]["traceId"] = "ff" * 16  # the other task's own trace
    spans = spans_of(rec)
    everything = build_chrome_trace(spans)
    only = build_chrome_trace(spans, task_id=TASK)
    count = lambda doc: sum(1 for e in doc["traceEvents"] if e["ph"] == "X")  # noqa: E731
    assert count(everything) == count(only) + 1
    assert all(e["args"].get("tracedray.task.id") != other
               for e in only["traceEvents"] if e["ph"] == "X")


def test_overlapping_spans_on_one_process_get_separate_lanes():
    assert assign_lanes([(0, 10), (2, 5), (3, 12), (11, 13), (12, 20)]) == [0, 0, 1, 0, 1]
    rec = Recorder()
    from cli_traces_builders import DRIVER

    rec.span(DRIVER, "task.submit", 0, 10, {})
    rec.span(DRIVER, "task.submit", 5, 15, {})  # overlaps without nesting
    document = build_chrome_trace(spans_of(rec))
    tids = sorted(e["tid"] for e in document["traceEvents"] if e["ph"] == "X")
    assert tids == [100, 100 + LANE_STRIDE]


def test_node_pids_are_stable_and_distinct():
    first = node_pids(["n1", "n2", "n3"])
    assert node_pids(["n3", "n1"]) == {"n1": first["n1"], "n3": first["n3"]}
    assert len(set(first.values())) == 3
