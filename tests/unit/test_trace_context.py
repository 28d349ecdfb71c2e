"""The W3C trace context a task spec carries, as binary fields (core/trace_context.py)."""

from __future__ import annotations

from opentelemetry.trace import SpanContext, TraceFlags, TraceState

from tracedray import telemetry
from tracedray.core import trace_context
from tracedray.v1 import common_pb2

TRACE_ID = 0x0AF7651916CD43DD8448EB211C80319C
SPAN_ID = 0xB7AD6B7169203331


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


def test_the_flight_recorder_slot_names_the_same_parent_as_the_spec() -> None:
    import json

    spec = common_pb2.TaskSpec()
    assert trace_context.slot_fields(spec) is None
    assert trace_context.parent_from_slot(None) is None
    context = telemetry.remote_parent(0xABC << 100, 0x1234, 1, "vendor=x")
    assert context is not None
    trace_context.stamp(spec, context)
    # Through JSON, as the worker writes the slot and the raylet reads it after a crash.
    fields = json.loads(json.dumps(trace_context.slot_fields(spec)))
    parent = trace_context.parent_from_slot(fields)
    assert parent == trace_context.parent_of(spec)
    assert parent is not None and parent.is_remote and parent.trace_flags.sampled
    assert parent.trace_state.to_header() == "vendor=x"
    for torn in (["zz", 1, 1, ""], [1, 2], "junk", ["0" * 32, 1, 1, ""], {}):
        assert trace_context.parent_from_slot(torn) is None
