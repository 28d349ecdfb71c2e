"""A worker's task.execute (start_remote_child): a LightSpan that starts with its ids
only, and builds its SpanContext, its parent's, and its event and link lists when asked."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, TraceFlags, TraceState
from opentelemetry.trace.status import StatusCode

from tracedray import telemetry
from tracedray._proto.v1 import common_pb2
from tracedray.core import trace_context
from tracedray.telemetry import _record, _state, otlp_json

TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
PARENT_ID = 0xB7AD6B7169203331
SHAPE = telemetry.SpanShape("task.execute", ("tracedray.task.id",),
                            {"tracedray.task.function": "f"})


def _spec(flags: int = 1) -> common_pb2.TaskSpec:
    spec = common_pb2.TaskSpec()
    trace_context.stamp(spec, SpanContext(TRACE_ID, PARENT_ID, False, TraceFlags(flags),
                                          TraceState()))
    return common_pb2.TaskSpec.FromString(spec.SerializeToString())


def _span(spec: common_pb2.TaskSpec) -> Any:
    span, _ = trace_context.start_child(spec, SHAPE, ("ab" * 12,))
    assert type(span) is _record.LightSpan
    return span


def _records(tmp_path: Path) -> list[dict[str, Any]]:
    resource_spans, warnings = otlp_json.read_trace_dir(tmp_path / "traces")
    assert warnings == []
    return [span for resource in resource_spans for scope in resource["scopeSpans"]
            for span in scope["spans"]]


@pytest.mark.parametrize("flags", [1, 3])
def test_its_contexts_are_built_when_asked_and_are_the_general_path_s(
        tmp_path: Path, flags: int) -> None:
    telemetry.configure("worker", session_dir=tmp_path)
    spec = _spec(flags)
    span = _span(spec)
    assert span._context is None and span._parent is None  # nothing built yet
    assert span.parent == trace_context.parent_of(spec)
    assert span.parent.is_remote and span.parent.trace_flags == TraceFlags(flags)
    context = span.get_span_context()
    assert span.get_span_context() is context
    general = telemetry.start_span("task.execute", parent=trace_context.parent_of(spec))
    general_context = general.get_span_context()
    assert (context.trace_id, context.is_remote, context.trace_flags, context.trace_state,
            context.is_valid) == (general_context.trace_id, False, general_context.trace_flags,
                                  general_context.trace_state, True)
    assert span.hex_ids() == (f"{TRACE_ID:032x}", f"{context.span_id:016x}")
    assert repr(span) == f"LightSpan('task.execute', span_id={context.span_id:016x}, " \
                         "recording=True)"
    general.end()
    span.end()


def test_a_span_nobody_asked_about_records_its_ids_and_parent(tmp_path: Path) -> None:
    telemetry.configure("worker", session_dir=tmp_path)
    span = _span(_spec())
    trace_hex, span_hex = span.hex_ids()  # what its log lines carry
    span.end()
    assert span._context is None and span._parent is None
    (record,) = _records(tmp_path)
    assert (record["traceId"], record["spanId"], record["parentSpanId"]) == (
        trace_hex, span_hex, f"{PARENT_ID:016x}")
    assert "events" not in record and "links" not in record


def test_user_spans_inside_it_are_its_children(tmp_path: Path) -> None:
    telemetry.configure("worker", session_dir=tmp_path)
    span = _span(_spec())
    token = telemetry.attach_span(span)
    try:
        assert trace.get_current_span() is span
        with telemetry.tracer().start_as_current_span("user.sdk"):
            pass
        with telemetry.span("user.light"):
            pass
    finally:
        telemetry.detach_span(token)
    span.end()
    by_name = {record["name"]: record for record in _records(tmp_path)}
    own = by_name["task.execute"]
    assert by_name["user.sdk"]["parentSpanId"] == by_name["user.light"]["parentSpanId"] \
        == own["spanId"]
    assert by_name["user.sdk"]["traceId"] == own["traceId"] == f"{TRACE_ID:032x}"


def test_events_and_links_are_recorded_from_the_first_one_on(tmp_path: Path) -> None:
    telemetry.configure("worker", session_dir=tmp_path)
    linked = SpanContext(TRACE_ID, 0x1234, False, TraceFlags(1), TraceState())
    plain, with_event, with_link = _span(_spec()), _span(_spec()), _span(_spec())
    assert plain._events is None and plain._links is None
    with_event.add_event("retry", {"attempt": 2}, timestamp=5)
    with_link.add_link(linked, {"why": "batch"})
    with_link.add_link(trace.INVALID_SPAN_CONTEXT)  # invalid: ignored, as by the SDK
    for span in (plain, with_event, with_link):
        span.end()
    with_event.add_event("late")  # after end: ignored
    records = {record["spanId"]: record for record in _records(tmp_path)}
    assert "events" not in records[plain.hex_ids()[1]]
    (event,) = records[with_event.hex_ids()[1]]["events"]
    assert (event["name"], event["timeUnixNano"], event["attributes"]) == (
        "retry", "5", [{"key": "attempt", "value": {"intValue": "2"}}])
    (link,) = records[with_link.hex_ids()[1]]["links"]
    assert (link["spanId"], link["attributes"]) == (
        f"{0x1234:016x}", [{"key": "why", "value": {"stringValue": "batch"}}])
    assert "events" not in records[with_link.hex_ids()[1]]


def test_an_in_process_exporter_gets_the_span_with_its_parent(tmp_path: Path) -> None:
    telemetry.configure("worker", session_dir=tmp_path)
    exported: list[ReadableSpan] = []
    pipeline = _state._pipeline
    assert pipeline is not None
    # An exporter that keeps what it is handed; removed before the pipeline shuts down.
    pipeline.exporter = SimpleNamespace(  # type: ignore[assignment]
        processor=SimpleNamespace(on_end=exported.append))
    try:
        spec = _spec()
        quiet, eventful = _span(spec), _span(spec)
        eventful.add_event("retry", {"attempt": 2})
        eventful.add_link(SpanContext(TRACE_ID, 0x1234, False, TraceFlags(1), TraceState()))
        eventful.set_status(StatusCode.ERROR, "boom")
        quiet.end()
        eventful.end()
    finally:
        pipeline.exporter = None
    assert [span.name for span in exported] == ["task.execute", "task.execute"]
    for span, readable in zip((quiet, eventful), exported, strict=True):
        assert readable.parent == trace_context.parent_of(spec)
        assert readable.parent is not None and readable.parent.is_remote
        assert readable.context == span.get_span_context()
        assert dict(readable.attributes or {}) == {"tracedray.task.id": "ab" * 12,
                                                    "tracedray.task.function": "f"}
    assert (tuple(exported[0].events), tuple(exported[0].links)) == ((), ())
    assert [event.name for event in exported[1].events] == ["retry"]
    assert [link.context.span_id for link in exported[1].links] == [0x1234]
    assert exported[1].status.status_code is StatusCode.ERROR
    # ...and the file has them too, as without an exporter.
    assert [record.get("parentSpanId") for record in _records(tmp_path)] == [
        f"{PARENT_ID:016x}"] * 2


def test_activation_never_raises() -> None:
    span = trace.NonRecordingSpan(trace.INVALID_SPAN_CONTEXT)
    telemetry.detach_span(None)  # a span that could not be made current
    token = telemetry.attach_span(span)
    assert token is not None and trace.get_current_span() is span
    telemetry.detach_span(token)
    telemetry.detach_span(token)  # used twice: ignored
    assert trace.get_current_span() is trace.INVALID_SPAN


class _SlowFirstRead(_record.LightSpan):
    """A LightSpan whose event and link lists take 2 ms to read while they are not made
    yet: every racing thread reads "none yet" before any makes one, each time."""

    __slots__ = ()

    def _slow(slot: Any) -> property:  # type: ignore[misc]
        def read(self: Any) -> Any:
            value = slot.__get__(self)
            if value is None:
                time.sleep(0.002)
            return value

        return property(read, slot.__set__)

    _events = _slow(_record.LightSpan._events)  # type: ignore[assignment]
    _links = _slow(_record.LightSpan._links)  # type: ignore[assignment]
    del _slow


def test_first_events_and_links_from_racing_threads_are_all_kept(tmp_path: Path) -> None:
    # A span's event and link lists are made by the first one: threads adding their
    # first items at once must not each make a list and leave only the last one's item.
    telemetry.configure("worker", session_dir=tmp_path)
    link = SpanContext(TRACE_ID, PARENT_ID, True, TraceFlags(1), TraceState())
    racers = 4
    for _ in range(5):
        span = _span(_spec())
        span.__class__ = _SlowFirstRead
        start = threading.Barrier(racers)

        def add(index: int, span: Any = span, start: threading.Barrier = start) -> None:
            start.wait()
            span.add_event(f"event {index}")
            span.add_link(link, {"index": index})

        threads = [threading.Thread(target=add, args=(i,)) for i in range(racers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(name for name, _, _ in span._events) == [f"event {i}"
                                                               for i in range(racers)]
        assert sorted(added.attributes["index"] for added in span._links) == list(range(racers))
