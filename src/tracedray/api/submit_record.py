"""What a submission leaves to be recorded off the caller's thread: its ``task.submit``
span and line, the trace context its spec carries, and its first task event.

``.remote()`` takes what only it can know, where and when it runs: the span that is
current (the submit span's parent), the time, the line's task context; the span's end
when it hands the task over. The submit inbox's thread calls ``write()`` before it hands
the task to a submitter: it opens the span (started when the caller started it, under
the caller's span), stamps its trace context into the spec, writes the line, ends the
span and records PENDING_ARGS_AVAIL (at the caller's time; an actor call's is held for
its actor to report, with the time in ``spec.submitted_at``, and a normal task's goes to
its worker the same way if it is dispatched before the next flush: task_events.py). Nothing
reads the spec's trace context before (the task event that carries it is recorded here,
after it).
Opening the span, stamping, building and writing the line, packing the span's record
and the event cost the caller ~3.5 µs of each ``.remote()``. The span, the line, the
spec and the event are the same as when the caller made them.
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import INVALID_SPAN

from tracedray import logs, telemetry
from tracedray._proto.v1 import common_pb2
from tracedray.core import trace_context
from tracedray.telemetry import instruments

if TYPE_CHECKING:
    from tracedray.core.worker.pending_task import PendingTask
    from tracedray.core.worker.task_events import TaskEventBuffer

LOGGER = "tracedray.api.submission"  # the logger the task.submit line names (the record)


class SubmitRecord:
    """A submission's ``task.submit`` span and line, its spec's trace context and its
    first task event, taken at ``.remote()`` and recorded by ``write()`` (or ``fail()``).

    ``task``: the pending task, once its arguments are attached (its dispatch span's
    parent is set when the span opens). ``ended_at``: when the span ended (ns since the
    epoch), set by whoever hands the task over; None leaves the span to its owner
    (``span``, once written: an actor's creation ends it once the GCS has answered)."""

    __slots__ = ("_events", "_spec", "_function", "_kind", "_call_site", "_job_id",
                 "_max_retries", "_actor_id", "_parent", "_start_ns", "_at", "_line_task",
                 "_line_ids", "task", "span", "ended_at")

    def __init__(self, events: TaskEventBuffer, spec: common_pb2.TaskSpec, *, function: str,
                 kind: str, call_site: str, job_id: bytes, max_retries: int,
                 actor_id: bytes) -> None:
        self._events = events
        self._spec = spec
        self._function = function
        self._kind = kind
        self._call_site = call_site
        self._job_id = job_id
        self._max_retries = max_retries
        self._actor_id = actor_id
        parent = self._parent = instruments.submit_parent()  # None: telemetry off
        self._start_ns = start_ns = time.time_ns()
        self._at = start_ns / 1e9  # the line's and the task event's time
        # The line's moment: its task context (None: INFO lines are not written) and,
        # without a span of its own to name, the current span's ids, taken now.
        line_task = self._line_task = logs.info_context()
        self._line_ids = (logs.current_trace_ids() if parent is None and line_task is not None
                          else None)
        self.task: PendingTask | None = None
        self.span: Any = INVALID_SPAN  # until written: ending it does nothing
        self.ended_at: int | None = None

    def write(self) -> None:
        """Open the span and stamp the spec, write the line, end the span at ``ended_at``
        if set, and record the task's first event. Never raises: the inbox hands the
        task over after it, whatever happened here."""
        with contextlib.suppress(Exception):  # telemetry never stops a submission
            self._open_and_write_line()
            if self.ended_at is not None:
                self.span.end(end_time=self.ended_at)
        spec = self._spec
        if spec.kind == common_pb2.ACTOR_METHOD:  # its actor reports it (task_events.py)
            spec.submitted_at = self._at
            self._events.hold_first(spec, self._at)
        else:
            self._events.record_first(spec, self._at)

    def fail(self, error: BaseException) -> None:
        """The task could not be built (an argument that cannot be pickled): its span
        ends now with ``error``, and its line tells of the attempt, as they always did.
        Never raises (the caller raises ``error``)."""
        with contextlib.suppress(Exception):
            self._open_and_write_line()
            telemetry.finish_span(self.span, error=error)

    def _open_and_write_line(self) -> None:
        spec = self._spec
        task_id = spec.task_id
        parent = self._parent
        span: Any = INVALID_SPAN if parent is None else instruments.task_submitted(
            task_id, self._function, self._kind, self._call_site, self._job_id,
            self._max_retries, self._actor_id, parent=parent, start_ns=self._start_ns)
        self.span = span
        hex_ids = None if span is INVALID_SPAN else trace_context.stamp(spec, span)
        task = self.task
        if hex_ids is not None and task is not None:
            # The dispatch's parent: a PendingSpan serves as one without a SpanContext.
            task.trace_parent = (span if isinstance(span, telemetry.PendingSpan)
                                 else span.get_span_context())
        line_task = self._line_task
        if line_task is None:
            return
        if hex_ids is None:
            logs.write_info_at(LOGGER, "task.submit", self._at, line_task, self._line_ids,
                               task_id=task_id.hex(), function=self._function,
                               call_site=self._call_site, attempt=0)
        else:
            logs.write_info_at(LOGGER, "task.submit", self._at, line_task, None,
                               task_id=task_id.hex(), function=self._function,
                               call_site=self._call_site, attempt=0, trace_id=hex_ids[0],
                               span_id=hex_ids[1])
