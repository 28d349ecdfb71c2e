"""The record of a task's dispatch to a leased worker: its ``task.dispatch`` span, the
time its SUBMITTED_TO_WORKER is recorded at (``spec.dispatched_at``), and for a lease's
first task the scheduling decision (a ``task.schedule`` span and one ``task.dispatch``
log line).

The worker records SUBMITTED_TO_WORKER as it receives the task, so the state travels in
the event that carries its RUNNING and FINISHED; so does the task's first state
(PENDING_ARGS_AVAIL, at ``spec.submitted_at``) when the caller had not flushed it yet.
A task sent at once is then one event at the GCS. Where the worker cannot record them
(it died, or the connection broke first), the caller records them at the same times:
for the tasks a dead worker held (``record_orphans_dispatch``) and for answered tasks
whose reports were lost (``executor_reports``).

A scheduling decision is made once per lease, by the raylet that granted it; later tasks
of the same shape reuse the worker without a new decision, and their spans name the
lease they went out on.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from tracedray import logs, telemetry
from tracedray.core import trace_context
from tracedray.core.address import Address
from tracedray.core.worker.leases import Lease
from tracedray.core.worker.pending_task import PendingTask
from tracedray.core.worker.task_events import TaskEventBuffer
from tracedray.exceptions import WorkerCrashedError
from tracedray.telemetry import attributes, instruments

log = logs.get_logger("tracedray.core.worker.task_submitter")  # the submitter's lines
_instruments = instruments.Instruments(log)


def record_dispatch(task_events: TaskEventBuffer, task: PendingTask, lease: Lease,
                    decided: bool) -> None:
    """Record ``task`` sent on ``lease``; ``decided``: the lease's first task."""
    spec = task.spec
    if not spec.attempt:
        # A first state not flushed yet goes with the task, for its worker to record.
        first_at = task_events.take_first(spec.task_id)
        if first_at:
            spec.submitted_at = first_at
    if telemetry.enabled():
        parent = task.trace_parent or trace_context.parent_of(spec)
        if decided:
            task.dispatch_span = instruments.lease_first_dispatch(
                spec.task_id, spec.attempt, lease.decision, lease.reused_attributes(),
                parent=parent)
        else:
            task.dispatch_span = instruments.task_dispatched(
                lease.reused_dispatch_shape(), spec.task_id, spec.attempt, parent=parent)
    # The worker records SUBMITTED_TO_WORKER at this time as it receives the task, in
    # the event that carries its RUNNING and FINISHED: one event at the GCS, not two.
    spec.dispatched_at = time.time()
    if decided:  # one line for the decision and the dispatch it led to
        _instruments.lease_decided(task.dispatch_span, spec.task_id, spec.job_id, spec.attempt,
                                   lease.worker.node_id, lease.worker.pid, lease.lease_id,
                                   lease.decision)


def record_orphans_dispatch(task_events: TaskEventBuffer, orphans: Iterable[PendingTask],
                            worker: Address) -> None:
    """The dispatch of tasks whose worker died: it may have died before it reported it.
    Where its report did arrive, this copy merges with it at the GCS."""
    for task in orphans:
        task_events.record_left_by_caller(task.spec, task.spec.attempt, worker.node_id,
                                          worker.worker_id, worker.pid)


def end_span(task: PendingTask, *, ok: bool, note: str = "") -> None:
    """End ``task``'s dispatch span, if it has one (``note``: why it ended early)."""
    span = task.dispatch_span
    if span is None:
        return
    task.dispatch_span = None
    if ok:
        telemetry.finish_span(span, attributes={attributes.DISPATCH_NOTE: note} if note else None)
    else:
        telemetry.finish_span(span, error=WorkerCrashedError(note) if note
                              else RuntimeError("failed"))
