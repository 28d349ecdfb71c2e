"""The W3C trace context a task spec carries: who its ``task.submit`` span is.

W3C trace context (trace-id, parent-id, trace-flags, tracestate) travels in the
TaskSpec, never as an argument of the user's function. It travels as the
traceparent's fields in binary (``trace_id``, ``parent_span_id``, ``trace_flags``,
plus the ``trace_state`` header text when the trace has one), not as header text:
formatting the header in the caller and parsing it in the worker came to 2-3% of
each side's CPU in a burst of small tasks. Header text is made here only for the
few places that want text (the worker's flight-recorder slot, which the raylet reads
after a crash).
"""

from __future__ import annotations

from opentelemetry.trace import SpanContext

from tracedray import telemetry
from tracedray.v1 import common_pb2


def stamp(spec: common_pb2.TaskSpec, context: SpanContext) -> tuple[str, str]:
    """Make ``context`` (the task.submit span's) the parent the spec carries; returns
    its (trace id, span id) in hex, for the submission's log line."""
    trace_id = context.trace_id.to_bytes(16, "big")
    spec.trace_id = trace_id
    spec.parent_span_id = context.span_id
    spec.trace_flags = context.trace_flags
    trace_state = telemetry.trace_state_header(context.trace_state)
    if trace_state:
        spec.trace_state = trace_state
    return trace_id.hex(), "%016x" % context.span_id  # noqa: UP031 -- 2x format()'s speed


def parent_of(spec: common_pb2.TaskSpec) -> SpanContext | None:
    """The remote span the spec names as its parent; None if it names none."""
    trace_id = spec.trace_id
    if len(trace_id) != 16:
        return None  # none recorded (telemetry off in the caller), or not ours
    return telemetry.remote_parent(int.from_bytes(trace_id, "big"), spec.parent_span_id,
                                   spec.trace_flags, spec.trace_state)


def trace_id_hex(spec: common_pb2.TaskSpec) -> str:
    """The trace id in lowercase hex, as log lines and task events spell it; "" if none."""
    trace_id = spec.trace_id
    return trace_id.hex() if len(trace_id) == 16 else ""


def carrier(spec: common_pb2.TaskSpec) -> dict[str, str]:
    """The spec's trace context as W3C headers (``traceparent``, ``tracestate``); {} if none."""
    parent = parent_of(spec)
    return {} if parent is None else telemetry.carrier_of(parent)
