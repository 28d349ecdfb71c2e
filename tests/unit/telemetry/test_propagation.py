"""W3C trace context in task specs: the inline fast path agrees with the propagator."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from tracedray.telemetry import carrier_for, context_from_carrier, parent_from_carrier

W3C = TraceContextTextMapPropagator()
TRACE_ID, SPAN_ID = 0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331


def _via_context(carrier: dict[str, str]) -> SpanContext | None:
    context = context_from_carrier(carrier)
    return None if context is None else trace.get_current_span(context).get_span_context()


@pytest.fixture(params=[_via_context, parent_from_carrier], ids=["context", "parent"])
def _parent(request: pytest.FixtureRequest) -> Callable[[dict[str, str]], SpanContext | None]:
    """Both ways of reading a carrier (a Context, or the parent SpanContext alone)."""
    return request.param  # type: ignore[no-any-return]


@pytest.mark.parametrize("flags", [0, 1])
def test_round_trip_matches_the_propagator(flags: int, _parent: Any) -> None:
    span = NonRecordingSpan(SpanContext(TRACE_ID, SPAN_ID, False, TraceFlags(flags)))
    carrier = carrier_for(span)
    expected: dict[str, str] = {}
    W3C.inject(expected, context=trace.set_span_in_context(span))
    assert carrier == expected
    parsed = _parent(carrier)
    assert parsed == trace.get_current_span(W3C.extract(carrier)).get_span_context()
    assert parsed is not None and parsed.is_remote and parsed.trace_flags == flags


def test_trace_state_travels_through_the_propagator(_parent: Any) -> None:
    state = TraceState([("vendor", "value")])
    span = NonRecordingSpan(SpanContext(TRACE_ID, SPAN_ID, False, TraceFlags(1), state))
    carrier = carrier_for(span)
    assert carrier["tracestate"] == "vendor=value"
    parsed = _parent(carrier)
    assert parsed is not None and parsed.trace_state == state


@pytest.mark.parametrize("header", [
    "",
    "garbage",
    f"00-{0:032x}-{SPAN_ID:016x}-01",  # all-zero trace id
    f"00-{TRACE_ID:032x}-{0:016x}-01",  # all-zero span id
    f"00-{TRACE_ID:032x}-{SPAN_ID:016x}-1",  # short flags
    f"00-{TRACE_ID:032X}-{SPAN_ID:016x}-01",  # uppercase hex is invalid in W3C
    f"00-{TRACE_ID:032x}-{SPAN_ID:016x}-01-extra",  # version 00 has no extra fields
    f"ff-{TRACE_ID:032x}-{SPAN_ID:016x}-01",  # version ff is forbidden
])
def test_invalid_headers_give_no_parent(header: str, _parent: Any) -> None:
    assert _parent({"traceparent": header}) is None


def test_a_future_version_is_read_as_the_spec_says(_parent: Any) -> None:
    parsed = _parent({"traceparent": f"01-{TRACE_ID:032x}-{SPAN_ID:016x}-01-future"})
    assert parsed is not None and (parsed.trace_id, parsed.span_id) == (TRACE_ID, SPAN_ID)


def test_invalid_span_and_empty_carrier() -> None:
    assert carrier_for(trace.INVALID_SPAN) == {}
    assert context_from_carrier({}) is None and parent_from_carrier({}) is None
