"""Moving every node's records onto the head's clock before merging (tracestore.clock),
with fabricated records whose skews are known, and the raylet's reporting rule."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from typer.testing import CliRunner

from tracedray.cli.app import app
from tracedray.cli.log_view import format_pretty, record_json
from tracedray.cli.tracestore.chrome_trace import build_chrome_trace
from tracedray.cli.tracestore.clock import (
    ClockEstimate,
    Clocks,
    OffsetTable,
    applied_offsets,
    clock_lines,
    offsets_note,
    table_from_logs,
)
from tracedray.cli.tracestore.logs import LogRecord, format_timestamp_ns, read_logs
from tracedray.cli.tracestore.model import SpanEvent, SpanRecord
from tracedray.cli.tracestore.story import TaskStory, task_story
from tracedray.core.gcs import node_health
from tracedray.core.session import SessionPaths, create_session
from tracedray.exceptions import ConfigError
from tracedray.telemetry import attributes as attr

T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z
MS = 1_000_000
S = 1_000_000_000
HEAD = "a" * 28 + "0001"
B = "b" * 28 + "0002"  # its clock is 2 s ahead of the head's
SKEW_S = 2.0
TASK = "c0ffee00" * 3
TRACE = "1234567890abcdef1234567890abcdef"


def line(at_ns: int, event: str, *, node: str, host: str = "head", pid: int = 1,
         **fields: Any) -> LogRecord:
    data = {"timestamp": format_timestamp_ns(at_ns), "level": "info", "event": event,
            "host": host, "pid": pid, "node_id": node, **fields}
    return LogRecord(at_ns, "info", event, MappingProxyType(data), source=f"x-{pid}.jsonl")


def offset_line(at_ns: int, node: str, offset_s: float, rtt_s: float = 0.001) -> LogRecord:
    """What a raylet (pid 9 on node b's host, 5 on the head) logs for its estimate."""
    host, pid = ("head", 5) if node == HEAD else ("host-b", 9)
    return line(at_ns, "node.clock_offset", node=node, host=host, pid=pid,
                offset_s=offset_s, rtt_s=rtt_s)


def span(name: str, start_ns: int, end_ns: int, *, node: str, host: str = "head",
         pid: int = 1, component: str = "worker", **attributes: Any) -> SpanRecord:
    resource = {attr.RESOURCE_NODE_ID: node, "host.name": host, "process.pid": pid,
                attr.RESOURCE_COMPONENT: component}
    return SpanRecord(TRACE, f"{abs(hash((name, start_ns))) % 2**63:016x}", "", name,
                      start_ns, end_ns, MappingProxyType(attributes),
                      resource=MappingProxyType(resource))


# --- the raylet's side: when to log an estimate, the test-only skew


def test_an_estimate_is_logged_first_and_then_only_when_it_moved_beyond_its_bound() -> None:
    assert node_health.report_due(None, (0.0001, 0.0004))
    # Within 1 ms (and within half the logged round trip): not again.
    assert not node_health.report_due((0.0001, 0.0004), (0.0008, 0.0002))
    assert node_health.report_due((0.0001, 0.0004), (0.0025, 0.0002))
    # A slow network's estimate wobbles within its error bound (rtt / 2) without a line.
    assert not node_health.report_due((0.5, 0.080), (0.53, 0.070))
    assert node_health.report_due((0.5, 0.080), (0.55, 0.070))


def test_the_testing_skew_is_added_to_the_measured_offset_only() -> None:
    assert node_health.with_skew((0.001, 0.0004), 2.0) == (2.001, 0.0004)
    assert node_health.TESTING_CLOCK_SKEW_S.get({}) == 0.0
    assert node_health.TESTING_CLOCK_SKEW_S.get({"TRACEDRAY_TESTING_CLOCK_SKEW_S": "-1.5"}) == -1.5
    for bad in ("two", "nan", "inf"):
        with pytest.raises(ConfigError, match="TRACEDRAY_TESTING_CLOCK_SKEW_S"):
            node_health.TESTING_CLOCK_SKEW_S.get({"TRACEDRAY_TESTING_CLOCK_SKEW_S": bad})


def test_offset_sign_matches_node_health() -> None:
    # A node 2 s ahead: sent at 102.0, received at 102.2 (its clock), head read 100.1.
    offset, rtt = node_health.clock_offset(102.0, 102.2, 100.1)
    assert math.isclose(offset, 2.0) and math.isclose(rtt, 0.2)
    clocks = Clocks(OffsetTable({B: (ClockEstimate(0, round(offset * S), round(rtt * S)),)}))
    (moved,) = clocks.logs([line(102 * S, "x", node=B)])
    assert moved.time_ns == 100 * S  # the node's 102.0 is the head's 100.0


# --- the offset table


def test_each_estimate_holds_from_its_line_until_the_next() -> None:
    table, warnings = table_from_logs([offset_line(T0 + 10 * S, B, 2.0),
                                       offset_line(T0 + 20 * S, B, 2.5)])
    assert warnings == ()
    assert table.offset_ns(B, T0) == 2 * S  # before the first estimate: the first one
    assert table.offset_ns(B, T0 + 15 * S) == 2 * S
    assert table.offset_ns(B, T0 + 20 * S) == 2_500_000_000
    assert table.offset_ns(B, T0 + 99 * S) == 2_500_000_000
    assert table.offset_ns(HEAD, T0) == 0 and table.offset_ns("", T0) == 0


def test_an_offset_within_its_error_bound_is_not_applied() -> None:
    # One machine: 40 µs measured over a 300 µs round trip is noise.
    table, _ = table_from_logs([offset_line(T0, HEAD, 0.00004, rtt_s=0.0003)])
    assert table.offset_ns(HEAD, T0) == 0
    clocks = Clocks(table)
    record = line(T0 + S, "x", node=HEAD)
    assert clocks.logs([record]) == [record]


def test_bad_offset_lines_are_skipped_with_a_warning() -> None:
    bad = line(T0, "node.clock_offset", node=B, offset_s="2.0", rtt_s=0.001)
    table, warnings = table_from_logs([bad, offset_line(T0, HEAD, 0.5)])
    assert B not in table.by_node and HEAD in table.by_node
    assert len(warnings) == 1 and "node.clock_offset" in warnings[0]


def test_the_live_gcs_table_fills_in_nodes_without_lines_only() -> None:
    lines = [offset_line(T0, B, 2.0)]
    clocks, _ = Clocks.from_logs(lines, {B: 7.0, "c" * 32: 0.25, HEAD: 0.0})
    assert clocks.table.offset_ns(B, T0) == 2 * S  # its own line wins
    assert clocks.table.offset_ns("c" * 32, T0) == 250 * MS
    assert clocks.table.offset_ns(HEAD, T0) == 0  # 0.0 in the GCS: no estimate yet


def test_offsets_are_read_from_real_log_files(tmp_path: Path) -> None:
    logs_dir = tmp_path / "logs"
    logs_dir.mkdir()
    with open(logs_dir / "raylet-9.jsonl", "w") as handle:
        handle.write(json.dumps(dict(offset_line(T0, B, SKEW_S).fields)) + "\n")
        handle.write('{"timestamp": "2026-01-01T00:00:')  # SIGKILLed mid-line
    table, warnings = table_from_logs(read_logs(logs_dir).records)
    assert warnings == () and table.offset_ns(B, T0 + S) == 2 * S


# --- logs


def test_a_line_of_a_node_ahead_moves_before_the_head_line_that_really_came_later() -> None:
    # Really: b prints at T0 + 1.0 s, then the head logs at T0 + 1.5 s (head clock).
    # b's clock is 2 s ahead, so its line says T0 + 3.0 s and sorts after the head's.
    b_line = line(T0 + 3 * S, "task.output", node=B, host="host-b", pid=7, line="first")
    head_line = line(T0 + 1500 * MS, "lease.granted", node=HEAD, pid=5)
    raw = sorted([b_line, head_line], key=lambda r: r.time_ns)
    assert [r.event for r in raw] == ["lease.granted", "task.output"]

    clocks, _ = Clocks.from_logs([offset_line(T0, B, SKEW_S), *[b_line, head_line]])
    merged = sorted(clocks.logs([b_line, head_line]), key=lambda r: r.time_ns)
    assert [r.event for r in merged] == ["task.output", "lease.granted"]
    moved = merged[0]
    assert moved.time_ns == T0 + S and moved.clock_offset_ns == 2 * S
    assert moved.clock_node_id == B and merged[1].clock_offset_ns == 0
    assert format_pretty(moved).startswith("2026-01-01 00:00:01.000Z")
    data = record_json(moved)
    assert data["timestamp"] == "2026-01-01T00:00:01.000000Z"
    assert data["node_timestamp"] == "2026-01-01T00:00:03.000000Z"
    assert data["clock_offset_s"] == SKEW_S
    assert record_json(merged[1]) == dict(head_line.fields)  # untouched lines stay as written
    assert applied_offsets(merged) == {B: (SKEW_S,)}
    assert offsets_note(applied_offsets(merged)) == (
        f"clock offsets applied (node clock minus head clock): node {B[:12]} +2000.0 ms")


def test_clock_lines_keep_offsets_and_one_node_naming_line_per_process() -> None:
    driver_early = line(T0, "process.start", node="", host="head", pid=100)
    driver_late = line(T0 + S, "driver.connected", node=HEAD, host="head", pid=100)
    later_again = line(T0 + 2 * S, "x", node=HEAD, host="head", pid=100)
    offsets = offset_line(T0, B, SKEW_S)
    assert clock_lines([driver_early, driver_late, later_again, offsets]) == [driver_late,
                                                                               offsets]


# --- spans


def test_a_span_and_its_events_shift_by_its_nodes_offset_keeping_its_duration() -> None:
    execute = span("task.execute", T0 + 3 * S, T0 + 3 * S + 40 * MS, node=B, host="host-b",
                   pid=7)
    execute = dataclasses.replace(execute,
                                  events=(SpanEvent("exception", T0 + 3 * S + 39 * MS),))
    schedule = span("task.schedule", T0 + 500 * MS, T0 + 501 * MS, node=HEAD, pid=5,
                    component="raylet")
    clocks, _ = Clocks.from_logs([offset_line(T0, B, SKEW_S), offset_line(T0, HEAD, 0.0)])
    moved, same = clocks.spans([execute, schedule])
    assert (moved.start_ns, moved.end_ns) == (T0 + S, T0 + S + 40 * MS)
    assert moved.duration_ns == execute.duration_ns
    assert moved.events[0].time_ns == T0 + S + 39 * MS
    assert moved.clock_offset_ns == 2 * S and moved.clock_node_id == B
    assert same == schedule


def test_a_driver_span_without_a_node_id_goes_by_its_processes_log_lines() -> None:
    # A driver on node b: its spans' resource has no node id, its log lines name b.
    submit = span("task.submit", T0 + 3 * S, T0 + 3 * S + MS, node="", host="host-b",
                  pid=100, component="driver")
    gcs = span("gcs.register", T0 + S, T0 + S + MS, node="", host="head", pid=3,
               component="gcs")
    lines = [offset_line(T0, B, SKEW_S),
             line(T0, "driver.connected", node=B, host="host-b", pid=100)]
    clocks, _ = Clocks.from_logs(lines)
    moved, gcs_span = clocks.spans([submit, gcs])
    assert moved.start_ns == T0 + S and moved.clock_node_id == B
    assert gcs_span == gcs  # no node: the head's process, its clock is the reference
    early = line(T0 + 3 * S, "process.start", node="", host="host-b", pid=100)
    assert clocks.logs([early])[0].time_ns == T0 + S


def test_a_task_story_is_told_in_head_clock_order() -> None:
    # Really: submit at 0 (head), execute 10..30 ms on b, whose clock is 2 s ahead, and
    # the driver's dispatch ends at 35 ms. Uncorrected, b's print comes after the end.
    common: dict[str, Any] = {attr.TASK_ID: TASK, attr.TASK_ATTEMPT: 0}
    spans = [span("task.submit", T0, T0 + 35 * MS, node=HEAD, pid=100, component="driver",
                  **{attr.TASK_ID: TASK}),
             span("task.dispatch", T0 + 2 * MS, T0 + 35 * MS, node=HEAD, pid=100,
                  component="driver", **common),
             span("task.execute", T0 + 2 * S + 10 * MS, T0 + 2 * S + 30 * MS, node=B,
                  host="host-b", pid=7, **common)]
    output = line(T0 + 2 * S + 20 * MS, "task.output", node=B, host="host-b", pid=7,
                  task_id=TASK, line="hello", stream="stdout")
    clocks, _ = Clocks.from_logs([offset_line(T0, B, SKEW_S)])
    story = task_story(clocks.spans(spans), clocks.logs([output]), TASK)
    assert isinstance(story, TaskStory)
    kinds = [e.kind for e in story.events]
    assert kinds.index("output") < kinds.index("ended")
    started = next(e for e in story.events if e.kind == "started")
    assert started.time_ns == T0 + 10 * MS
    assert story.end_ns - story.start_ns == 35 * MS  # not 2 s: b's spans are on the head's clock
    raw = task_story(spans, [output], TASK)
    assert isinstance(raw, TaskStory) and raw.end_ns - raw.start_ns > 2 * S


def test_the_chrome_trace_says_which_offsets_moved_its_spans() -> None:
    spans = [span("task.execute", T0 + 3 * S, T0 + 3 * S + MS, node=B, host="host-b", pid=7),
             span("task.schedule", T0, T0 + MS, node=HEAD, pid=5, component="raylet")]
    clocks, _ = Clocks.from_logs([offset_line(T0, B, SKEW_S)])
    document = build_chrome_trace(clocks.spans(spans))
    assert document["otherData"]["clock_offsets_s"] == {B: [SKEW_S]}
    slices = {e["name"]: e for e in document["traceEvents"] if e.get("ph") == "X"}
    assert slices["task.execute"]["ts"] == (T0 + S) / 1000
    assert slices["task.execute"]["args"]["clock_offset_s"] == SKEW_S
    assert "clock_offset_s" not in slices["task.schedule"]["args"]
    assert build_chrome_trace(spans)["otherData"]["clock_offsets_s"] == {}


def test_a_note_shows_a_range_when_a_nodes_estimate_changed() -> None:
    clocks, _ = Clocks.from_logs([offset_line(T0, B, 2.0), offset_line(T0 + 10 * S, B, 2.004)])
    moved = clocks.logs([line(T0 + 5 * S, "x", node=B), line(T0 + 15 * S, "y", node=B)])
    assert offsets_note(applied_offsets(moved)).endswith(
        f"node {B[:12]} +2000.0 to +2004.0 ms")
    assert offsets_note({}) == ""


# --- the commands, offline on a fabricated session folder


def _write_session(session: SessionPaths) -> None:
    """A head and node b (2 s ahead): b's print really came before the head's line."""
    def resource(node: str, host: str, pid: int, component: str) -> dict[str, Any]:
        values = {attr.RESOURCE_NODE_ID: node, "host.name": host, "process.pid": pid,
                  attr.RESOURCE_COMPONENT: component}
        return {"attributes": [{"key": k, "value": {"intValue": str(v)} if isinstance(v, int)
                                else {"stringValue": v}} for k, v in values.items()]}

    def span_line(node: str, host: str, pid: int, component: str, name: str,
                  start_ns: int, end_ns: int, span_id: str) -> str:
        raw = {"traceId": TRACE, "spanId": span_id, "name": name,
               "startTimeUnixNano": str(start_ns), "endTimeUnixNano": str(end_ns),
               "attributes": [{"key": attr.TASK_ID, "value": {"stringValue": TASK}},
                              {"key": attr.TASK_ATTEMPT, "value": {"intValue": "0"}}]}
        return json.dumps({"resourceSpans": [{"resource": resource(node, host, pid, component),
                                              "scopeSpans": [{"spans": [raw]}]}]})

    session.traces_dir.mkdir(parents=True, exist_ok=True)
    session.logs_dir.mkdir(parents=True, exist_ok=True)
    (session.traces_dir / "driver-100.jsonl").write_text(
        span_line("", "head", 100, "driver", "task.submit", T0, T0 + 40 * MS, "1" * 16) + "\n"
        + span_line("", "head", 100, "driver", "task.dispatch", T0 + MS, T0 + 40 * MS,
                    "2" * 16) + "\n")
    (session.traces_dir / "worker-7.jsonl").write_text(
        span_line(B, "host-b", 7, "worker", "task.execute", T0 + 2 * S + 10 * MS,
                  T0 + 2 * S + 30 * MS, "3" * 16) + "\n")
    lines = {
        "raylet-9.jsonl": [offset_line(T0 - S, B, SKEW_S)],
        "raylet-5.jsonl": [offset_line(T0 - S, HEAD, 0.00001, rtt_s=0.0002),
                           line(T0 + 35 * MS, "lease.returned", node=HEAD, pid=5)],
        "driver-100.jsonl": [line(T0 - S, "driver.connected", node=HEAD, pid=100)],
        "worker-7.jsonl": [line(T0 + 2 * S + 20 * MS, "task.output", node=B, host="host-b",
                                pid=7, task_id=TASK, line="hello", stream="stdout")]}
    for name, records in lines.items():
        (session.logs_dir / name).write_text(
            "".join(json.dumps(dict(r.fields)) + "\n" for r in records))


@pytest.fixture
def session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SessionPaths:
    root = tmp_path / "tracedray"
    monkeypatch.setenv("TRACEDRAY_TEMP_DIR", str(root))
    monkeypatch.delenv("TRACEDRAY_JAEGER_URL", raising=False)
    monkeypatch.delenv("TRACEDRAY_ADDRESS", raising=False)
    created = create_session(root)
    created.info_file.write_text(json.dumps({"session_id": created.session_id,
                                             "created": (T0 - 10 * S) / 1e9}))
    created.address_file.write_text("127.0.0.1:1")  # nothing listens: offline
    _write_session(created)
    return created


def test_logs_command_merges_on_the_heads_clock_and_says_so(session: SessionPaths) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["logs", "--format", "json"])
    assert result.exit_code == 0, result.output
    events = [json.loads(text) for text in result.stdout.splitlines()]
    names = [e["event"] for e in events if e["event"] in ("task.output", "lease.returned")]
    assert names == ["task.output", "lease.returned"]
    output = next(e for e in events if e["event"] == "task.output")
    assert output["clock_offset_s"] == SKEW_S
    assert output["timestamp"] == "2026-01-01T00:00:00.020000Z"
    assert f"node {B[:12]} +2000.0 ms" in result.stderr
    assert HEAD[:12] not in result.stderr  # its 10 µs offset is noise, nothing moved

    raw = runner.invoke(app, ["logs", "--no-clock-correction"])
    assert raw.exit_code == 0, raw.output
    assert raw.stdout.index("lease.returned") < raw.stdout.index("hello")
    assert "clock offsets" not in raw.stderr

    pretty = runner.invoke(app, ["logs", "--task", TASK])
    assert pretty.exit_code == 0, pretty.output
    assert pretty.stdout.startswith("2026-01-01 00:00:00.020Z") and "hello" in pretty.stdout


def test_trace_and_timeline_commands_apply_and_report_offsets(session: SessionPaths) -> None:
    runner = CliRunner()
    text = runner.invoke(app, ["trace", TASK])
    assert text.exit_code == 0, text.output
    assert f"clock offsets applied (node clock minus head clock): node {B[:12]} +2000.0 ms" \
        in text.stdout
    assert text.stdout.index("stdout: hello") < text.stdout.index("returned")
    data = json.loads(runner.invoke(app, ["trace", TASK, "--format", "json"]).stdout)
    assert data["clock_offsets_s"] == {B: [SKEW_S]}
    assert data["duration_s"] == pytest.approx(0.040)
    raw = json.loads(runner.invoke(app, ["trace", TASK, "--format", "json",
                                         "--no-clock-correction"]).stdout)
    assert raw["clock_offsets_s"] == {} and raw["duration_s"] > 2

    timeline = runner.invoke(app, ["timeline", "--output", "-"])
    assert timeline.exit_code == 0, timeline.output
    document = json.loads(timeline.stdout)
    assert document["otherData"]["clock_offsets_s"] == {B: [SKEW_S]}
    execute = next(e for e in document["traceEvents"] if e.get("name") == "task.execute")
    assert execute["ts"] == (T0 + 10 * MS) / 1000
    assert f"node {B[:12]} +2000.0 ms" in timeline.stderr
