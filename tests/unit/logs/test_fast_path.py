"""The cheap log-line path keeps the slow path's output: precedence, odd values, timestamps."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tracedray import logs
from tracedray.logs import _processors
from tracedray.telemetry.append_file import read_data


def test_precedence_call_then_task_then_process_then_static(tmp_path: Path, read_log) -> None:
    logs.configure("worker", session_dir=tmp_path, node_id="static-node")
    log = logs.get_logger("test")
    log.info("a")
    logs.set_process_context(node_id="process-node", worker_id="w1")
    log.info("b")
    with logs.task_context(task_id="t1", worker_id="w-task"):
        log.info("c", node_id="call-node")
    logs.set_process_context(node_id="", worker_id="")
    log.info("d")
    lines = {line["event"]: line for line in read_log(tmp_path)}
    assert lines["a"]["node_id"] == "static-node" and "worker_id" not in lines["a"]
    assert lines["b"]["node_id"] == "process-node" and lines["b"]["worker_id"] == "w1"
    assert lines["c"]["node_id"] == "call-node" and lines["c"]["worker_id"] == "w-task"
    assert lines["d"]["node_id"] == "static-node" and "worker_id" not in lines["d"]
    assert list(lines["b"])[:4] == ["timestamp", "level", "event", "component"]


@pytest.mark.parametrize("value", ["lone \udc80 surrogate", 1 << 80, {1: "int key"},
                                   Path("/x"), {"nested": ("a", 1.5)}])
def test_values_orjson_refuses_still_make_a_valid_line(value: object) -> None:
    rendered = _processors.render_json(None, "info", {"event": "e", "value": value})
    assert isinstance(rendered, bytes)
    record = json.loads(rendered.decode("utf-8", "surrogateescape"))
    assert record["event"] == "e" and "value" in record


def test_timestamp_cache_changes_with_the_second() -> None:
    first = _processors.utc_timestamp(1_800_000_000.25)
    same_second = _processors.utc_timestamp(1_800_000_000.75)
    next_second = _processors.utc_timestamp(1_800_000_001.5)
    assert first == "2027-01-15T08:00:00.250000Z"
    assert same_second == "2027-01-15T08:00:00.750000Z"
    assert next_second == "2027-01-15T08:00:01.500000Z"
    parsed = datetime.fromisoformat(next_second.replace("Z", "+00:00"))
    assert parsed == datetime.fromtimestamp(1_800_000_001.5, timezone.utc)


def _reference_order(event_dict: dict[str, object]) -> list[str]:
    """The written order, by its definition: the leading fields there are, in their
    order, then the rest in the order they came."""
    leading = [key for key in _processors.LEADING_FIELDS if key in event_dict]
    return leading + [key for key in event_dict if key not in leading]


@pytest.mark.parametrize("events", [
    # the same keys again (the cached template), then in another order, then others
    [{"event": "a", "zeta": 1, "timestamp": "t", "level": "info", "pid": 1},
     {"event": "b", "zeta": 2, "timestamp": "u", "level": "warning", "pid": 2},
     {"zeta": 3, "pid": 3, "event": "c", "level": "error", "timestamp": "v"},
     {"event": "d"},
     {"event": "e", "x": 1, "y": 2, "level": "info"},
     {"y": 2, "x": 1, "level": "info", "event": "f"},
     {"alpha": [1, 2], "event": "g", "trace_id": "1" * 32, "task_id": "t1", "beta": None}],
])
def test_lines_are_written_leading_fields_first_whatever_came_before(
        events: list[dict[str, object]]) -> None:
    for event_dict in events:
        before = list(event_dict.items())
        record = json.loads(_processors.render_json(None, "info", event_dict))
        assert list(record) == _reference_order(event_dict)
        assert record == dict(before)  # every value, its own
        assert list(event_dict.items()) == before  # the caller's dict is left alone


def test_the_order_cache_is_bounded_and_still_right_after_it_is_cleared() -> None:
    for index in range(_processors.MAX_TEMPLATES + 5):
        event_dict = {f"key{index}": index, "event": "e", "level": "info"}
        record = json.loads(_processors.render_json(None, "info", event_dict))
        assert list(record) == ["level", "event", f"key{index}"]
        assert record[f"key{index}"] == index
        assert len(_processors._TEMPLATES) <= _processors.MAX_TEMPLATES


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_logs_its_own_pid(tmp_path: Path) -> None:
    logs.configure("worker", session_dir=tmp_path)
    log = logs.get_logger("test")
    log.info("parent")
    child = os.fork()
    if child == 0:  # the child logs before anything reconfigures it
        try:
            log.info("child")
        finally:
            os._exit(0)
    os.waitpid(child, 0)
    log.info("parent again")
    # the child's lines go to a file of its own (append_file.py), the parent's stay
    pids = {(path.name, line["event"]): line["pid"]
            for path in (tmp_path / "logs").glob("*.jsonl")
            for line in map(json.loads, read_data(path).decode().splitlines())}
    parent_file = f"worker-{os.getpid()}.jsonl"
    assert pids[(parent_file, "parent")] == pids[(parent_file, "parent again")] == os.getpid()
    assert [pid for (name, event), pid in pids.items() if event == "child"] == [child]
