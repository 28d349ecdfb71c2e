"""Starting and recording spans without the SDK's span object (see _light_span.py).

Sampling (``OTEL_TRACES_SAMPLER``) goes through the provider's sampler exactly as
the SDK does: a dropped span is a ``NonRecordingSpan`` carrying its context, so its
children follow the parent's decision.

``record_span`` is for hot paths that time the work themselves: one call, no object
to hold, at the end. A ``PendingSpan`` is a span nothing runs inside, recorded whole
when it ends.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import sampling
from opentelemetry.trace import (
    INVALID_SPAN,
    INVALID_SPAN_CONTEXT,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    TraceState,
)
from opentelemetry.util.types import AttributeValue

from tracedray.telemetry import _state
from tracedray.telemetry._errors import is_error, mark_error
from tracedray.telemetry._file_processor import SpanFileWriter
from tracedray.telemetry._light_span import _INTERNAL, LightSpan, trace_state_header
from tracedray.telemetry._otel_adapter import (
    EMPTY_TRACE_STATE,
    TRACE_FLAGS,
    current_span_context,
    remote_span_context,
)
from tracedray.telemetry._otel_adapter import NOT_SAMPLED as _NOT_SAMPLED
from tracedray.telemetry._otel_adapter import SAMPLED as _SAMPLED
from tracedray.telemetry._otel_adapter import local_span_context as _local_span_context
from tracedray.telemetry.span_shape import SpanShape
from tracedray.telemetry.spool_format import SHAPED, SPAN

_MAX_TRACE_ID = (1 << 128) - 1
_MAX_SPAN_ID = (1 << 64) - 1
_getrandbits = random.getrandbits  # what RandomIdGenerator calls (Pipeline.random_ids)
_int_from_bytes = int.from_bytes  # bound once: ``int.from_bytes`` binds a method per read



def start_light_span(name: str, attributes: Mapping[str, AttributeValue] | None = None, *,
                     context: Context | None = None, kind: SpanKind = SpanKind.INTERNAL,
                     start_time: int | None = None,
                     parent: SpanContext | None = None) -> trace.Span:
    """Start a span as ``Tracer.start_span`` would, without the SDK span object.

    The parent is ``parent`` if given, else the current span of ``context`` (or of the
    current context). INVALID_SPAN before configure() or when the SDK is disabled.
    """
    pipeline = _state.current()
    if pipeline is None or pipeline.provider is None:
        return INVALID_SPAN
    provider = pipeline.provider
    if parent is None:
        parent = (current_span_context() if context is None
                  else trace.get_current_span(context).get_span_context())
    ids = provider.id_generator
    fast_ids = pipeline.random_ids
    valid_parent = parent is not INVALID_SPAN_CONTEXT and parent.is_valid
    trace_id = parent.trace_id if valid_parent else (
        (_getrandbits(128) if fast_ids else 0) or ids.generate_trace_id())
    sampler = provider.sampler
    if sampler is sampling.DEFAULT_ON:
        # The default (no OTEL_TRACES_SAMPLER), decided inline: what ParentBased(ALWAYS_ON)
        # returns, without building a SamplingResult per span.
        recording = sampled = not valid_parent or bool(parent.trace_flags & _SAMPLED)
        trace_state = parent.trace_state if valid_parent else EMPTY_TRACE_STATE
    else:
        if context is None and valid_parent:
            # The sampler reads the parent from a context: hand it the explicit one.
            context = trace.set_span_in_context(NonRecordingSpan(parent))
        result = sampler.should_sample(context, trace_id, name, kind, attributes)
        recording, sampled = result.decision.is_recording(), result.decision.is_sampled()
        trace_state = result.trace_state or EMPTY_TRACE_STATE
    span_id = (_getrandbits(64) if fast_ids else 0) or ids.generate_span_id()
    span_context = _local_span_context(trace_id, span_id, _SAMPLED if sampled else _NOT_SAMPLED,
                                       trace_state)
    if not recording:
        return NonRecordingSpan(span_context)
    return LightSpan(pipeline, name, span_context, parent if valid_parent else None, kind,
                     dict(attributes) if attributes else {},
                     time.time_ns() if start_time is None else start_time, sampled)


def remote_parent(trace_id: int, span_id: int, flags: int,
                  trace_state: str = "") -> SpanContext | None:
    """The remote span a W3C trace context names, from its fields (the binary form of
    ``traceparent`` and the ``tracestate`` header) rather than from header text.

    None when the ids are not a valid W3C pair (zero or out of range), as for a
    carrier holding none. Never raises.
    """
    try:
        if not (0 < trace_id <= _MAX_TRACE_ID and 0 < span_id <= _MAX_SPAN_ID):
            return None
        state = TraceState.from_header([trace_state]) if trace_state else EMPTY_TRACE_STATE
        return remote_span_context(trace_id, span_id, TRACE_FLAGS[flags & 0xFF], state)
    except Exception:
        return None


def start_remote_child(shape: SpanShape, values: tuple[AttributeValue, ...], trace_id: bytes,
                       parent_span_id: int, flags: int, trace_state: str,
                       trace_hex: str | None = None) -> trace.Span:
    """Start a span of ``shape`` with ``values`` (span_shape.py), not made current, whose
    parent is the remote span that the binary W3C fields of a task spec name
    (``trace_id`` as 16 big-endian bytes; ``trace_hex``, if given, the same in hex);
    without a valid parent, a span as :func:`start_light_span` starts it with none.

    The same span as ``start_light_span(shape.name, shape.attributes(values),
    parent=remote_parent(...))``, for every task a worker runs (``task.execute`` under
    its caller's ``task.submit``): in the common case (the default sampler and id
    generator, no tracestate) the span is built in this one frame, where the general
    path took five frames and ~26k instructions, and it keeps its shape and starts
    with its ids only (see LightSpan). Never raises.
    """
    try:
        pipeline = _state._pipeline
        if pipeline is None or pipeline.provider is None:
            return INVALID_SPAN
        trace_int = _int_from_bytes(trace_id, "big") if len(trace_id) == 16 else 0
        if (trace_state or not trace_int or not 0 < parent_span_id <= _MAX_SPAN_ID
                or not pipeline.random_ids
                or pipeline.provider.sampler is not sampling.DEFAULT_ON):
            parent = remote_parent(trace_int, parent_span_id, flags, trace_state)
            return start_light_span(shape.name, shape.attributes(values), kind=shape.kind,
                                    parent=parent)
        span_id = _getrandbits(64) or pipeline.ids.generate_span_id()
        if not flags & _SAMPLED:  # ParentBased: children follow the parent
            return NonRecordingSpan(_local_span_context(trace_int, span_id, _NOT_SAMPLED,
                                                        EMPTY_TRACE_STATE))
        return LightSpan(pipeline, shape.name, None, None, shape.kind, None, time.time_ns(),
                         True, shape, values, trace_int, span_id, parent_span_id, flags,
                         trace_hex)
    except Exception:  # telemetry must never break the caller
        return INVALID_SPAN


def record_span(name: str, attributes: Mapping[str, AttributeValue] | None = None, *,
                start_ns: int, end_ns: int | None = None, context: Context | None = None,
                kind: SpanKind = SpanKind.INTERNAL, error: BaseException | None = None,
                traceback_str: str | None = None, parent: SpanContext | None = None) -> None:
    """Record a span that ran from ``start_ns`` to ``end_ns`` (``time.time_ns()``; now).

    The parent is ``parent`` if given, else the current span (or the one in
    ``context``), as for ``span()``. ``error`` marks it as ``span()`` marks an escaping
    exception (a GeneratorExit or a clean SystemExit is control flow, not an error).
    Never raises.
    """
    end = time.time_ns() if end_ns is None else end_ns
    try:
        pipeline = _state.current()
        if pipeline is None:
            return
        direct = pipeline.direct_writer
        if direct is not None and error is None:
            _write_directly(pipeline, direct, name, attributes, start_ns, end, context, kind,
                            parent)
            return
        if pipeline.provider is None:
            return
        span = start_light_span(name, attributes, context=context, kind=kind,
                                start_time=start_ns, parent=parent)
        if error is not None and is_error(error) and isinstance(span, LightSpan):
            mark_error(span, error, traceback_str, end)
        span.end(end)
    except Exception:
        pass


class PendingSpan:
    """A span known to have started, recorded whole when it ends.

    For spans nothing runs inside — a task's dispatch, from send to result; a task's
    submission — it skips the span object. Its ids are drawn when it starts and kept
    as plain ints in ``ids``, ``(trace id, span id, parent span id or 0, tracestate
    header)``: the hot paths that stamp them into a task spec, start a child under it
    or write its record read them there, not through a SpanContext's properties
    (~450 instructions a read); ``get_span_context()`` builds one for whoever needs
    it. Only a sampled span is a PendingSpan (see :func:`open_light_span`).

    ``parent`` is what it was started under: a SpanContext, another PendingSpan (a
    dispatch under its task's submission), or None for a root.
    """

    __slots__ = ("name", "kind", "_attributes", "shape", "values", "start_ns", "parent",
                 "ids", "_context")

    def __init__(self, name: str, attributes: dict[str, AttributeValue] | None,
                 parent: SpanContext | PendingSpan | None, ids: tuple[int, int, int, str],
                 shape: SpanShape | None = None,
                 values: tuple[AttributeValue, ...] = (), start_ns: int | None = None) -> None:
        self.name = name
        self.kind = _INTERNAL if shape is None else shape.kind
        # An attribute dict, or a shape and this span's values of it (span_shape.py).
        self._attributes = attributes
        self.shape = shape
        self.values = values
        self.start_ns = time.time_ns() if start_ns is None else start_ns
        self.parent = parent
        self.ids = ids
        self._context: SpanContext | None = None

    @property
    def attributes(self) -> dict[str, AttributeValue]:
        """Its attributes as a dict, to read or add to (a shaped span's are built now,
        and it is recorded with the dict from then on)."""
        attributes = self._attributes
        if attributes is None:
            assert self.shape is not None
            attributes = self._attributes = self.shape.attributes(self.values)
            self.shape = None
        return attributes

    def get_span_context(self) -> SpanContext:
        """Its own context (built on first use)."""
        context = self._context
        if context is None:
            trace_id, span_id, _, trace_state = self.ids
            context = self._context = _local_span_context(
                trace_id, span_id, _SAMPLED,
                TraceState.from_header([trace_state]) if trace_state else EMPTY_TRACE_STATE)
        return context

    def parent_context(self) -> SpanContext | None:
        """Its parent's SpanContext; None for a root."""
        return parent_context(self.parent)

    def record(self, end_ns: int) -> tuple[Any, ...]:
        """Its spool record (spool_format.py) for an end at ``end_ns`` without error."""
        trace_id, span_id, parent_id, trace_state = self.ids
        shape = self.shape
        if shape is not None:
            if shape.blob is not None:
                return (SHAPED, shape.blob, trace_id, span_id, parent_id, self.start_ns,
                        end_ns - self.start_ns, self.values, trace_state)
            attributes: Mapping[str, AttributeValue] | None = shape.attributes(self.values)
        else:
            attributes = self._attributes
        return _plain_span_record((trace_id, span_id, parent_id, trace_state), self.name,
                                  self.kind, self.start_ns, end_ns, attributes)

    def end(self, error: BaseException | None = None, end_time: int | None = None) -> None:
        """Record it, ended now or at ``end_time`` (ns since the epoch, as ``Span.end``
        takes it: a submission's span ended by the thread that records it, later)."""
        pipeline = _state._pipeline
        if pipeline is None:
            return
        try:
            end_ns = time.time_ns() if end_time is None else end_time
            direct = pipeline.direct_writer
            if error is None and direct is not None:
                shape = self.shape
                if shape is not None and shape.blob is not None:
                    trace_id, span_id, parent_id, trace_state = self.ids
                    start_ns = self.start_ns
                    direct.append_shaped(shape, trace_id, span_id, parent_id, start_ns,
                                         end_ns - start_ns, self.values, trace_state)
                else:
                    direct.append_fields(self.record(end_ns))
                return
            # Its status and exception event (or a console exporter) need a span object.
            span = LightSpan(pipeline, self.name, self.get_span_context(), self.parent_context(),
                             self.kind, self._attributes, self.start_ns, True, self.shape,
                             self.values)
            if error is not None and is_error(error):
                mark_error(span, error, None)
            span.end(end_ns)
        except Exception:  # telemetry must never break the caller
            pass


def parent_context(parent: SpanContext | PendingSpan | None) -> SpanContext | None:
    """The SpanContext of what a span is started under (see ``PendingSpan.parent``)."""
    return parent.get_span_context() if isinstance(parent, PendingSpan) else parent


def trace_fields(span: trace.Span | PendingSpan | SpanContext) -> tuple[int, int, int, str] | None:
    """``(trace id, span id, trace flags, tracestate header)`` of a span (or of a
    SpanContext), the W3C fields a task spec carries for its children; None if it has
    no valid context."""
    if isinstance(span, PendingSpan):
        trace_id, span_id, _, trace_state = span.ids
        return trace_id, span_id, _SAMPLED, trace_state
    context = span if isinstance(span, SpanContext) else span.get_span_context()
    if not context.is_valid:
        return None
    return (context.trace_id, context.span_id, context.trace_flags,
            trace_state_header(context.trace_state))


def _start_pending(pipeline: _state.Pipeline, name: str,
                   attributes: dict[str, AttributeValue] | None,
                   parent: SpanContext | PendingSpan | None, shape: SpanShape | None,
                   values: tuple[AttributeValue, ...],
                   start_ns: int | None = None) -> PendingSpan | trace.Span:
    """A span under ``parent`` (a valid SpanContext or PendingSpan; anything else
    starts a new trace), as a PendingSpan when spans go to the file only with the
    default sampler; otherwise what :func:`start_light_span` starts. A sampled-out
    parent's child is a NonRecordingSpan (ParentBased, as the SDK). It starts now, or at
    ``start_ns``."""
    if pipeline.direct_writer is None:
        if shape is not None:
            attributes = shape.attributes(values)
        return start_light_span(name if shape is None else shape.name, attributes,
                                kind=_INTERNAL if shape is None else shape.kind,
                                parent=parent_context(parent) or INVALID_SPAN_CONTEXT,
                                start_time=start_ns)
    # Runs for every submitted task and every dispatch: ids drawn as RandomIdGenerator
    # draws them, the parent's read from its ints where it is a PendingSpan.
    fast_ids = pipeline.random_ids
    span_id = (_getrandbits(64) if fast_ids else 0) or pipeline.ids.generate_span_id()
    if isinstance(parent, PendingSpan):
        trace_id, parent_id, _, trace_state = parent.ids
        return PendingSpan(name, attributes, parent, (trace_id, span_id, parent_id, trace_state),
                           shape, values, start_ns)
    if parent is None or parent is INVALID_SPAN_CONTEXT or not parent.is_valid:
        trace_id = (_getrandbits(128) if fast_ids else 0) or pipeline.ids.generate_trace_id()
        return PendingSpan(name, attributes, None, (trace_id, span_id, 0, ""), shape, values,
                           start_ns)
    if not parent.trace_flags & _SAMPLED:  # ParentBased: children follow the parent
        return NonRecordingSpan(_local_span_context(
            parent.trace_id, span_id, _NOT_SAMPLED, parent.trace_state))
    return PendingSpan(name, attributes, parent, (
        parent.trace_id, span_id, parent.span_id, trace_state_header(parent.trace_state)),
        shape, values, start_ns)


def pending_span(name: str, attributes: dict[str, AttributeValue], *,
                 parent: SpanContext | PendingSpan | None) -> PendingSpan | trace.Span | None:
    """A span under ``parent`` (None: a root) that is recorded when it ends and that
    nothing runs inside; None when spans are not recorded (telemetry off, or a
    sampled-out parent). A span object instead of a PendingSpan where one is needed
    (a console exporter, another sampler): end it with ``telemetry.finish_span(s)``."""
    pipeline = _state._pipeline
    if pipeline is None or pipeline.provider is None:
        return None
    span = _start_pending(pipeline, name, attributes, parent, None, ())
    return span if isinstance(span, PendingSpan) or span.is_recording() else None


def pending_shaped_span(shape: SpanShape, values: tuple[AttributeValue, ...], *,
                        parent: SpanContext | PendingSpan | None,
                        ) -> PendingSpan | trace.Span | None:
    """:func:`pending_span` for a span of ``shape`` with ``values`` (span_shape.py)."""
    pipeline = _state._pipeline
    if pipeline is None or pipeline.provider is None:
        return None
    span = _start_pending(pipeline, shape.name, None, parent, shape, values)
    return span if isinstance(span, PendingSpan) or span.is_recording() else None


def open_light_span(name: str, attributes: dict[str, AttributeValue] | None,
                    shape: SpanShape | None = None, values: tuple[AttributeValue, ...] = (),
                    ) -> PendingSpan | trace.Span:
    """Start a span, child of the current one, that is not made current; end it with
    ``end()`` or :func:`finish_span`. Its context is known at once (``get_span_context``,
    or :func:`trace_fields`).

    Its attributes are ``attributes``, or (``attributes`` None) those of ``shape`` with
    ``values`` (span_shape.py; ``name`` is then the shape's). In the common case (spans
    go to the file only, default sampler) it is a PendingSpan: the span costs one
    record when it ends and no object in between. Otherwise it is what
    :func:`start_light_span` returns. ``attributes`` becomes the span's: the caller
    must not change it afterwards.
    """
    pipeline = _state._pipeline
    if pipeline is None or pipeline.provider is None:
        return INVALID_SPAN
    return _start_pending(pipeline, name, attributes, current_span_context(), shape, values)


def open_span_under(parent: SpanContext, start_ns: int, shape: SpanShape,
                    values: tuple[AttributeValue, ...]) -> PendingSpan | trace.Span:
    """:func:`open_light_span`'s span of ``shape``, opened now but started at ``start_ns``
    under ``parent``, the span that was current then (``current_span_context()`` read
    there): a span another thread opens for the one it times (a task's submission,
    opened by the submit inbox's thread)."""
    pipeline = _state._pipeline
    if pipeline is None or pipeline.provider is None:
        return INVALID_SPAN
    return _start_pending(pipeline, shape.name, None, parent, shape, values, start_ns)


def _write_directly(pipeline: _state.Pipeline, file_writer: SpanFileWriter, name: str,
                    attributes: Mapping[str, AttributeValue] | None, start_ns: int,
                    end_ns: int, context: Context | None, kind: SpanKind,
                    parent: SpanContext | None = None) -> None:
    """The common case — file only, default sampler, no error — with no span object: the
    SPAN record of a span that just ended with no events, links or status, under
    ``parent`` or else the current span (of ``context``), its ids drawn now. Nothing
    when it is not sampled."""
    ids = _ids_under(pipeline, parent if parent is not None else (
        current_span_context() if context is None
        else trace.get_current_span(context).get_span_context()))
    if ids is not None:
        file_writer.append_fields(_plain_span_record(ids, name, kind, start_ns, end_ns,
                                                     attributes))


def _plain_span_record(ids: tuple[int, int, int, str], name: str, kind: SpanKind,
                       start_ns: int, end_ns: int,
                       attributes: Mapping[str, AttributeValue] | None) -> tuple[Any, ...]:
    """The SPAN record (spool_format.py) of a span with ``ids`` (trace id, span id, parent
    span id, tracestate header) and no status, events or links."""
    trace_id, span_id, parent_id, trace_state = ids
    return (SPAN, trace_id, span_id, parent_id, name, 0 if kind is _INTERNAL else kind.value,
            start_ns, end_ns, attributes, 0, None, (), trace_state, ())


def _ids_under(pipeline: _state.Pipeline,
               parent: SpanContext) -> tuple[int, int, int, str] | None:
    """``(trace id, span id, parent span id or 0, tracestate header)`` for a new span
    under ``parent`` (a root when it is invalid), drawn as RandomIdGenerator draws them;
    None when the parent is sampled out (ParentBased: its children are dropped)."""
    fast_ids = pipeline.random_ids
    if parent is INVALID_SPAN_CONTEXT or not parent.is_valid:  # the trace id first, as the SDK
        trace_id = (_getrandbits(128) if fast_ids else 0) or pipeline.ids.generate_trace_id()
        parent_id, trace_state = 0, ""
    elif not parent.trace_flags & _SAMPLED:
        return None
    else:
        trace_id, parent_id = parent.trace_id, parent.span_id
        trace_state = trace_state_header(parent.trace_state)
    span_id = (_getrandbits(64) if fast_ids else 0) or pipeline.ids.generate_span_id()
    return trace_id, span_id, parent_id, trace_state


def record_shaped_span(shape: SpanShape, values: tuple[AttributeValue, ...], *,
                       start_ns: int, error: BaseException | None = None) -> None:
    """:func:`record_span` for a span of ``shape`` with ``values`` (span_shape.py),
    ending now, under the current span: one PACKED or SHAPED record in the common case
    (file only, default sampler, no error). Never raises."""
    end_ns = time.time_ns()
    try:
        pipeline = _state._pipeline
        if pipeline is None:
            return
        direct = pipeline.direct_writer
        blob = shape.blob
        if direct is None or error is not None or blob is None:
            record_span(shape.name, shape.attributes(values), start_ns=start_ns, end_ns=end_ns,
                        kind=shape.kind, error=error)
            return
        parent = current_span_context()
        if parent is INVALID_SPAN_CONTEXT and pipeline.random_ids:
            # A root (a put or get outside any task): _ids_under's first branch, inline,
            # as the span's record is one call (~1k instructions of a ~15k span).
            direct.append_shaped(shape, _getrandbits(128) or pipeline.ids.generate_trace_id(),
                                 _getrandbits(64) or pipeline.ids.generate_span_id(), 0,
                                 start_ns, end_ns - start_ns, values, "")
            return
        ids = _ids_under(pipeline, parent)
        if ids is not None:
            trace_id, span_id, parent_id, trace_state = ids
            direct.append_shaped(shape, trace_id, span_id, parent_id, start_ns,
                                 end_ns - start_ns, values, trace_state)
    except Exception:  # telemetry must never break the caller
        pass


def end_pending_spans(spans: Sequence[PendingSpan]) -> None:
    """End PendingSpans that finished together, without error.

    Spans all of packed shapes (span_shape.py) are a PACKED record each. Others are one
    spool record for all: a caller that learns of many ends at once (a batch of task
    results) pays one ``marshal`` and one append for all of them instead of one per
    span. Each span is recorded as it ends, in the order given. Never raises.
    """
    try:
        pipeline = _state._pipeline
        if pipeline is None:
            return
        direct = pipeline.direct_writer
        if direct is None or len(spans) < 2:
            for pending in spans:
                pending.end()
            return
        end_ns = time.time_ns()
        if all(pending.shape is not None and pending.shape.packer is not None
               and not pending.ids[3] for pending in spans):
            # Spans of packed shapes (a lease's dispatches): a PACKED record each, as one
            # span of theirs ending alone is recorded, packed under one lock; cheaper
            # for the converter than their SHAPED tuples in a SPANS record.
            direct.append_packed_batch(spans, end_ns)
            return
        records = [pending.record(end_ns) for pending in spans]
        direct.append_many(records)
    except Exception:  # telemetry must never break the caller
        pass
