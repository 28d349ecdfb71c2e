"""The record of a task's dispatch to a leased worker: its ``task.dispatch`` span, its
task event, and for a lease's first task the scheduling decision (a ``task.schedule``
span and one ``task.dispatch`` log line).

A scheduling decision is made once per lease, by the raylet that granted it; later tasks
of the same shape reuse the worker without a new decision, and their spans name the
lease they went out on.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import trace as otel_trace

from tracedray import logs, telemetry
from tracedray.core import trace_context
from tracedray.core.worker.leases import Lease
from tracedray.core.worker.pending_task import PendingTask
from tracedray.core.worker.task_events import TaskEventBuffer
from tracedray.exceptions import WorkerCrashedError
from tracedray.telemetry import attributes as A
from tracedray.telemetry import instruments

log = logs.get_logger("tracedray.core.worker.task_submitter")  # the submitter's lines


def record_dispatch(task_events: TaskEventBuffer, task: PendingTask, lease: Lease,
                    decided: bool) -> None:
    """Record ``task`` sent on ``lease``; ``decided``: the lease's first task."""
    spec = task.spec
    if telemetry.enabled():
        parent = task.trace_parent or trace_context.parent_of(spec)
        if decided:
            parent_context = telemetry.parent_context(parent)
            common: dict[str, Any] = {A.TASK_ID: spec.task_id.hex(),
                                      A.TASK_ATTEMPT: spec.attempt}
            reason = str(lease.decision.get(A.SCHEDULING_REASON, ""))
            decision: dict[str, Any] = lease.decision
            telemetry.start_span("task.schedule", {**common, **decision,
                                                   A.SCHEDULING_REASON: reason},
                                 parent=parent_context).end()
            # The first dispatch of a lease writes a log line inside its span (which
            # needs a span object); the others only need recording when their result
            # is in.
            task.dispatch_span = telemetry.start_span("task.dispatch", {
                **common, **lease.reused_attributes(), A.SCHEDULING_REASON: reason},
                parent=parent_context)
        else:
            task.dispatch_span = instruments.task_dispatched(
                lease.reused_dispatch_shape(), spec.task_id, spec.attempt, parent=parent)
    task_events.record(spec, "SUBMITTED_TO_WORKER", node_id=lease.worker.node_id,
                       worker_id=lease.worker.worker_id, worker_pid=lease.worker.pid)
    if decided:  # one line for the decision and the dispatch it led to
        with telemetry.activate(task.dispatch_span or otel_trace.INVALID_SPAN):
            log.info("task.dispatch", task_id=spec.task_id.hex(), job_id=spec.job_id.hex(),
                     attempt=spec.attempt, node_id=lease.worker.node_id,
                     worker_pid=lease.worker.pid, lease_id=lease.lease_id,
                     reason=str(lease.decision.get(A.SCHEDULING_REASON, "")))


def end_span(task: PendingTask, *, ok: bool, note: str = "") -> None:
    """End ``task``'s dispatch span, if it has one (``note``: why it ended early)."""
    span = task.dispatch_span
    if span is None:
        return
    task.dispatch_span = None
    if ok:
        telemetry.finish_span(span, attributes={"tracedray.dispatch.note": note} if note else None)
    else:
        telemetry.finish_span(span, error=WorkerCrashedError(note) if note
                              else RuntimeError("failed"))
