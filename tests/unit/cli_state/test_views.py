"""memory grouping/sorting, log selection and formatting, `tracedray stop` process selection."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracedray.cli import local_nodes, log_view, memory_view
from tracedray.cli.output import format_bytes
from tracedray.cli.tracestore.logs import LogRecord
from tracedray.exceptions import ConfigError

ROWS = [
    {"pid": 2, "object_ref": "b", "size": 10, "reference_type": "PINNED_IN_MEMORY",
     "node_id": "n1", "call_site": "x.py:1"},
    {"pid": 1, "object_ref": "a", "size": 30, "reference_type": "USED_BY_PENDING_TASK",
     "node_id": "n2", "call_site": "x.py:1"},
    {"pid": 1, "object_ref": "c", "size": 20, "reference_type": "LOCAL_REFERENCE",
     "node_id": "n1", "call_site": "y.py:2"},
]


def test_sort_orders() -> None:
    assert [r["object_ref"] for r in memory_view.sort_rows(ROWS, "pid")] == ["a", "c", "b"]
    assert [r["object_ref"] for r in memory_view.sort_rows(ROWS, "size")] == ["a", "c", "b"]
    assert [r["reference_type"] for r in memory_view.sort_rows(ROWS, "reference-type")] == [
        "LOCAL_REFERENCE", "PINNED_IN_MEMORY", "USED_BY_PENDING_TASK"]
    with pytest.raises(ConfigError):
        memory_view.sort_rows(ROWS, "colour")


def test_group_by_call_site_sums_distinct_objects() -> None:
    groups = memory_view.group_rows(ROWS + [dict(ROWS[0], pid=9)], "stack-trace")
    first = groups[0]
    assert first.key == "x.py:1" and first.object_bytes == 40 and len(first.rows) == 3
    assert dict(first.reference_counts)["PINNED_IN_MEMORY"] == 2
    assert [g.key for g in memory_view.group_rows(ROWS, "node")] == ["n1", "n2"]


def test_units() -> None:
    assert memory_view.check_units("mb") == "MB"
    assert format_bytes(3 << 20, "MB") == "3.00 MB" and format_bytes(5, "B") == "5 B"
    with pytest.raises(ConfigError):
        memory_view.check_units("TB")


def _record(level: str, **fields: object) -> LogRecord:
    event = str(fields.pop("event", "x"))
    return LogRecord(time_ns=1_700_000_000 * 10**9, level=level, event=event,
                     fields={"level": level, **fields})


def test_log_filter_level_node_prefix_pid_task() -> None:
    records = [_record("info", pid=1, node_id="abcdef", task_id="T1"),
               _record("error", pid=2, node_id="fedcba", task_id="T2")]
    assert log_view.select(records, log_view.LogFilter(min_level="warning")) == [records[1]]
    assert log_view.select(records, log_view.LogFilter(node_id="abc")) == [records[0]]
    assert log_view.select(records, log_view.LogFilter(pid=2)) == [records[1]]
    assert log_view.select(records, log_view.LogFilter(task_id="t1")) == [records[0]]
    assert log_view.tail(records, 1) == [records[1]] and log_view.tail(records, 0) == []
    with pytest.raises(ConfigError):
        log_view.LogFilter(min_level="loud")


def test_pretty_shows_printed_text_and_task() -> None:
    line = log_view.format_pretty(_record("info", event="task.output", component="worker", pid=7,
                                          task_name="m.f", attempt=1, stream="stderr",
                                          line="hello"))
    assert line.endswith("worker pid=7 task=m.f#1 | [stderr] hello")
    other = log_view.format_pretty(_record("warning", event="node.dead", reason="no heartbeat"))
    assert "node.dead reason='no heartbeat'" in other and "WARNING" in other


def _argv(module: str, session: Path, parent: int, node: str = "") -> list[str]:
    argv = ["python", "-m", module, "--session-dir", str(session), "--parent-pid", str(parent)]
    return argv + (["--node-id", node] if node else [])


def test_stop_selects_detached_nodes_under_the_root_in_order(tmp_path: Path) -> None:
    mine, drivers, other = tmp_path / "session_2a", tmp_path / "session_2b", Path("/elsewhere/s")
    parsed = [local_nodes.parse_cmdline(pid, argv) for pid, argv in [
        (10, _argv("tracedray.core.gcs.main", mine, 0)),
        (11, _argv("tracedray.core.raylet.main", mine, 0, "node1234abcd")),
        (12, _argv("tracedray.api.worker_main", mine, 11)),
        (13, _argv("tracedray.core.gcs.main", mine, 11)),  # restarted by its raylet
        (20, _argv("tracedray.core.raylet.main", drivers, 999)),  # a driver's private cluster
        (30, _argv("tracedray.core.raylet.main", other, 0)),  # another temp root
        (40, ["python", "-m", "http.server"]),
    ]]
    processes = [p for p in parsed if p is not None]
    assert len(processes) == 6
    chosen = local_nodes.select_to_stop(processes, tmp_path)
    assert [(p.pid, p.component) for p in chosen] == [(11, "raylet"), (12, "worker"), (10, "gcs"),
                                                    (13, "gcs")]
    everything = local_nodes.select_to_stop(processes, tmp_path, include_drivers_clusters=True)
    assert 20 in {p.pid for p in everything} and 30 not in {p.pid for p in everything}
    assert local_nodes.shm_prefixes(chosen) == {"tracedray-session_2a-node1234"}
