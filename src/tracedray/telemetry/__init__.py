"""tracedray telemetry: every runtime event as an OpenTelemetry span.

Spans of a process go to (1) ``<session_dir>/traces/<component>-<pid>.jsonl`` as
OTLP JSON lines, through the process's spool, and (2) any OTLP endpoint named by the
standard ``OTEL_*`` variables, sent from those files by the node's telemetry agent
(agent_export.py; a ``console`` exporter is the process's own). ``OTEL_SDK_DISABLED=true`` turns
every helper here into a cheap no-op. Nothing in this package raises into user
code once :func:`configure` has returned. The span contract is in docs/telemetry.md.

Cost: spans are ``LightSpan``s (see _record.py), not SDK span objects, and each ended
span is copied into a shared mapping of its file (see append_file.py) without a
system call. :func:`record_span` records an already-finished span in one call, for
hot paths whose span needs no current context (``object.put``/``object.get``).
"""

from __future__ import annotations

from tracedray.telemetry._api import (
    activate,
    carrier_for,
    carrier_from_current,
    carrier_of,
    context_from_carrier,
    current_trace_ids,
    finish_span,
    finish_spans,
    open_shaped_span,
    open_span,
    parent_from_carrier,
    record_error,
    span,
    start_span,
)
from tracedray.telemetry._otel_adapter import attach_span, detach_span
from tracedray.telemetry._record import (
    PendingSpan,
    parent_context,
    pending_shaped_span,
    pending_span,
    record_shaped_span,
    record_span,
    remote_parent,
    start_remote_child,
    trace_fields,
    trace_state_header,
)
from tracedray.telemetry._state import (
    TelemetryStatistics,
    configure,
    enabled,
    force_flush,
    shutdown,
    statistics,
    tracer,
)
from tracedray.telemetry.span_shape import ShapeCache, SpanShape

__all__ = [
    "activate",
    "attach_span",
    "detach_span",
    "open_shaped_span",
    "open_span",
    "remote_parent",
    "PendingSpan",
    "record_shaped_span",
    "parent_context",
    "trace_fields",
    "pending_shaped_span",
    "pending_span",
    "ShapeCache",
    "SpanShape",
    "TelemetryStatistics",
    "carrier_for",
    "carrier_of",
    "carrier_from_current",
    "configure",
    "context_from_carrier",
    "finish_span",
    "finish_spans",
    "parent_from_carrier",
    "current_trace_ids",
    "enabled",
    "force_flush",
    "record_error",
    "record_span",
    "shutdown",
    "span",
    "start_span",
    "start_remote_child",
    "statistics",
    "trace_state_header",
    "tracer",
]
