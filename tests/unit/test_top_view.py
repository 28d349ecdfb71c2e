"""`tracedray top`'s frame, built from hand-made node stats and task rows."""

from __future__ import annotations

from typing import Any

from tracedray._proto.v1 import gcs_pb2, raylet_pb2
from tracedray.cli.top_view import build_frame, render
from tracedray.core.cluster_client import NodeView


def _view(node_id: str, *, head: bool = False) -> NodeView:
    node = gcs_pb2.NodeWithLoad()
    node.info.node_id, node.info.state, node.info.is_head = node_id, "ALIVE", head
    node.info.resources_total["CPU"] = 4.0
    stats = raylet_pb2.NodeStats(node_id=node_id, store_used=1 << 20, store_capacity=1 << 30,
                                 infeasible_leases=1, host_cpu_percent=50.0)
    stats.resources_available["CPU"] = 1.0
    stats.workers.add(state="LEASED")
    stats.workers.add(state="DEAD")
    return NodeView(node, stats)


def _task(task_id: str, name: str, state: str, **extra: Any) -> dict[str, Any]:
    return {"task_id": task_id, "name": name, "state": state, "type": "NORMAL_TASK",
            "node_id": "n1", "job_id": "j1", **extra}


TASKS = [
    _task("t1", "m.slow", "RUNNING", running_for_s=90.0, slow=True),
    _task("t2", "m.slow", "RUNNING", running_for_s=5.0),
    _task("t3", "m.quick", "RUNNING", running_for_s=1.0),
    _task("t4", "m.quick", "PENDING_NODE_ASSIGNMENT"),
    _task("t5", "m.bad", "FAILED", error_type="ValueError", error_message="no\nmore", _time=2.0),
    _task("t6", "m.bad", "FAILED", error_type="KeyError", error_message="k", _time=3.0),
]


def test_frame_groups_running_tasks_by_function() -> None:
    frame = build_frame([_view("n1", head=True)], TASKS)
    assert [(f["function"], f["running"], f["longest_s"], f["slow"], f["longest_task_id"])
            for f in frame.functions] == [("m.slow", 2, 90.0, 1, "t1"),
                                          ("m.quick", 1, 1.0, 0, "t3")]
    assert frame.pending == {"PENDING_NODE_ASSIGNMENT": 1}
    assert frame.infeasible == 1
    assert [f["error_type"] for f in frame.failures] == ["KeyError", "ValueError"]
    assert frame.failures[1]["error"] == "no"
    [node] = frame.nodes
    assert (node["cpus_used"], node["cpus"], node["workers"]) == (3.0, 4.0, {"LEASED": 1})
    sorted_by_count = build_frame([], TASKS, sort="running").functions
    assert [f["function"] for f in sorted_by_count] == ["m.slow", "m.quick"]


def test_frame_filters_by_node_and_job() -> None:
    assert build_frame([_view("n1")], TASKS, node="n2").functions == []
    assert build_frame([_view("n1")], TASKS, job="other").failures == []


def test_frame_renders() -> None:
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(render(build_frame([_view("n1", head=True)], TASKS), title="top"))
    text = console.export_text()
    assert "m.slow" in text and "90.0s" in text and "KeyError" in text and "(head)" in text


def test_keys_cycle_sort_and_filters_and_act_on_the_selected_row() -> None:
    from tracedray.cli.top_view import Action, TopState, on_key

    state = TopState()
    kw: dict[str, Any] = {"nodes": ["n1", "n2"], "jobs": ["j1"], "rows": 2}
    state, action = on_key(state, "s", **kw)
    assert (state.sort, action) == ("running", Action.NONE)
    state, _ = on_key(state, "s", **kw)
    state, _ = on_key(state, "s", **kw)
    assert state.sort == "longest"  # round again
    nodes = []
    for _ in range(3):
        state, _ = on_key(state, "n", **kw)
        nodes.append(state.node)
    assert nodes == ["n1", "n2", None]
    state, _ = on_key(state, "j", **kw)
    assert state.job == "j1"
    state, _ = on_key(state, "2", **kw)
    assert state.selected == 1
    state, _ = on_key(state, "3", **kw)  # no third row
    assert state.selected == 1
    assert on_key(state, "k", **kw)[1] is Action.STACK
    assert on_key(state, "t", **kw)[1] is Action.TRACE
    assert on_key(state, "k", **{**kw, "rows": 0})[1] is Action.NONE
    assert on_key(state, "q", **kw)[1] is Action.QUIT
    assert on_key(state, "x", **kw) == (state, Action.NONE)


def test_frame_lists_every_node_and_job_for_the_filters() -> None:
    frame = build_frame([_view("n1"), _view("n2")], TASKS, node="n1")
    assert frame.node_ids == ["n1", "n2"] and frame.jobs == ["j1"]
    assert [n["node_id"] for n in frame.nodes] == ["n1"]
