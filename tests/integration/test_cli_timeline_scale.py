"""`tracedray timeline` at scale (issue 24, item 5): --since/--until read the index's
lines of that time, --job/--node keep one job's traces or one node's spans, the JSON is
streamed, and --output X.perfetto-trace writes Perfetto's protobuf format, which decodes
into well-nested slices and flows. An unindexed copy gives the same answer."""

from __future__ import annotations

import json
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tracedray._proto.v1 import perfetto_trace_pb2 as pb
from tracedray.cli.app import app
from tracedray.cli.tracestore.sources import SessionFileSource
from tracedray.cli.tracestore.timeline_filter import parse_moment
from tracedray.core.session import SessionPaths
from tracedray.telemetry.otlp_json import trace_files
from tracedray.telemetry.spool_convert import sync_traces_dir
from tracedray.telemetry.trace_index import INDEX_NAME


def _cli(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


def _executed(document: dict[str, Any]) -> set[str]:
    return {e["args"]["tracedray.task.id"] for e in document["traceEvents"]
            if e.get("name") == "task.execute"}


def _batch(ray: Any, session: SessionPaths, work: Any, base: int) -> set[str]:
    refs = [work.remote(base + i) for i in range(4)]
    ray.get(refs)
    ray.api.calls.global_worker().flush_background_work()
    sync_traces_dir(session.traces_dir)  # a line of their own, as the agent writes them
    return {ref.task_id().hex() for ref in refs}


def test_window_job_node_and_perfetto(ray: Any, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    session: SessionPaths = ray.api.calls._require_cluster().session
    address = ray.api.calls._require_cluster().gcs_address

    @ray.remote
    def work(i: int) -> int:
        return i

    early = _batch(ray, session, work, 0)
    time.sleep(1.5)  # beyond the window's margin for other nodes' clocks (1 s)
    middle = datetime.now(timezone.utc).isoformat()
    late = _batch(ray, session, work, 100)

    whole = json.loads(_cli("timeline", "--output", "-", "--address", address).stdout)
    assert early | late <= _executed(whole)
    recent = json.loads(_cli("timeline", "--since", middle, "--output", "-",
                             "--address", address).stdout)
    assert late <= _executed(recent) and not early & _executed(recent)
    source = SessionFileSource(session)  # the window's lines alone, through the index
    source.spans_in_window(parse_moment(middle, 0), None)
    assert source.used_index
    assert source.lines_parsed < sum(len(p.read_bytes().splitlines())
                                     for p in trace_files(session.traces_dir))
    before = json.loads(_cli("timeline", "--until", middle, "--output", "-",
                             "--address", address).stdout)
    assert early <= _executed(before) and not late & _executed(before)

    job = next(e["args"]["tracedray.job.id"] for e in whole["traceEvents"]
               if e.get("name") == "task.submit")
    assert early | late <= _executed(json.loads(_cli(
        "timeline", "--job", job[:4], "--output", "-", "--address", address).stdout))
    other_job = "f" * 8 if not job.startswith("f") else "0" * 8
    assert not _executed(json.loads(_cli("timeline", "--job", other_job, "--output", "-",
                                         "--address", address).stdout))
    node = next(e["args"]["tracedray.node.id"] for e in whole["traceEvents"]
                if "tracedray.node.id" in e.get("args", {}))
    assert late <= _executed(json.loads(_cli("timeline", "--node", node[:8], "--output", "-",
                                             "--address", address).stdout))

    # Perfetto's protobuf: slices begin and end in pairs that nest on each track, every
    # flow that ends was started, and every task of the window is there.
    out = tmp_path / "t.perfetto-trace"
    said = _cli("timeline", "--since", middle, "--output", str(out), "--address", address)
    assert "packets" in said.stderr
    trace = pb.Trace.FromString(out.read_bytes())
    tracks = {p.track_descriptor.uuid for p in trace.packet if p.HasField("track_descriptor")}
    open_slices: dict[int, list[str]] = {}
    started: set[int] = set()
    ended: set[int] = set()
    executed: set[str] = set()
    last = 0
    for packet in trace.packet:
        if not packet.HasField("track_event"):
            continue
        event = packet.track_event
        assert event.track_uuid in tracks and packet.timestamp >= last
        last = packet.timestamp
        stack = open_slices.setdefault(event.track_uuid, [])
        if event.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            stack.append(event.name)
            started.update(event.flow_ids)
            ended.update(event.terminating_flow_ids)
            if event.name == "task.execute":
                executed.update(a.string_value for a in event.debug_annotations
                                if a.name == "tracedray.task.id")
        else:
            assert event.type == pb.TrackEvent.TYPE_SLICE_END and stack
            stack.pop()
    assert not any(open_slices.values())
    assert ended and ended <= started
    assert executed == _executed(recent)

    # A copy without the index: every file read, the same window.
    copy = tmp_path / "copy" / session.root.name
    shutil.copytree(session.root, copy, ignore=shutil.ignore_patterns(f"{INDEX_NAME}*"))
    monkeypatch.setenv("TRACEDRAY_TEMP_DIR", str(copy.parent))
    scanned = _cli("timeline", "--since", middle, "--output", "-", "--address", address)
    assert "no trace index" in scanned.stderr
    assert _executed(json.loads(scanned.stdout)) == _executed(recent)
