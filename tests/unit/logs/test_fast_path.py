"""The cheap log-line path keeps the slow path's output: precedence, odd values, timestamps."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from tracedray import logs
from tracedray.logs import _processors


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
