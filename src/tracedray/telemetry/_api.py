"""Span helpers the runtime calls on its hot paths.

They talk to the OTel API only and never raise errors of their own: a broken
tracer or a bad attribute must not change what user code sees. When telemetry
is off they cost one function call and return the API's invalid span.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from types import TracebackType

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import (
    INVALID_SPAN,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from tracedray.telemetry import _state
from tracedray.telemetry._errors import is_error, mark_error
from tracedray.telemetry._otel_adapter import (
    EMPTY_TRACE_STATE,
    TRACE_FLAGS,
    attach_span,
    current_span,
    detach_span,
    remote_span_context,
)
from tracedray.telemetry._record import (
    LightSpan,
    PendingSpan,
    end_pending_spans,
    open_light_span,
    start_light_span,
    trace_state_header,
)
from tracedray.telemetry.span_shape import SpanShape

# W3C explicitly, not the global propagator: our task specs always carry W3C
# headers, whatever OTEL_PROPAGATORS the user's own code configured.
_W3C = TraceContextTextMapPropagator()


class _SpanScope:
    """``with span(...)``: a class, not a generator-based context manager (half the cost)."""

    __slots__ = ("_span", "_token")

    def __init__(self, current: Span, token: object) -> None:
        self._span = current
        self._token = token

    def __enter__(self) -> Span:
        return self._span

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        current = self._span
        if self._token is None:
            return
        if exc is not None and is_error(exc):
            record_error(current, exc)
        try:
            detach_span(self._token)
            current.end()
        except Exception:
            pass


_DISABLED_SCOPE = _SpanScope(INVALID_SPAN, None)


def span(name: str, attributes: Mapping[str, AttributeValue] | None = None, *,
         context: Context | None = None,
         kind: SpanKind = SpanKind.INTERNAL) -> AbstractContextManager[Span]:
    """Start a span, make it current for the block, end it; record an escaping error."""
    if not _state.enabled():
        return _DISABLED_SCOPE
    try:
        current = start_light_span(name, attributes, context=context, kind=kind)
        return _SpanScope(current, attach_span(current))
    except Exception:
        return _DISABLED_SCOPE


def start_span(name: str, attributes: Mapping[str, AttributeValue] | None = None, *,
               context: Context | None = None, start_time: int | None = None,
               kind: SpanKind = SpanKind.INTERNAL, parent: SpanContext | None = None) -> Span:
    """Start a span that is not made current; the caller ends it (``span.end()``).

    ``parent`` names the parent span directly (e.g. from :func:`parent_from_carrier`),
    skipping the Context a ``context=`` argument costs to build and to read.
    """
    if not _state.enabled():
        return INVALID_SPAN
    try:
        return start_light_span(name, attributes, context=context, kind=kind,
                                start_time=start_time, parent=parent)
    except Exception:
        return INVALID_SPAN


def open_span(name: str, attributes: dict[str, AttributeValue]) -> Span | PendingSpan:
    """Start a span that is not made current and whose context is needed before it
    ends (e.g. ``task.submit``, whose ids travel with the task); the caller ends it
    with ``end()`` or :func:`finish_span`. Cheapest when spans go to the file only:
    see ``_record.open_light_span``. ``attributes`` becomes the span's."""
    if not _state.enabled():
        return INVALID_SPAN
    try:
        return open_light_span(name, attributes)
    except Exception:
        return INVALID_SPAN


def open_shaped_span(shape: SpanShape, values: tuple[AttributeValue, ...],
                     ) -> Span | PendingSpan:
    """:func:`open_span` for a span of ``shape`` with ``values`` (span_shape.py): the
    same span, recorded with its shape while nothing changes its attributes."""
    try:  # INVALID_SPAN when telemetry is off: open_light_span checks, once per task
        return open_light_span(shape.name, None, shape, values)
    except Exception:
        return INVALID_SPAN


def record_error(span: Span, exc: BaseException, traceback_str: str | None = None) -> None:
    """Status ERROR, ``error.type`` and an ``exception`` event carrying the traceback.

    ``traceback_str`` replaces the local traceback: a task's error is raised in a
    worker, and the span that records it may live in another process.
    """
    try:
        if span.is_recording():
            mark_error(span, exc, traceback_str)
    except Exception:
        pass


def finish_span(span: Span | PendingSpan, *, error: BaseException | None = None,
                attributes: Mapping[str, AttributeValue] | None = None) -> None:
    """End ``span`` — a span object or a PendingSpan — with ``attributes`` added and,
    if ``error`` is given, marked as ``record_error`` marks it. Never raises."""
    try:
        if isinstance(span, PendingSpan):
            if attributes:
                span.attributes.update(attributes)
            span.end(error)
            return
        if attributes:
            span.set_attributes(attributes)
        if error is not None:
            record_error(span, error)
        span.end()
    except Exception:
        pass


def finish_spans(spans: Sequence[Span | PendingSpan]) -> None:
    """End spans that finished together without error: PendingSpans as one record
    (``_record.end_pending_spans``), span objects one by one. Never raises."""
    try:
        pending = [span for span in spans if type(span) is PendingSpan]
        if pending:
            end_pending_spans(pending)
        if len(pending) < len(spans):
            for span in spans:
                if type(span) is not PendingSpan:
                    finish_span(span)
    except Exception:
        pass


def carrier_from_current() -> dict[str, str]:
    """W3C ``traceparent`` (and ``tracestate``) of the current span; ``{}`` if there is none."""
    try:
        return carrier_for(trace.get_current_span())
    except Exception:
        return {}


def carrier_for(span: Span) -> dict[str, str]:
    """W3C ``traceparent`` (and ``tracestate``) of ``span``; ``{}`` if it is invalid.

    Formatted here rather than through the propagator: the caller need not make the
    span current first (``use_span`` + ``inject`` cost ~9 µs per task, this ~1 µs).
    """
    try:
        return carrier_of(span.get_span_context())
    except Exception:
        return {}


def carrier_of(span_context: SpanContext) -> dict[str, str]:
    """W3C ``traceparent`` (and ``tracestate``) naming ``span_context``; ``{}`` if invalid."""
    try:
        if not span_context.is_valid:
            return {}
        carrier = {"traceparent": f"00-{span_context.trace_id:032x}-"
                                  f"{span_context.span_id:016x}-{span_context.trace_flags:02x}"}
        header = trace_state_header(span_context.trace_state)
        if header:
            carrier["tracestate"] = header
        return carrier
    except Exception:
        return {}


# What our own producers write (version 00, lowercase hex) is parsed inline. Anything
# else — another version, a tracestate — goes through the propagator, which knows
# every rule of the W3C format.
_LOWER_HEX = "0123456789abcdef"
_NO_STATE = EMPTY_TRACE_STATE  # one empty TraceState: trace_state_header checks identity first


def context_from_carrier(carrier: Mapping[str, str]) -> Context | None:
    """A context whose parent is the remote span in ``carrier``; None if it holds none."""
    try:
        if not carrier:
            return None
        if "tracestate" not in carrier:
            parent = parent_from_carrier(carrier)
            return None if parent is None else trace.set_span_in_context(
                NonRecordingSpan(parent))
        extracted = _W3C.extract(dict(carrier))
        if not trace.get_current_span(extracted).get_span_context().is_valid:
            return None
        return extracted
    except Exception:
        return None


def parent_from_carrier(carrier: Mapping[str, str]) -> SpanContext | None:
    """The remote span in ``carrier`` as a SpanContext (for ``start_span(parent=)``).

    None if it holds none. A ``tracestate``, or a version other than ours, goes
    through the propagator, which knows every rule of the W3C format.
    """
    try:
        header = carrier.get("traceparent") if carrier else None
        if not header:
            return None
        if (len(header) == 55 and header[:3] == "00-" and header[35] == "-"
                and header[52] == "-" and "tracestate" not in carrier
                and not (header[3:35] + header[36:52] + header[53:]).strip(_LOWER_HEX)):
            # Ours (version 00, lowercase hex, no tracestate): parsed by hand, ~3x
            # cheaper than the regular expression, on every task a worker runs.
            trace_id, span_id = int(header[3:35], 16), int(header[36:52], 16)
            if not trace_id or not span_id:
                return None  # all-zero ids are invalid (W3C)
            return remote_span_context(trace_id, span_id, TRACE_FLAGS[int(header[53:], 16)],
                                       _NO_STATE)
        extracted = _W3C.extract(dict(carrier))
        remote = trace.get_current_span(extracted).get_span_context()
        return remote if remote.is_valid else None
    except Exception:
        return None


class _Activation:
    """``with activate(span)``: the span is current inside the block and not ended
    after it. A class rather than ``trace.use_span`` (a generator-based context
    manager with exception handling we do not want): it runs around every task."""

    __slots__ = ("_span", "_token")

    def __init__(self, current: Span) -> None:
        self._span = current
        self._token: object = None

    def __enter__(self) -> Span:
        try:
            self._token = attach_span(self._span)
        except Exception:
            self._token = None
        return self._span

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        token, self._token = self._token, None
        if token is not None:
            try:  # noqa: SIM105 -- suppress() costs a context manager object per task
                detach_span(token)
            except Exception:
                pass


def activate(current: Span) -> AbstractContextManager[Span]:
    """Make ``current`` the current span for a ``with`` block; it is not ended after.

    Errors escaping the block are the caller's to record (as ``use_span(...,
    end_on_exit=False, record_exception=False, set_status_on_exception=False)``).
    """
    return _Activation(current)


def hex_ids(current: Span) -> tuple[str, str] | None:
    """(trace id, span id) of ``current`` in lowercase hex for log lines; None if the
    span has no valid context (telemetry off)."""
    if type(current) is LightSpan:  # ours: formatted once per span
        return current.hex_ids()
    try:
        span_context = current.get_span_context()
    except Exception:
        return None
    if not span_context.is_valid:
        return None
    return format(span_context.trace_id, "032x"), format(span_context.span_id, "016x")


def current_trace_ids() -> tuple[str, str] | None:
    """(trace_id hex32, span_id hex16) of the current span, for log lines.

    Any valid current span counts, including a sampled-out one: its ids still
    join a log line to the trace of the call that produced it.
    """
    current = current_span()  # read as trace.get_current_span() does, four frames fewer
    if type(current) is LightSpan:  # a frame less for the log lines inside our spans
        return current.hex_ids()
    return hex_ids(current)
