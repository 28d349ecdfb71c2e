"""The W3C trace context a task spec carries: who its ``task.submit`` span is.

W3C trace context (trace-id, parent-id, trace-flags, tracestate) travels in the
TaskSpec, never as an argument of the user's function. It travels as the
traceparent's fields in binary (``trace_id``, ``parent_span_id``, ``trace_flags``,
plus the ``trace_state`` header text when the trace has one), not as header text:
formatting the header in the caller and parsing it in the worker came to 2-3% of
each side's CPU in a burst of small tasks. The worker's flight-recorder slot (which
the raylet reads after a crash to put ``worker.exit`` in the task's trace) holds the
same fields as JSON values (``start_child`` / ``parent_from_slot``): formatting a
traceparent header for it cost a worker ~14k instructions per task, the hex of the id
bytes ~1k.
"""

from __future__ import annotations

from typing import Any

from opentelemetry.trace import Span, SpanContext

from tracedray import telemetry
from tracedray._proto.v1 import common_pb2


def stamp(spec: common_pb2.TaskSpec, parent: Span | telemetry.PendingSpan | SpanContext,
          ) -> tuple[str, str] | None:
    """Make ``parent`` (a task.submit span, or its context) the parent the spec
    carries; returns its (trace id, span id) in hex, for the submission's log line,
    or None (and the spec unchanged) if it has no valid context."""
    fields = telemetry.trace_fields(parent)
    if fields is None:
        return None
    trace_id, span_id, trace_flags, trace_state = fields
    trace_bytes = trace_id.to_bytes(16, "big")
    spec.trace_id = trace_bytes
    spec.parent_span_id = span_id
    spec.trace_flags = trace_flags
    if trace_state:
        spec.trace_state = trace_state
    return trace_bytes.hex(), "%016x" % span_id  # noqa: UP031 -- 2x format()'s speed


def parent_of(spec: common_pb2.TaskSpec) -> SpanContext | None:
    """The remote span the spec names as its parent; None if it names none."""
    trace_id = spec.trace_id
    if len(trace_id) != 16:
        return None  # none recorded (telemetry off in the caller), or not ours
    return telemetry.remote_parent(int.from_bytes(trace_id, "big"), spec.parent_span_id,
                                   spec.trace_flags, spec.trace_state)


def start_child(spec: common_pb2.TaskSpec, shape: telemetry.SpanShape,
                values: tuple[Any, ...]) -> tuple[Span, tuple[Any, ...] | None]:
    """Start a span of ``shape`` with ``values`` (not made current) whose parent is the
    one the spec names — a task's ``task.execute`` under its caller's ``task.submit`` —
    or, if it names none, the current span. Returns it and the parent as JSON values
    for the flight-recorder slot: ``(trace id hex, parent span id, trace flags,
    tracestate)``, a JSON array; None if the spec names no parent.

    One function for both: each field of the spec is read once (~0.7k instructions a
    read) and the trace id's hex serves the slot and the span's log lines.
    """
    trace_id = spec.trace_id
    if len(trace_id) != 16:
        return telemetry.start_remote_child(shape, values, trace_id, 0, 0, ""), None
    trace_hex = trace_id.hex()
    parent_span_id, flags, trace_state = spec.parent_span_id, spec.trace_flags, spec.trace_state
    return (telemetry.start_remote_child(shape, values, trace_id, parent_span_id, flags,
                                         trace_state, trace_hex),
            (trace_hex, parent_span_id, flags, trace_state))


def trace_id_hex(spec: common_pb2.TaskSpec) -> str:
    """The trace id in lowercase hex, as log lines and task events spell it; "" if none."""
    trace_id = spec.trace_id
    return trace_id.hex() if len(trace_id) == 16 else ""


def carrier(spec: common_pb2.TaskSpec) -> dict[str, str]:
    """The spec's trace context as W3C headers (``traceparent``, ``tracestate``); {} if none."""
    parent = parent_of(spec)
    return {} if parent is None else telemetry.carrier_of(parent)


def parent_from_slot(fields: Any) -> SpanContext | None:
    """The remote span of the slot fields ``start_child`` returned; None for none, or
    for anything malformed (the slot is read after a crash: it may hold a torn or
    foreign record)."""
    try:
        trace_hex, span_id, flags, trace_state = fields
        return telemetry.remote_parent(int(trace_hex, 16), int(span_id), int(flags),
                                       str(trace_state))
    except (TypeError, ValueError):
        return None
