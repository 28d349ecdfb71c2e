"""Pure row building, filtering, limits and summaries of the state API."""

from __future__ import annotations

import pytest

from tracedray._proto.v1 import common_pb2, core_worker_pb2, gcs_pb2, raylet_pb2
from tracedray.core.protocol import state_rows as rows
from tracedray.exceptions import ConfigError


def _table(component: str, pid: int,
           *refs: core_worker_pb2.ReferenceRow) -> core_worker_pb2.ReferenceTable:
    return core_worker_pb2.ReferenceTable(
        address=common_pb2.Address(ip="10.0.0.1", pid=pid), component=component, ip="10.0.0.1",
        rows=list(refs))


def test_borrowed_rows_take_size_and_status_from_the_owner() -> None:
    oid = bytes.fromhex("ab" * 20)
    owner = _table("driver", 1, core_worker_pb2.ReferenceRow(
        object_id=oid, reference_type="LOCAL_REFERENCE", size=500, call_site="a.py:3 in f",
        task_status="FINISHED", node_id="n1"))
    borrower = _table("worker", 2, core_worker_pb2.ReferenceRow(
        object_id=oid, reference_type="LOCAL_REFERENCE", size=-1, call_site="a.py:3 in f",
        node_id="n1"))
    out = rows.memory_rows([borrower, owner])
    assert [(r["pid"], r["type"], r["size"], r["status"]) for r in out] == [
        (2, "worker", 500, "FINISHED"), (1, "driver", 500, "FINISHED")]
    assert set(out[0]) == set(rows.MEMORY_FIELDS)


def test_size_falls_back_to_the_store_and_then_unknown() -> None:
    known, unknown = bytes.fromhex("01" * 20), bytes.fromhex("02" * 20)
    table = _table("worker", 2,
                   core_worker_pb2.ReferenceRow(object_id=known, size=-1),
                   core_worker_pb2.ReferenceRow(object_id=unknown, size=-1))
    stored = [raylet_pb2.StoredObjectRow(object_id=known, size=77)]
    assert [r["size"] for r in rows.memory_rows([table], stored)] == [77, -1]


def test_filters_equal_not_equal_case_insensitive_and_unknown_keys() -> None:
    data = [{"state": "RUNNING", "name": "f"}, {"state": "FINISHED", "name": "g"}]
    fields = ("state", "name")
    assert rows.apply_filters(data, ["state=running"], fields) == [data[0]]
    assert rows.apply_filters(data, ["state!=RUNNING"], fields) == [data[1]]
    assert rows.apply_filters(data, ["state=RUNNING", "name=g"], fields) == []
    with pytest.raises(ConfigError, match="cannot filter on 'colour'"):
        rows.apply_filters(data, ["colour=red"], fields)
    with pytest.raises(ConfigError, match="key=value"):
        rows.parse_filter("state")


def test_limit_counts_what_it_leaves_out() -> None:
    limited = rows.limit_rows([{"i": i} for i in range(5)], 2)
    assert len(limited) == 2 and limited.total == 5 and limited.left_out == 3
    unlimited = rows.limit_rows([{"i": i} for i in range(5)], None)
    assert len(unlimited) == 5 and unlimited.left_out == 0
    with pytest.raises(ConfigError):
        rows.limit_rows([], -1)


def test_summarize_tasks_groups_by_function_with_state_counts() -> None:
    records = [gcs_pb2.TaskRecord(task_id=bytes([i]), function_name=name, state=state,
                                  kind="NORMAL_TASK", error_type=error)
               for i, (name, state, error) in enumerate([
                   ("f", "FINISHED", ""), ("f", "FAILED", "OWNER_DIED"),
                   ("f", "FINISHED", "WorkerCrashedError"),  # retried, then finished
                   ("f", "FAILED", "OWNER_DIED"), ("g", "RUNNING", "")])]
    summary = rows.summarize_tasks(rows.task_row(r) for r in records)
    assert summary == [
        {"func_or_class_name": "f", "type": "NORMAL_TASK", "total": 4,
         "state_counts": {"FAILED": 2, "FINISHED": 2}, "error_type_counts": {"OWNER_DIED": 2}},
        {"func_or_class_name": "g", "type": "NORMAL_TASK", "total": 1,
         "state_counts": {"RUNNING": 1}, "error_type_counts": {}}]


def test_summarize_objects_counts_each_object_once_per_call_site() -> None:
    def ref(site: str, oid: str, size: int, kind: str) -> dict[str, object]:
        return {"call_site": site, "object_ref": oid, "size": size, "reference_type": kind}

    data = [ref("a.py:1", "x", 10, "LOCAL_REFERENCE"), ref("a.py:1", "x", 10, "PINNED_IN_MEMORY"),
            ref("b.py:2", "y", 99, "LOCAL_REFERENCE")]
    summary = rows.summarize_objects(data)
    assert [(s["call_site"], s["objects"], s["references"], s["total_size"]) for s in summary] == [
        ("b.py:2", 1, 1, 99), ("a.py:1", 1, 2, 10)]


def test_dead_node_row_keeps_pid_from_registration() -> None:
    info = gcs_pb2.NodeInfo(node_id="n1", state="DEAD", death_reason="no heartbeat",
                            raylet=common_pb2.Address(ip="10.0.0.2", port=5, pid=4242),
                            resources_total={"CPU": 2.0})
    row = rows.node_row(gcs_pb2.NodeWithLoad(info=info), None)
    assert (row["state"], row["pid"], row["ip"], row["resources"]) == (
        "DEAD", 4242, "10.0.0.2", {"CPU": 2.0})


def test_get_tasks_event_lines_say_where_and_the_gcss_verdict() -> None:
    from tracedray.cli.commands.state import _event_line

    ran = {"state": "RUNNING", "time": 1.0, "attempt": 0, "node_id": "1a2b3c4d5e6f7a8b",
           "worker_pid": 4242, "error_type": ""}
    assert _event_line(ran).endswith(" RUNNING (attempt 0, node 1a2b3c4d5e6f, pid 4242)")
    verdict = {"state": "FAILED", "time": 2.0, "attempt": 0, "node_id": "", "worker_pid": 0,
               "error_type": "OWNER_DIED"}
    assert _event_line(verdict).endswith(" FAILED (attempt 0) OWNER_DIED")


def test_a_tasks_detail_lists_every_state_its_events_carry_in_time_order() -> None:
    # The caller's first state; its worker's event with the dispatch, start and failure.
    first = gcs_pb2.TaskEvent(state="PENDING_ARGS_AVAIL", time=1.0)
    first.state_times["PENDING_ARGS_AVAIL"] = 1.0
    worker = gcs_pb2.TaskEvent(state="FAILED", time=4.0, node_id="n", worker_pid=7,
                               error_type="ValueError")
    for state, at in (("SUBMITTED_TO_WORKER", 2.0), ("RUNNING", 3.0), ("FAILED", 4.0)):
        worker.state_times[state] = at
    bare = gcs_pb2.TaskEvent(state="SLOW", time=3.5)  # an event without state_times
    again = gcs_pb2.TaskEvent(state="SUBMITTED_TO_WORKER", time=2.0, node_id="n",
                              worker_pid=7)  # the caller's copy of the worker's report
    again.state_times["SUBMITTED_TO_WORKER"] = 2.0
    record = gcs_pb2.TaskRecord(state="FAILED", events=[worker, first, bare, again])
    listed = rows.task_row(record, detail=True)["events"]
    assert [(e["state"], e["time"]) for e in listed] == [
        ("PENDING_ARGS_AVAIL", 1.0), ("SUBMITTED_TO_WORKER", 2.0), ("RUNNING", 3.0),
        ("SLOW", 3.5), ("FAILED", 4.0)]
    assert [e["error_type"] for e in listed] == ["", "", "", "", "ValueError"]
    assert listed[1]["worker_pid"] == 7 and listed[1]["node_id"] == "n"
