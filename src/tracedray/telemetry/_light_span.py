"""``LightSpan``: a recording span without the SDK's span object.

The SDK's ``Tracer.start_span`` + ``Span.end`` cost ~13 µs before our processor even runs
(attribute copies through BoundedAttributes, a lock per span, processor fan-out). Our
spans go to one file and, optionally, one console batch processor, so ``LightSpan`` keeps
what a span needs in plain attributes and, when it ends, hands those fields to the spool
(see spool_format.py; they become the same JSON line the SDK path would write). Only when
a console exporter is configured is a ``ReadableSpan`` built, for it. It implements the
OTel API's ``Span`` interface, so ``trace.get_current_span()``, W3C propagation, and user
spans nested under ours all work unchanged.
"""

from __future__ import annotations

import threading
import time
import traceback as traceback_module
from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import (
    Link,
    SpanContext,
    SpanKind,
    TraceState,
)
from opentelemetry.trace.status import Status, StatusCode
from opentelemetry.util.types import Attributes, AttributeValue

from tracedray.telemetry import _state
from tracedray.telemetry import attributes as attrs
from tracedray.telemetry._errors import qualified_name
from tracedray.telemetry._otel_adapter import (
    EMPTY_TRACE_STATE,
    TRACE_FLAGS,
    remote_span_context,
)
from tracedray.telemetry._otel_adapter import NOT_SAMPLED as _NOT_SAMPLED
from tracedray.telemetry._otel_adapter import SAMPLED as _SAMPLED
from tracedray.telemetry._otel_adapter import local_span_context as _local_span_context
from tracedray.telemetry.otlp_json import EventFields
from tracedray.telemetry.span_shape import SpanShape
from tracedray.telemetry.spool_format import SPAN, link_fields

_INTERNAL = SpanKind.INTERNAL
_UNSET_STATUS = Status(StatusCode.UNSET)
MAX_ATTRIBUTES = 128  # the SDK's default OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT
MAX_EVENTS = 128

class LightSpan(trace.Span):
    """A recording span of this process's pipeline; thread-safe as far as the GIL makes
    single dict/list operations atomic, which is all its methods use (and a lock taken
    by the first event or link, whose list is made then).

    Its ids are ints, as its record wants them. Its SpanContext and its parent's are
    objects only once something asks (``get_span_context``, ``parent``) for a span
    started without them: a worker's ``task.execute`` (:func:`start_remote_child`),
    where each cost ~3k instructions per task that nothing ever read.
    """

    __slots__ = ("_pipeline", "_name", "_kind", "_attributes", "_shape", "_values",
                 "_events", "_links", "_start_ns", "_status", "_sampled", "_end_once",
                 "_context", "_trace_id", "_span_id", "_trace_state", "_parent", "_parent_id",
                 "_parent_flags", "_trace_hex", "_hex_ids")

    def __init__(self, pipeline: _state.Pipeline, name: str, context: SpanContext | None,
                 parent: SpanContext | None, kind: SpanKind, attributes: dict[str, Any] | None,
                 start_ns: int, sampled: bool, shape: SpanShape | None = None,
                 values: tuple[AttributeValue, ...] = (), trace_id: int = 0, span_id: int = 0,
                 parent_id: int = 0, parent_flags: int = 0,
                 trace_hex: str | None = None) -> None:
        """``context`` is the span's and ``parent`` its parent's (None: a root span).
        Or ``context`` is None, for a child of a remote span in a trace with no
        tracestate: then the ids name both — ``trace_id``, ``span_id``, the parent's
        ``parent_id`` and ``parent_flags`` — and ``trace_hex`` is the trace id in hex
        if the caller has it (for log lines)."""
        self._pipeline = pipeline
        self._name = name
        self._kind = kind
        # Either an attribute dict, or (until something changes them) a shape and this
        # span's values of it: see span_shape.py.
        self._attributes = attributes
        self._shape = shape
        self._values = values
        self._events: list[EventFields] | None = None  # None until the first one
        self._links: list[Link] | None = None
        self._start_ns = start_ns
        self._status = _UNSET_STATUS  # replaced, never changed, by set_status
        self._sampled = sampled
        self._end_once = [True]  # list.pop() is atomic: exactly one end() wins
        self._hex_ids: tuple[str, str] | None = None
        self._trace_hex = trace_hex
        self._parent_flags = parent_flags
        if context is None:
            self._context: SpanContext | None = None
            self._parent: SpanContext | None = None
            self._trace_id = trace_id
            self._span_id = span_id
            self._trace_state = EMPTY_TRACE_STATE
            self._parent_id = parent_id
        else:
            self._context = context
            self._parent = parent
            self._trace_id = context.trace_id
            self._span_id = context.span_id
            self._trace_state = context.trace_state
            self._parent_id = 0 if parent is None else parent.span_id

    def attributes(self) -> dict[str, Any]:
        """Its attributes as a dict (a shaped span's are built now, and stay a dict)."""
        attributes = self._attributes
        if attributes is None:
            assert self._shape is not None
            attributes = self._attributes = self._shape.attributes(self._values)
            self._shape = None
        return attributes

    @property
    def parent(self) -> SpanContext | None:
        """The parent's context, as the SDK span's ``parent``; None for a root span."""
        parent = self._parent
        if parent is None and self._parent_id:  # a remote parent, not built yet
            parent = self._parent = remote_span_context(
                self._trace_id, self._parent_id, TRACE_FLAGS[self._parent_flags & 0xFF],
                EMPTY_TRACE_STATE)
        return parent

    def hex_ids(self) -> tuple[str, str]:
        """(trace id, span id) in lowercase hex, for the log lines written inside it."""
        ids = self._hex_ids
        if ids is None:
            trace_hex = self._trace_hex
            # %-formatting: twice as fast as format() / f-string specs here.
            ids = self._hex_ids = (
                "%032x" % self._trace_id if trace_hex is None else trace_hex,  # noqa: UP031
                "%016x" % self._span_id)  # noqa: UP031
        return ids

    # --- the OTel Span API
    def get_span_context(self) -> SpanContext:
        context = self._context
        if context is None:
            context = self._context = _local_span_context(
                self._trace_id, self._span_id, _SAMPLED if self._sampled else _NOT_SAMPLED,
                self._trace_state)
        return context

    def is_recording(self) -> bool:
        return bool(self._end_once)

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        if not self._end_once:
            return
        attributes = self.attributes()
        if key in attributes or len(attributes) < MAX_ATTRIBUTES:
            attributes[key] = value

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def add_event(self, name: str, attributes: Attributes = None,
                  timestamp: int | None = None) -> None:
        if not self._end_once:
            return
        events = self._events
        if events is None:
            events = self._first_list("_events")
        if len(events) < MAX_EVENTS:
            events.append((name, time.time_ns() if timestamp is None else timestamp,
                           dict(attributes or {})))

    def add_link(self, context: SpanContext, attributes: Attributes = None) -> None:
        if not (self._end_once and context.is_valid):
            return
        links = self._links
        if links is None:
            links = self._first_list("_links")
        links.append(Link(context, attributes))

    def _first_list(self, slot: str) -> list[Any]:
        """The list in ``slot`` (``_events`` or ``_links``, None until the first item),
        made now if no other thread made it first: two threads' first items both kept."""
        with _FIRST_ITEM_LOCK:
            items: list[Any] | None = getattr(self, slot)
            if items is None:
                items = []
                setattr(self, slot, items)
            return items

    def update_name(self, name: str) -> None:
        if self._end_once:
            self.attributes()  # a shape names its spans: this one leaves it
            self._name = name

    def set_status(self, status: Status | StatusCode, description: str | None = None) -> None:
        # As the SDK: OK is final, UNSET never overrides.
        if not self._end_once or self._status.status_code is StatusCode.OK:
            return
        if isinstance(status, StatusCode):
            status = Status(status, description)
        if status.status_code is not StatusCode.UNSET:
            self._status = status

    def record_exception(self, exception: BaseException, attributes: Attributes = None,
                         timestamp: int | None = None, escaped: bool = False) -> None:
        event_attributes: dict[str, AttributeValue] = {
            attrs.EXCEPTION_TYPE: qualified_name(type(exception)),
            attrs.EXCEPTION_MESSAGE: str(exception),
            attrs.EXCEPTION_STACKTRACE: "".join(traceback_module.format_exception(
                type(exception), exception, exception.__traceback__)),
            "exception.escaped": str(escaped),
        }
        event_attributes.update(attributes or {})
        self.add_event(attrs.EXCEPTION_EVENT, event_attributes, timestamp)

    def end(self, end_time: int | None = None) -> None:
        """Record the span: to the file as its spool record (spool_format.py), and to
        the console exporter, if any, as a ReadableSpan."""
        try:
            self._end_once.pop()
        except IndexError:
            return  # ended already
        end_ns = time.time_ns() if end_time is None else end_time
        # Recorded here rather than in a helper: a frame less for every span.
        try:
            pipeline = self._pipeline
            writer = pipeline.file_writer
            if writer is not None:
                status, events, links = self._status, self._events, self._links
                shape = self._shape
                state = self._trace_state
                trace_state = "" if state is EMPTY_TRACE_STATE else trace_state_header(state)
                # A shaped span as its shape's record (PACKED or SHAPED, span_shape.py);
                # any other as one SPAN tuple in one call, as spool_format.py lays it out.
                if (shape is not None and shape.blob is not None and status is _UNSET_STATUS
                        and events is None and links is None):
                    start_ns = self._start_ns
                    writer.append_shaped(shape, self._trace_id, self._span_id, self._parent_id,
                                         start_ns, end_ns - start_ns, self._values, trace_state)
                else:
                    kind = self._kind
                    writer.append_fields((
                        SPAN, self._trace_id, self._span_id, self._parent_id, self._name,
                        0 if kind is _INTERNAL else kind.value, self._start_ns, end_ns,
                        self.attributes(),
                        0 if status is _UNSET_STATUS else status.status_code.value,
                        status.description, events or (), trace_state,
                        link_fields(links) if links else ()))
            if pipeline.exporter is not None and self._sampled:
                assert pipeline.provider is not None
                pipeline.exporter.processor.on_end(ReadableSpan(
                    name=self._name, context=self.get_span_context(), parent=self.parent,
                    resource=pipeline.provider.resource, attributes=self.attributes(),
                    events=[Event(name, attributes, timestamp)
                            for name, timestamp, attributes in self._events or ()],
                    links=self._links or (), kind=self._kind, status=self._status,
                    start_time=self._start_ns, end_time=end_ns,
                    instrumentation_scope=pipeline.scope))
        except Exception:  # telemetry must never break the caller
            pass

    def __repr__(self) -> str:
        return (f"LightSpan({self._name!r}, span_id={self._span_id:016x}, "
                f"recording={self.is_recording()})")


_FIRST_ITEM_LOCK = threading.Lock()


def trace_state_header(trace_state: TraceState) -> str:
    """The W3C ``tracestate`` header of ``trace_state``; "" when it is empty."""
    # Identity first: TraceState's truth test is a Python __len__, on every span.
    return "" if trace_state is EMPTY_TRACE_STATE or not trace_state else trace_state.to_header()

