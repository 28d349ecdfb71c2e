"""The runtime's hot events, as the core reports them.

The core calls these hooks with what it knows (binary ids, names, sizes, the clock
reading an operation started at); what each event records lives here: its span, the
span's shape (span_shape.py) and packing, and, where the event has one, its log line.
So the core never builds a shape or a packing, and the span contract
(docs/telemetry.md) is kept in one package.

Each hook costs its caller one call over recording the span itself, and does nothing
but what telemetry being off requires (a log line is written either way). A component
holds one :class:`Instruments`, made with its own logger, so every log line keeps the
``logger`` field it has always had.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from opentelemetry.trace import INVALID_SPAN, Span, SpanContext
from opentelemetry.util.types import AttributeValue

from tracedray.telemetry import _state
from tracedray.telemetry import attributes as A
from tracedray.telemetry._api import activate, start_span
from tracedray.telemetry._otel_adapter import current_span_context
from tracedray.telemetry._record import (
    PendingSpan,
    _start_pending,
    open_light_span,
    open_span_under,
    record_shaped_span,
    record_span,
)
from tracedray.telemetry._record import parent_context as _parent_context
from tracedray.telemetry._state import enabled
from tracedray.telemetry.span_shape import ShapeCache, SpanShape

# An id's field in a PACKED record: a length byte, then the id. ``struct`` would cut a
# longer id short without a word, so each field is sized for its id (core/ids.py's
# lengths; tests/unit/telemetry/test_instruments.py checks they agree).
TASK_ID_BYTES = 16
OBJECT_ID_BYTES = TASK_ID_BYTES + 4
TASK_ID_PACKING = f"{TASK_ID_BYTES + 1}p"
OBJECT_ID_PACKING = f"{OBJECT_ID_BYTES + 1}p"

# task.submit: what the submissions from one call site share; an actor's calls also
# share the actor.
_SUBMIT_KEYS = (A.TASK_FUNCTION, A.TASK_KIND, A.TASK_CALL_SITE, A.JOB_ID, A.TASK_MAX_RETRIES)
_SUBMIT_SHAPES = ShapeCache("task.submit", (A.TASK_ID,), _SUBMIT_KEYS, packing=TASK_ID_PACKING)
_ACTOR_SUBMIT_SHAPES = ShapeCache("task.submit", (A.TASK_ID,), (*_SUBMIT_KEYS, A.ACTOR_ID),
                                  packing=TASK_ID_PACKING)
# task.execute: what a worker's runs of one function share.
_EXECUTE_KEYS = (A.TASK_FUNCTION, A.TASK_KIND, A.NODE_ID, A.WORKER_ID)
_EXECUTE_SHAPES = ShapeCache("task.execute", (A.TASK_ID, A.TASK_ATTEMPT), _EXECUTE_KEYS,
                             packing=TASK_ID_PACKING + "q")
_ACTOR_EXECUTE_SHAPES = ShapeCache("task.execute", (A.TASK_ID, A.TASK_ATTEMPT),
                                   (*_EXECUTE_KEYS, A.ACTOR_ID), packing=TASK_ID_PACKING + "q")
# object.put: a put's call site, where it went and its node are shared by every put from
# that line; a get's attributes are all its own.
_PUT_SHAPES = ShapeCache("object.put", (A.OBJECT_ID, A.OBJECT_SIZE),
                         (A.OBJECT_CALL_SITE, A.OBJECT_LOCATION, A.NODE_ID),
                         packing=OBJECT_ID_PACKING + "q")
_GET_SHAPE = SpanShape("object.get", (A.OBJECT_COUNT, A.OBJECT_ID, A.OBJECT_SIZE),
                       packing="q" + OBJECT_ID_PACKING + "q")


def object_sealed(object_hex: str, size: int, call_site: str, primary: bool, node_id: str,
                  store_used: int, store_capacity: int, start_ns: int, end_ns: int) -> None:
    """A copy entered a node's shared memory (a put, a task or actor return, a pulled
    copy: ``primary`` False) between ``start_ns`` and ``end_ns``, leaving ``store_used``
    bytes in use: the ``object.seal`` span."""
    record_span("object.seal", {
        A.OBJECT_ID: object_hex, A.OBJECT_SIZE: size, A.NODE_ID: node_id,
        A.STORE_USED: store_used, A.STORE_CAPACITY: store_capacity,
        A.OBJECT_CALL_SITE: call_site, A.OBJECT_COPY: "primary" if primary else "secondary"},
        start_ns=start_ns, end_ns=end_ns)


class LogLines(Protocol):
    """What a hook needs of a logger: ``tracedray.logs.get_logger(name)`` is one."""

    def info(self, event: str, *args: Any, **fields: Any) -> Any: ...


def dispatch_shape(shared: Mapping[str, AttributeValue]) -> SpanShape:
    """The shape of the ``task.dispatch`` spans of the tasks sent to one worker (a lease's
    later tasks, an actor's calls to one address): each brings its task id and attempt,
    and ``shared`` is what they all name (node, ip, worker, pid, lease or actor)."""
    return SpanShape("task.dispatch", (A.TASK_ID, A.TASK_ATTEMPT), shared,
                     packing=TASK_ID_PACKING + "q")


def task_dispatched(shape: SpanShape, task_id: bytes, attempt: int, *,
                    parent: SpanContext | PendingSpan | None) -> PendingSpan | Span | None:
    """A ``task.dispatch`` span of ``shape`` under ``parent`` (the task's submission),
    recorded when ``telemetry.finish_span(s)`` ends it; None when spans are not recorded.
    ``telemetry.pending_shaped_span``'s body, a frame less for every dispatch."""
    pipeline = _state._pipeline
    if pipeline is None or pipeline.provider is None:
        return None
    span = _start_pending(pipeline, shape.name, None, parent, shape, (task_id, attempt))
    return span if isinstance(span, PendingSpan) or span.is_recording() else None


def lease_first_dispatch(task_id: bytes, attempt: int, decision: Mapping[str, Any],
                         worker: Mapping[str, Any], *,
                         parent: SpanContext | PendingSpan | None) -> Span | None:
    """A lease's first task went out: the raylet's ``decision`` (span attributes, its
    reason among them) as a ``task.schedule`` span, ended at once, and the task's
    ``task.dispatch`` span naming ``worker``'s attributes, which the caller ends with the
    task's result; both under ``parent`` (the task's submission). None when telemetry is
    off."""
    if not enabled():
        return None
    parent_context = _parent_context(parent)
    common: dict[str, Any] = {A.TASK_ID: task_id.hex(), A.TASK_ATTEMPT: attempt}
    reason = str(decision.get(A.SCHEDULING_REASON, ""))
    start_span("task.schedule", {**common, **decision, A.SCHEDULING_REASON: reason},
               parent=parent_context).end()
    return start_span("task.dispatch", {**common, **worker, A.SCHEDULING_REASON: reason},
                      parent=parent_context)


def execution_shape(function: str, kind: str, node_id: str, worker_id: str,
                    actor_hex: str = "") -> SpanShape:
    """The shape of a worker's ``task.execute`` spans of one function (of one actor),
    whose values are the task id and attempt (``trace_context.start_child``)."""
    if actor_hex:
        return _ACTOR_EXECUTE_SHAPES.get((function, kind, node_id, worker_id, actor_hex))
    return _EXECUTE_SHAPES.get((function, kind, node_id, worker_id))


def submit_parent() -> SpanContext | None:
    """What a ``task.submit`` span opened later, on another thread, will be a child of:
    the current span's context (INVALID_SPAN_CONTEXT: none, the span is a root); None
    when telemetry is off (there will be no span)."""
    if not enabled():
        return None
    try:
        return current_span_context()
    except Exception:  # telemetry must never break the caller
        return None


def task_submitted(task_id: bytes, function: str, kind: str, call_site: str, job_id: bytes,
                   max_retries: int, actor_id: bytes = b"", *,
                   parent: SpanContext | None = None,
                   start_ns: int | None = None) -> Span | PendingSpan:
    """Open the ``task.submit`` span of a new task, not made current (its context goes
    into the spec): a child of the current span, started now; or, given ``parent``
    (:func:`submit_parent`, read where the task was submitted) and ``start_ns``, a child
    of that started then, opened on the thread that records the submission.
    INVALID_SPAN when telemetry is off."""
    if not enabled():
        return INVALID_SPAN
    try:  # telemetry.open_shaped_span's body, a frame less for every task
        job_hex = job_id.hex()
        shape = (_ACTOR_SUBMIT_SHAPES.get((function, kind, call_site, job_hex, max_retries,
                                           actor_id.hex())) if actor_id else
                 _SUBMIT_SHAPES.get((function, kind, call_site, job_hex, max_retries)))
        if parent is not None and start_ns is not None:
            return open_span_under(parent, start_ns, shape, (task_id,))
        return open_light_span(shape.name, None, shape, (task_id,))
    except Exception:  # telemetry must never break the caller
        return INVALID_SPAN


class Instruments:
    """The hooks that write a log line besides their span, with one component's logger."""

    __slots__ = ("_log",)

    def __init__(self, log: LogLines) -> None:
        self._log = log

    def lease_decided(self, dispatch_span: Span | None, task_id: bytes,
                      job_id: bytes, attempt: int, node_id: str, worker_pid: int,
                      lease_id: str, decision: Mapping[str, Any]) -> None:
        """The ``task.dispatch`` line of a lease's first task, inside its dispatch span
        (:func:`lease_first_dispatch`): one line for the decision and the dispatch."""
        with activate(dispatch_span or INVALID_SPAN):
            self._log.info("task.dispatch", task_id=task_id.hex(), job_id=job_id.hex(),
                           attempt=attempt, node_id=node_id, worker_pid=worker_pid,
                           lease_id=lease_id,
                           reason=str(decision.get(A.SCHEDULING_REASON, "")))

    def object_put(self, object_id: bytes, size: int, location: str, call_site: str,
                   node_id: str, start_ns: int) -> None:
        """A put that began at ``start_ns`` stored its value (``location``: ``inline`` or
        ``shm``): the ``object.put`` span and line."""
        if enabled():
            record_shaped_span(_PUT_SHAPES.get((call_site, location, node_id)),
                               (object_id, size), start_ns=start_ns)
        self._log.info("object.put", object_id=object_id.hex(), size=size, location=location,
                       call_site=call_site)

    def object_put_failed(self, object_id: bytes, call_site: str, start_ns: int,
                          error: BaseException) -> None:
        object_hex = object_id.hex()
        record_span("object.put", {A.OBJECT_ID: object_hex, A.OBJECT_CALL_SITE: call_site},
                    start_ns=start_ns, error=error)
        self._log.info("object.put", object_id=object_hex, call_site=call_site,
                       error_type=type(error).__qualname__)

    def object_got(self, object_ids: Sequence[bytes], size: int, start_ns: int) -> None:
        """A get of ``object_ids`` that began at ``start_ns`` returned ``size`` bytes."""
        if enabled():
            record_shaped_span(_GET_SHAPE, (len(object_ids), object_ids[0] if object_ids
                                            else b"", size), start_ns=start_ns)
        self._log.info("object.get", object_id=object_ids[0].hex() if object_ids else "",
                       count=len(object_ids), size=size)

    def object_get_failed(self, object_ids: Sequence[bytes], size: int | None, start_ns: int,
                          error: BaseException) -> None:
        """``size``: None when not every value was in."""
        first_hex = object_ids[0].hex() if object_ids else ""
        attributes: dict[str, Any] = {A.OBJECT_COUNT: len(object_ids), A.OBJECT_ID: first_hex}
        if size is not None:
            attributes[A.OBJECT_SIZE] = size
        record_span("object.get", attributes, start_ns=start_ns, error=error)
        self._log.info("object.get", object_id=first_hex, count=len(object_ids),
                       size=size or 0, error_type=type(error).__qualname__)
