"""The session's trace index on a real cluster (issue 24): the telemetry agent keeps it,
`trace` and `logs --task` read only the lines it names, a unique prefix stands for a
task id, and a copy of the session without the index gives the same answers, saying on
stderr that it read every file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tracedray.cli.app import app
from tracedray.cli.tracestore.sources import SessionFileSource, SpanQuery
from tracedray.core.session import SessionPaths
from tracedray.telemetry.otlp_json import trace_files
from tracedray.telemetry.spool_convert import sync_traces_dir
from tracedray.telemetry.trace_index import INDEX_NAME

BATCHES = 6


def _cli(*args: str, code: int = 0) -> Any:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, result.output
    return result


def _session(ray: Any) -> SessionPaths:
    return ray.api.calls._require_cluster().session


def _run_batches(ray: Any, session: SessionPaths) -> list[str]:
    """Tasks in batches, each batch's spans converted to lines of their own (as the agent
    does every half second), so the session has many lines; returns one task id per
    batch."""

    @ray.remote
    def work(i: int) -> int:
        print("working on", i)
        return i

    picked = []
    for batch in range(BATCHES):
        refs = [work.remote(batch * 100 + i) for i in range(8)]
        assert ray.get(refs) == [batch * 100 + i for i in range(8)]
        ray.api.calls.global_worker().flush_background_work()
        sync_traces_dir(session.traces_dir)
        picked.append(refs[3].task_id().hex())
    return picked


def _trace_lines(session: SessionPaths) -> int:
    return sum(len(path.read_bytes().splitlines()) for path in trace_files(session.traces_dir))


def test_trace_reads_only_the_lines_the_index_names(ray: Any, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    session = _session(ray)
    assert (session.root / INDEX_NAME).exists()  # made before the agent's first round
    picked = _run_batches(ray, session)
    task_id = picked[2]
    source = SessionFileSource(session)
    batch = source.find_spans(SpanQuery(task_id=task_id))
    assert source.used_index
    assert {span.name for span in batch.spans} >= {"task.submit", "task.execute"}
    indexed_lines = source.lines_parsed
    total = _trace_lines(session)
    assert total >= 2 * BATCHES  # the driver's and a worker's line per batch at least
    assert indexed_lines <= 4, (indexed_lines, total)

    story = json.loads(_cli("trace", task_id[:12], "--format", "json").stdout)
    assert story["task_id"] == task_id and story["final_state"] == "FINISHED"
    out = _cli("logs", "--task", task_id[:12]).stdout
    assert f"working on {200 + 3}" in out and "working on 3\n" not in out

    # The same session copied without its index: the same answers, from every file.
    copy = tmp_path / session.root.name
    shutil.copytree(session.root, copy, ignore=shutil.ignore_patterns(f"{INDEX_NAME}*"))
    scanning = SessionFileSource(SessionPaths(copy))
    scanned = scanning.find_spans(SpanQuery(task_id=task_id))
    assert not scanning.used_index and scanning.lines_parsed >= total  # spans keep coming
    assert "no trace index" in scanned.warnings[0]
    ours = sorted(s.span_id for s in scanned.spans if s.get("tracedray.task.id") == task_id)
    assert ours == sorted(s.span_id for s in batch.spans)  # a scan returns every span
    address = ray.api.calls._require_cluster().gcs_address
    indexed_story = _cli("trace", task_id, "--format", "json", "--address", address).stdout
    indexed_logs = _cli("logs", "--task", task_id, "--address", address).stdout
    indexed_timeline = json.loads(_cli("timeline", "--task", task_id[:12], "--output", "-",
                                       "--address", address).stdout)
    assert any(e.get("args", {}).get("tracedray.task.id") == task_id
               for e in indexed_timeline["traceEvents"])
    with monkeypatch.context() as patch:  # the copy is the session found for the address
        patch.setenv("TRACEDRAY_TEMP_DIR", str(tmp_path))
        traced = _cli("trace", task_id, "--format", "json", "--address", address)
        assert traced.stdout == indexed_story
        assert "no trace index" in traced.stderr
        logged = _cli("logs", "--task", task_id, "--address", address)
        assert logged.stdout == indexed_logs
        assert "no trace index" in logged.stderr
        scanned_timeline = json.loads(_cli("timeline", "--task", task_id, "--output", "-",
                                           "--address", address).stdout)
        assert len(scanned_timeline["traceEvents"]) == len(indexed_timeline["traceEvents"])


def test_a_node_sends_only_the_lines_asked_for(ray: Any) -> None:
    """What `logs --task` asks of a node on another machine: the task's and the clock
    lines, found through that node's index, not its whole files."""
    from tracedray.core.cluster_client import connect_cluster
    from tracedray.core.protocol.raylet_client import RayletClient
    from tracedray.telemetry.trace_index import CLOCK_KEY, key

    session = _session(ray)
    task_id = _run_batches(ray, session)[4]
    (node,) = connect_cluster(ray.api.calls._require_cluster().gcs_address).nodes()
    raylet = RayletClient(f"{node.info.raylet.ip}:{node.info.raylet.port}")
    chunks = list(raylet.read_session_files("logs", [key("task", task_id), CLOCK_KEY]))
    lines = [json.loads(line) for chunk in chunks for line in chunk.data.splitlines()]
    assert any("working on 403" in json.dumps(line) for line in lines)
    ours = [line for line in lines if line.get("task_id") == task_id]
    assert len(ours) >= 2  # its submit, its execution, what it printed
    others = [line for line in lines if line.get("task_id") not in (None, "", task_id)]
    assert not others, others[:3]
    everything = sum(len(c.data) for c in raylet.read_session_files("logs"))
    assert sum(len(c.data) for c in chunks) < everything / 4
