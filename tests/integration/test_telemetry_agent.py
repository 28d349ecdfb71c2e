"""The node's telemetry agent turns span spools into OTLP JSON lines on its own."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import psutil

from tracedray.api.calls import current_session_dir


def _execute_task_ids(traces_dir: Path) -> set[str]:
    """Task ids of the task.execute spans in the JSON lines files, read as a log
    shipper would: the files alone, no conversion by the reader."""
    found = set()
    for path in traces_dir.glob("worker-*.jsonl"):
        for line in path.read_text().splitlines():
            for entry in json.loads(line)["resourceSpans"]:
                for scope in entry["scopeSpans"]:
                    for span in scope["spans"]:
                        if span["name"] == "task.execute":
                            found.update(item["value"]["stringValue"]
                                         for item in span.get("attributes", ())
                                         if item["key"] == "tracedray.task.id")
    return found


def _agents() -> list[psutil.Process]:
    return [child for child in psutil.Process().children(recursive=True)
            if "tracedray.core.raylet.telemetry_agent" in " ".join(child.cmdline())]


def test_spans_reach_the_json_files_without_a_reader_and_the_agent_stops_with_the_node(
        no_leaks: None) -> None:
    import tracedray

    @tracedray.remote
    def work(number: int) -> int:
        return number * 2

    tracedray.init(num_cpus=2, object_store_memory=128 << 20)
    try:
        session_dir = Path(current_session_dir())
        (agent,) = _agents()
        assert agent.nice() == 19  # it yields every core to the tasks
        if hasattr(os, "SCHED_IDLE"):  # and, on Linux, runs only when a core is idle
            assert os.sched_getscheduler(agent.pid) == os.SCHED_IDLE
        refs = [work.remote(n) for n in range(20)]
        assert tracedray.get(refs) == [n * 2 for n in range(20)]
        wanted = {ref.task_id().hex() for ref in refs}
        deadline = time.monotonic() + 30
        while not wanted <= _execute_task_ids(session_dir / "traces"):
            assert time.monotonic() < deadline, "the agent did not convert the spools"
            time.sleep(0.2)
    finally:
        tracedray.shutdown()
    assert not _agents()
    # Processes that exited cleanly leave no spool: their spans are all in the lines.
    leftovers = [p.name for p in (session_dir / "traces").glob("*.spool")
                 if not p.name.startswith("driver-")]
    assert leftovers == []
    stops: list[dict[str, Any]] = [
        json.loads(line) for path in (session_dir / "logs").glob("agent-*.jsonl")
        for line in path.read_text().splitlines() if '"telemetry.agent_stop"' in line]
    assert len(stops) == 1 and stops[0]["spans_converted"] > 0
