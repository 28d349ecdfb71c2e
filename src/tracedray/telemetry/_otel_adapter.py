"""The one module that relies on OpenTelemetry's private internals.

The hot paths read and set the current span, and build SpanContexts for ids known to be
valid, on every task and every log line inside one. The API's public way costs four to
six Python frames per call, so where the installed ``opentelemetry-api`` lays things out
as expected this module takes shortcuts through its internals:

- ``context_api._RUNTIME_CONTEXT._current_context`` (the ContextVar holding the current
  Context) and ``trace.propagation._SPAN_KEY`` (the current span's key in it): reading the
  current span is one ``ContextVar.get`` and a dict lookup, making one current one
  ``ContextVar.set``;
- ``tuple.__new__(SpanContext, ...)``: a SpanContext without re-validating its ids.

Each shortcut is checked at import against the public API (same answers, inside and
outside a span made current through the API) and replaced by the public call when the
check fails, so another OpenTelemetry version costs speed, never correctness.
``SUPPORTED_API`` is the range of versions the shortcuts were verified on;
``tests/unit/telemetry/test_otel_adapter.py`` fails when the installed version leaves it
or a shortcut falls back. Nothing else in tracedray touches OpenTelemetry's privates.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext
from opentelemetry.trace import (
    INVALID_SPAN,
    INVALID_SPAN_CONTEXT,
    NonRecordingSpan,
    SpanContext,
    TraceFlags,
    TraceState,
)

SUPPORTED_API = ((1, 40), (1, 46))
"""``opentelemetry-api`` versions ``>= SUPPORTED_API[0]`` and ``< SUPPORTED_API[1]``."""

SAMPLED = TraceFlags(TraceFlags.SAMPLED)
NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
EMPTY_TRACE_STATE = TraceState()

_SpanContextFactory = Callable[[int, int, TraceFlags, TraceState], SpanContext]


def _checked_span_context_factory(remote: bool) -> _SpanContextFactory:
    """A constructor for SpanContexts of ids known to be valid, without re-validating.

    ``SpanContext.__new__`` checks the id ranges in Python on every span (~0.2 µs,
    several times that in a busy process). Our ids come from the provider's generator
    (never 0, always in range) or from a task spec's binary fields the caller checked,
    so the tuple is built directly — but only if this OpenTelemetry version lays
    SpanContext out as we expect; otherwise the checked constructor is used.
    """
    state = TraceState()

    def fast(trace_id: int, span_id: int, flags: TraceFlags,
             trace_state: TraceState) -> SpanContext:
        return tuple.__new__(SpanContext, (trace_id, span_id, remote, flags, trace_state, True))

    def checked(trace_id: int, span_id: int, flags: TraceFlags,
                trace_state: TraceState) -> SpanContext:
        return SpanContext(trace_id, span_id, remote, flags, trace_state)

    try:
        sample = fast(1 << 100, 1 << 60, SAMPLED, state)
        reference = checked(1 << 100, 1 << 60, SAMPLED, state)
        same = (sample == reference and sample.is_valid and sample.is_remote is remote
                and (sample.trace_id, sample.span_id, sample.trace_flags, sample.trace_state)
                == (reference.trace_id, reference.span_id, reference.trace_flags,
                    reference.trace_state))
    except Exception:
        same = False
    return fast if same else checked


local_span_context = _checked_span_context_factory(remote=False)
remote_span_context = _checked_span_context_factory(remote=True)
TRACE_FLAGS = [TraceFlags(value) for value in range(256)]  # one object per flags byte


def _context_layout() -> tuple[ContextVar[Context], str] | None:
    """The ContextVar holding OpenTelemetry's current Context and the key of the current
    span in it, when the installed API keeps its runtime context that way (the default
    ``contextvars_context``); None otherwise: then only the public API is used."""
    runtime = getattr(context_api, "_RUNTIME_CONTEXT", None)
    variable = getattr(runtime, "_current_context", None)
    key = getattr(trace.propagation, "_SPAN_KEY", None)
    if (type(runtime) is not ContextVarsRuntimeContext or not isinstance(variable, ContextVar)
            or not isinstance(key, str)):
        return None
    return variable, key


def api_current_span_context() -> SpanContext:
    return trace.get_current_span().get_span_context()


def _reads_as_api(read: Callable[[], SpanContext]) -> bool:
    """Whether ``read`` returns what the API says the current SpanContext is, outside
    any span and inside one made current through the API."""
    try:
        probe = NonRecordingSpan(local_span_context(1 << 90, 1 << 40, SAMPLED,
                                                     EMPTY_TRACE_STATE))
        outside = read() is api_current_span_context()
        token = context_api.attach(trace.set_span_in_context(probe))
        try:
            inside = read() is probe.get_span_context() is api_current_span_context()
        finally:
            context_api.detach(token)
        return outside and inside and read() is api_current_span_context()
    except Exception:
        return False


def _current_span_readers() -> tuple[Callable[[], trace.Span], Callable[[], SpanContext]]:
    """Functions returning the current span, and its SpanContext, as
    ``trace.get_current_span()`` (and its ``get_span_context()``) do.

    That goes through four Python frames of the context API per call (~1 µs in a
    busy process, on every submitted task and every log line inside a task). With the
    API's default runtime context (a ContextVar holding a Context mapping), the span
    is one ``ContextVar.get`` and one dict lookup away; the shortcuts are used only if
    the installed OpenTelemetry lays the runtime context out that way and the
    readings agree.
    """
    layout = _context_layout()
    if layout is None:
        return trace.get_current_span, api_current_span_context
    variable, key = layout
    get_context = variable.get
    span_type = trace.Span

    def fast_span() -> trace.Span:
        current = get_context().get(key)
        return current if isinstance(current, span_type) else INVALID_SPAN

    def fast_context() -> SpanContext:  # fast_span's body again: a frame less per task
        current = get_context().get(key)
        if current is None or not isinstance(current, span_type):
            return INVALID_SPAN_CONTEXT
        return current.get_span_context()

    if not _reads_as_api(fast_context) or not _reads_as_api(
            lambda: fast_span().get_span_context()):
        return trace.get_current_span, api_current_span_context
    return fast_span, fast_context


current_span, current_span_context = _current_span_readers()


def api_attach_span(span: trace.Span) -> object:
    try:
        return context_api.attach(trace.set_span_in_context(span))
    except Exception:  # telemetry must never break the caller
        return None


def api_detach(token: object) -> None:
    if token is not None:
        try:  # noqa: SIM105 -- suppress() costs a context manager object per call
            context_api.detach(token)  # type: ignore[arg-type]
        except Exception:
            pass


def _span_activation() -> tuple[Callable[[trace.Span], object], Callable[[object], None]]:
    """``(attach_span, detach)``: make a span current (returning a token) and undo it,
    as ``context_api.attach(trace.set_span_in_context(span))`` and
    ``context_api.detach(token)`` do. Neither raises: a span that could not be made
    current gives a None token, which ``detach`` ignores.

    Those cost a worker ~14k instructions around every task (six Python frames); with
    the API's default runtime context the same is one dict copy and one
    ``ContextVar.set``/``reset``. As for :func:`_current_span_context_reader`, the
    shortcut is used only if the installed API lays its context out that way and the
    API sees what it sets.
    """
    layout = _context_layout()
    if layout is None:
        return api_attach_span, api_detach
    variable, key = layout
    get_context, set_context, reset = variable.get, variable.set, variable.reset

    def attach_span(span: trace.Span) -> object:
        try:
            # One dict built in place: dict() then an item set was ~1k instructions more.
            return set_context(Context({**get_context(), key: span}))
        except Exception:  # telemetry must never break the caller
            return None

    def detach(token: Any) -> None:  # the Token set_context returned
        if token is not None:
            try:  # noqa: SIM105 -- suppress() costs a context manager object per task
                reset(token)
            except Exception:
                pass

    try:
        probe = NonRecordingSpan(local_span_context(1 << 90, 1 << 41, SAMPLED,
                                                     EMPTY_TRACE_STATE))
        before = context_api.get_current()
        token = attach_span(probe)
        try:
            inside = (token is not None and trace.get_current_span() is probe
                      and isinstance(context_api.get_current(), Context)
                      and all(context_api.get_current().get(k) is v
                              for k, v in before.items() if k != key))
        finally:
            detach(token)
        same = inside and context_api.get_current() is before
    except Exception:
        same = False
    return (attach_span, detach) if same else (api_attach_span, api_detach)


attach_span, detach_span = _span_activation()


def shortcuts_in_use() -> dict[str, bool]:
    """Which shortcuts this process uses (False: the public API, as a fallback)."""
    return {
        "span_context": local_span_context.__name__ == "fast"
        and remote_span_context.__name__ == "fast",
        "current_span": current_span_context is not api_current_span_context,
        "activation": attach_span is not api_attach_span,
    }
