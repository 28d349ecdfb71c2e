"""The W3C trace context a task spec carries, as binary fields (core/trace_context.py)."""

from __future__ import annotations

import pytest
from opentelemetry.trace import SpanContext, TraceFlags, TraceState

from tracedray import telemetry
from tracedray._proto.v1 import common_pb2
from tracedray.core import trace_context

TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
SPAN_ID = 0xB7AD6B7169203331


_EXECUTE = telemetry.SpanShape("task.execute", ("k",))
_EXECUTE_BARE = telemetry.SpanShape("task.execute", ())


def _context(flags: int = 1, state: TraceState | None = None) -> SpanContext:
    return SpanContext(TRACE_ID, SPAN_ID, False, TraceFlags(flags), state or TraceState())


def _wire(spec: common_pb2.TaskSpec) -> common_pb2.TaskSpec:
    """What the worker receives: the spec after a trip through its bytes."""
    return common_pb2.TaskSpec.FromString(spec.SerializeToString())


def test_the_parent_survives_the_wire_as_a_remote_span_context() -> None:
    spec = common_pb2.TaskSpec()
    trace_context.stamp(spec, _context())
    parent = trace_context.parent_of(_wire(spec))
    assert parent is not None
    assert (parent.trace_id, parent.span_id, parent.trace_flags.sampled, parent.is_remote,
            parent.is_valid) == (TRACE_ID, SPAN_ID, True, True, True)
    assert parent == SpanContext(TRACE_ID, SPAN_ID, True, TraceFlags(1), TraceState())


def test_sampled_out_flags_and_tracestate_travel_too() -> None:
    spec = common_pb2.TaskSpec()
    trace_context.stamp(spec, _context(flags=0, state=TraceState([("vendor", "opaque")])))
    parent = trace_context.parent_of(_wire(spec))
    assert parent is not None
    assert not parent.trace_flags.sampled
    assert parent.trace_state.get("vendor") == "opaque"


def test_the_header_form_is_the_one_the_propagator_writes() -> None:
    spec = common_pb2.TaskSpec()
    context = _context(state=TraceState([("vendor", "opaque")]))
    trace_context.stamp(spec, context)
    carrier = trace_context.carrier(_wire(spec))
    assert carrier == {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                       "tracestate": "vendor=opaque"}
    # ...and it names the same parent when parsed back the W3C way.
    reparsed = telemetry.parent_from_carrier(carrier)
    assert reparsed is not None
    assert (reparsed.trace_id, reparsed.span_id) == (TRACE_ID, SPAN_ID)
    assert trace_context.trace_id_hex(spec) == "0af7651916cd43dd8448eb211c80319c"


def test_a_spec_without_a_context_names_no_parent() -> None:
    spec = common_pb2.TaskSpec()  # the caller recorded no span (telemetry off)
    assert trace_context.parent_of(spec) is None
    assert trace_context.carrier(spec) == {}
    assert trace_context.trace_id_hex(spec) == ""


def test_invalid_ids_name_no_parent() -> None:
    zero_span = common_pb2.TaskSpec(trace_id=TRACE_ID.to_bytes(16, "big"), parent_span_id=0)
    zero_trace = common_pb2.TaskSpec(trace_id=bytes(16), parent_span_id=SPAN_ID)
    short = common_pb2.TaskSpec(trace_id=b"\x01" * 8, parent_span_id=SPAN_ID)
    assert [trace_context.parent_of(s) for s in (zero_span, zero_trace, short)] == [None] * 3
    assert telemetry.remote_parent(1 << 128, SPAN_ID, 1) is None
    assert telemetry.remote_parent(TRACE_ID, SPAN_ID, 1, trace_state="not a header") is not None




def _slot_fields(spec: common_pb2.TaskSpec) -> object:
    span, fields = trace_context.start_child(spec, _EXECUTE_BARE, ())
    span.end()
    return fields


def test_the_flight_recorder_slot_names_the_same_parent_as_the_spec() -> None:
    import json

    spec = common_pb2.TaskSpec()
    assert _slot_fields(spec) is None
    assert trace_context.parent_from_slot(None) is None
    context = telemetry.remote_parent(0xABC << 100, 0x1234, 1, "vendor=x")
    assert context is not None
    trace_context.stamp(spec, context)
    # Through JSON, as the worker writes the slot and the raylet reads it after a crash.
    fields = json.loads(json.dumps(_slot_fields(spec)))
    parent = trace_context.parent_from_slot(fields)
    assert parent == trace_context.parent_of(spec)
    assert parent is not None and parent.is_remote and parent.trace_flags.sampled
    assert parent.trace_state.to_header() == "vendor=x"
    for torn in (["zz", 1, 1, ""], [1, 2], "junk", ["0" * 32, 1, 1, ""], {}):
        assert trace_context.parent_from_slot(torn) is None


def _recorded(tmp_path, name: str):  # type: ignore[no-untyped-def]
    from tracedray.telemetry import otlp_json

    resource_spans, warnings = otlp_json.read_trace_dir(tmp_path / "traces")
    assert warnings == []
    return [span for span in otlp_json.to_readable_spans(resource_spans) if span.name == name]


@pytest.mark.parametrize("flags, state", [(1, None), (0, None), (1, "vendor=v1")])
def test_a_child_of_the_spec_is_the_span_the_general_path_starts(
        tmp_path, flags: int, state: str | None) -> None:  # type: ignore[no-untyped-def]
    # start_child builds the worker's task.execute in one frame in the common case; it
    # must be the span start_span(parent=parent_of(spec)) starts, whatever the flags.
    telemetry.configure("worker", session_dir=tmp_path)
    spec = common_pb2.TaskSpec()
    trace_context.stamp(spec, _context(flags, TraceState.from_header([state]) if state else None))
    spec = _wire(spec)
    fast, _ = trace_context.start_child(spec, _EXECUTE, ("v",))
    general = telemetry.start_span("task.execute", {"k": "v"},
                                   parent=trace_context.parent_of(spec))
    for span in (fast, general):
        context = span.get_span_context()
        assert (type(span), span.is_recording(), context.trace_id, context.trace_flags,
                context.is_remote, context.trace_state) == (
            type(general), bool(flags), TRACE_ID, TraceFlags(flags), False,
            general.get_span_context().trace_state)
        span.end()
    recorded = _recorded(tmp_path, "task.execute")
    assert len(recorded) == (2 if flags else 0)
    for span in recorded:
        assert span.parent is not None and span.parent.span_id == SPAN_ID
        assert dict(span.attributes) == {"k": "v"}
        assert span.context.trace_state.to_header() == (state or "")


def test_a_child_of_a_spec_naming_no_parent_is_a_child_of_the_current_span(tmp_path) -> None:  # type: ignore[no-untyped-def]
    telemetry.configure("worker", session_dir=tmp_path)
    with telemetry.span("outer") as outer:
        child, _ = trace_context.start_child(common_pb2.TaskSpec(), _EXECUTE_BARE, ())
    assert child.get_span_context().trace_id == outer.get_span_context().trace_id
    child.end()
    (recorded,) = _recorded(tmp_path, "task.execute")
    assert recorded.parent is not None
    assert recorded.parent.span_id == outer.get_span_context().span_id
    root, _ = trace_context.start_child(common_pb2.TaskSpec(), _EXECUTE_BARE, ())
    assert root.is_recording() and root.get_span_context().trace_id != TRACE_ID


def test_a_configured_sampler_sees_the_spec_s_parent(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # parentbased_always_off drops roots but keeps children of sampled parents: a
    # sampler that is not handed the remote parent would drop every task.execute.
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "parentbased_always_off")
    telemetry.configure("worker", session_dir=tmp_path)
    spec = common_pb2.TaskSpec()
    trace_context.stamp(spec, _context(1))
    span, _ = trace_context.start_child(_wire(spec), _EXECUTE_BARE, ())
    assert span.is_recording()
    span.end()
    assert len(_recorded(tmp_path, "task.execute")) == 1
    assert not trace_context.start_child(common_pb2.TaskSpec(), _EXECUTE_BARE, ())[0].is_recording()


def test_before_configure_a_child_is_the_invalid_span() -> None:
    from opentelemetry.trace import INVALID_SPAN

    telemetry.shutdown()
    spec = common_pb2.TaskSpec()
    trace_context.stamp(spec, _context(1))
    assert trace_context.start_child(spec, _EXECUTE_BARE, ())[0] is INVALID_SPAN


def test_stamp_takes_a_pending_span_as_its_context(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from opentelemetry.trace import INVALID_SPAN

    telemetry.configure("driver", session_dir=tmp_path)
    submit = telemetry.open_span("task.submit", {})
    assert isinstance(submit, telemetry.PendingSpan)
    spec = common_pb2.TaskSpec()
    hex_ids = trace_context.stamp(spec, submit)
    context = submit.get_span_context()
    assert hex_ids == (format(context.trace_id, "032x"), format(context.span_id, "016x"))
    assert trace_context.parent_of(_wire(spec)) == SpanContext(
        context.trace_id, context.span_id, True, context.trace_flags, context.trace_state)
    untouched = common_pb2.TaskSpec()
    assert trace_context.stamp(untouched, INVALID_SPAN) is None
    assert untouched == common_pb2.TaskSpec()
