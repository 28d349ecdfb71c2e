from __future__ import annotations

import base64
import json

from cli_traces_builders import NODE_A, TASK, TRACE, sigkill_retry_scenario

from tracedray.cli.tracestore.logs import read_logs
from tracedray.cli.tracestore.model import STATUS_ERROR, normalize_id, parse_resource_spans
from tracedray.cli.tracestore.sources import SessionFileSource, SpanQuery
from tracedray.cli.tracestore.story import TaskStory, task_story
from tracedray.telemetry import attributes as attr


def test_attribute_values_are_decoded_to_python_types():
    entry = {"resource": {"attributes": [{"key": "process.pid", "value": {"intValue": "7"}}]},
             "scopeSpans": [{"spans": [{
                 "traceId": TRACE, "spanId": "00000000000000ff", "name": "x",
                 "startTimeUnixNano": "5", "endTimeUnixNano": "9",
                 "status": {"code": 2, "message": "boom"},
                 "attributes": [
                     {"key": "i", "value": {"intValue": "9007199254740993"}},
                     {"key": "d", "value": {"doubleValue": 0.5}},
                     {"key": "b", "value": {"boolValue": True}},
                     {"key": "a", "value": {"arrayValue": {"values": [{"stringValue": "n1"},
                                                                      {"stringValue": "n2"}]}}},
                 ]}]}]}
    (span,), warnings = parse_resource_spans([entry])
    assert warnings == []
    assert span.attributes["i"] == 9007199254740993  # beyond float precision: kept exact
    assert span.attributes["d"] == 0.5 and span.attributes["b"] is True
    assert list(span.attributes["a"]) == ["n1", "n2"]
    assert span.pid == 7 and span.duration_ns == 4 and span.status_code == STATUS_ERROR
    assert span.parent_id == ""


def test_ids_in_base64_are_converted_and_bad_spans_become_warnings():
    raw = bytes.fromhex(TRACE)
    assert normalize_id(base64.b64encode(raw).decode(), 16) == TRACE
    assert normalize_id(TRACE.upper(), 16) == TRACE
    entry = {"scopeSpans": [{"spans": [
        {"traceId": "not-an-id!", "spanId": "0000000000000001", "name": "bad"},
        {"traceId": TRACE, "spanId": "0000000000000002", "name": "good"},
        {"traceId": TRACE, "name": "no span id"},
    ]}]}
    spans, warnings = parse_resource_spans([entry])
    assert [s.name for s in spans] == ["good"]
    assert len(warnings) == 2 and "not-an-id!" in warnings[0]


def test_spans_written_by_the_runtime_encoder_round_trip():
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext, TraceFlags

    from tracedray.telemetry.otlp_json import encode_spans_line

    context = SpanContext(int(TRACE, 16), 0xAB, False, TraceFlags(1))
    written = ReadableSpan(
        name="task.execute", context=context, start_time=10, end_time=20,
        resource=Resource({"process.pid": 42, attr.RESOURCE_COMPONENT: "worker",
                           attr.RESOURCE_NODE_ID: NODE_A}),
        attributes={attr.TASK_ID: TASK, attr.TASK_ATTEMPT: 1,
                    attr.SCHEDULING_CANDIDATES: ("n1", "n2")})
    (span,), warnings = parse_resource_spans(
        json.loads(encode_spans_line([written]))["resourceSpans"])
    assert warnings == []
    assert (span.trace_id, span.span_id, span.name) == (TRACE, f"{0xAB:016x}", "task.execute")
    assert span.int_attr(attr.TASK_ATTEMPT) == 1 and span.get(attr.TASK_ID) == TASK
    assert span.component == "worker" and span.pid == 42 and span.node_id == NODE_A


def test_truncated_span_and_log_files_are_read_up_to_the_damage(session_root):
    sigkill_retry_scenario().write_session(session_root.traces_dir, session_root.logs_dir)
    worker_file = session_root.traces_dir / "worker-202.jsonl"
    with open(worker_file, "a") as handle:
        handle.write('{"resourceSpans":[{"resource":{"attrib')  # a SIGKILL mid-write
    with open(session_root.logs_dir / "worker-202.jsonl", "a") as handle:
        handle.write('{"timestamp": "2026-01-01T00:00:')
    batch = SessionFileSource(session_root).find_spans(SpanQuery())
    assert any("truncated" in w and "worker-202.jsonl" in w for w in batch.warnings)
    assert sum(1 for s in batch.spans if s.name == "task.execute") == 1  # the good line survives
    logs = read_logs(session_root.logs_dir, task_id=TASK)
    assert [r.get("line") for r in logs.records] == ["attempt zero starting",
                                                     "attempt one starting", "done"]
    assert logs.warnings == ("worker-202.jsonl: skipped last line (truncated?): "
                             "Unterminated string starting at: line 1 column 15 (char 14)",)
    story = task_story(batch.spans, logs.records, TASK)
    assert isinstance(story, TaskStory) and story.final_state == "FINISHED"


def test_read_logs_merges_files_in_time_order_and_filters(session_root):
    sigkill_retry_scenario().write_session(session_root.traces_dir, session_root.logs_dir)
    everything = read_logs(session_root.logs_dir)
    times = [r.time_ns for r in everything.records]
    assert times == sorted(times) and len({r.source for r in everything.records}) == 2
    assert read_logs(session_root.logs_dir, task_id="other").records == ()
    missing = read_logs(session_root.root / "nope")
    assert missing.records == () and "no log folder" in missing.warnings[0]
