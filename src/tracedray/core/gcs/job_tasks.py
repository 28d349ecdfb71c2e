"""What a job's end does to its tasks, and which event of a task decides its state (pure).

A job that ends (its driver finished it, or died: ``job_end.py``) leaves tasks that
never reached an end: queued in the dead driver, waiting for a lease, running on a
worker the raylet then killed. Nobody is left to report how they end, so the GCS
records it: each becomes ``FAILED`` at its current attempt with a *verdict* event
(``TaskEvent.job_end``) saying why, as Ray's GCS marks a finished job's non-terminal
tasks failed (``WORKER_DIED``, "Job finishes (…) as driver exits. Marking all
non-terminal tasks as failed."). Here the error type says which end it was:

``JOB_ENDED``   its driver finished the job (``shutdown()`` or exit) first;
``OWNER_DIED``  its driver died (SIGKILL, crash, its node's death): Ray's name for the
                death of the process that owns a task's results.

A verdict never overwrites an end: a task that ended already keeps its state, and a
task's own end (``FINISHED``, or its own failure) beats a verdict at the same attempt
whenever it arrives: it may have ended before the job did, its report late. So the
state a task ends in does not depend on the order in which its events and the job's
end reach the GCS. A later attempt begins again (and, its job being over, is failed
again). Tasks whose events arrive after their job ended are failed on arrival.

Tasks of a detached actor are left alone, as the actor outlives its job: its creation,
and every task submitted from within it (directly or by tasks it submitted), which carry
the id of the job that created it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from tracedray._proto.v1 import gcs_pb2
from tracedray.core.gcs import job_end

FINISHED, FAILED, CANCELLED = "FINISHED", "FAILED", "CANCELLED"
TERMINAL = frozenset({FINISHED, FAILED, CANCELLED})
JOB_ENDED = "JOB_ENDED"
OWNER_DIED = "OWNER_DIED"
ACTOR_CREATION_TASK = "ACTOR_CREATION_TASK"
ACTOR_TASK = "ACTOR_TASK"
# How far up its parents a task is followed to find a detached actor that submitted it.
MAX_ANCESTORS = 8
# Events kept per task record; a terminal one is kept beyond it (an attempt ends once,
# or twice with a verdict), so that the event that ended the task is always shown.
MAX_EVENTS_PER_TASK = 32


@dataclass(frozen=True)
class Verdict:
    """How the tasks a job's end left unfinished end."""

    job_id: bytes
    error_type: str  # JOB_ENDED | OWNER_DIED
    label: str  # "job ended" | "owner died"
    job_state: str  # the job's: FINISHED | FAILED
    job_reason: str  # the job's end reason
    time: float  # when the job ended


def verdict_for(job: gcs_pb2.JobInfo) -> Verdict | None:
    """The verdict on the unfinished tasks of ``job``; None while it runs."""
    if job.state not in (job_end.FINISHED, job_end.FAILED):
        return None
    finished = job.state == job_end.FINISHED
    return Verdict(job.job_id, JOB_ENDED if finished else OWNER_DIED,
                   "job ended" if finished else "owner died", job.state, job.end_reason,
                   job.end_time)


def outlives_job(record: gcs_pb2.TaskRecord, ancestors: Sequence[gcs_pb2.TaskRecord],
                 outliving_actors: Collection[bytes]) -> bool:
    """Whether the task belongs to an actor that outlives its job (``outliving_actors``:
    the detached ones): it creates one, or one of its ``ancestors`` (its parent, its
    parent's parent, …) ran in one, so that the actor submitted it."""
    if record.kind == ACTOR_CREATION_TASK and record.actor_id in outliving_actors:
        return True
    return any(a.kind in (ACTOR_CREATION_TASK, ACTOR_TASK) and a.actor_id in outliving_actors
               for a in ancestors)


def failure_event(record: gcs_pb2.TaskRecord, verdict: Verdict,
                  outliving_actors: Collection[bytes] = (),
                  ancestors: Sequence[gcs_pb2.TaskRecord] = ()) -> gcs_pb2.TaskEvent | None:
    """The FAILED event that ends ``record`` for its job's end, or None when the task
    ended already, belongs to another job, or to an actor that outlives the job
    (:func:`outlives_job`)."""
    if record.job_id != verdict.job_id or record.state in TERMINAL:
        return None
    if outlives_job(record, ancestors, outliving_actors):
        return None
    # Last in the task's history, even where a worker's clock is ahead of the GCS's.
    at = max([verdict.time, *(e.time for e in record.events)])
    message = (f"{verdict.label}: job {verdict.job_id.hex()} {verdict.job_state.lower()}, "
               f"{verdict.job_reason}, while the task was {record.state or 'unknown'} "
               f"(attempt {record.attempt})")
    event = gcs_pb2.TaskEvent(
        task_id=record.task_id, attempt=record.attempt, state=FAILED, time=at,
        job_id=record.job_id, function_name=record.function_name, actor_id=record.actor_id,
        kind=record.kind, error_type=verdict.error_type, error_message=message, job_end=True)
    event.state_times[FAILED] = at
    return event


def failed_by_job_end(record: gcs_pb2.TaskRecord) -> bool:
    """Whether the record's FAILED is a job-end verdict rather than the task's own end."""
    if record.state != FAILED:
        return False
    verdict = own_end = False
    for e in record.events:
        if e.attempt >= record.attempt and e.state in TERMINAL:
            if e.job_end:
                verdict = True
            else:
                own_end = True
    return verdict and not own_end


def takes_state(record: gcs_pb2.TaskRecord, event: gcs_pb2.TaskEvent) -> bool:
    """Whether ``event``'s state becomes the record's.

    The latest event wins, except that nothing but a later attempt moves a task out of
    an end; a verdict only ends a task not ended; the task's own end beats a verdict.
    """
    if not record.events:
        return True
    if event.job_end:
        return record.state not in TERMINAL or event.attempt > record.attempt
    if event.attempt >= record.attempt and failed_by_job_end(record):
        return event.state in TERMINAL or event.attempt > record.attempt
    latest = event.time >= max(e.time for e in record.events)
    ended_already = record.state in TERMINAL and event.attempt <= record.attempt
    return latest and not (ended_already and event.state not in TERMINAL)


def merge(record: gcs_pb2.TaskRecord, event: gcs_pb2.TaskEvent) -> None:
    """Fold one event into the task's record (in place).

    The GCS runs this for every event of every task (two or more per task), so the
    fields are copied by name rather than by ``getattr``/``setattr``, and a record's
    first event, whose state it always takes, skips the checks against earlier ones.
    """
    events = record.events
    if not events:
        _copy_description(record, event)
        record.state = event.state
        if event.attempt > record.attempt:
            record.attempt = event.attempt
        _copy_place(record, event)
        _copy_error(record, event)
        events.append(event)
        return
    takes = takes_state(record, event)
    if event.job_end and not takes:
        return  # a verdict on a task that ended leaves no trace
    _copy_description(record, event)
    verdict_held = failed_by_job_end(record)
    if takes:
        if verdict_held:
            # The verdict's words do not describe how the task itself went on.
            record.error_type = record.error_message = ""
        record.state = event.state
        if event.attempt > record.attempt:
            record.attempt = event.attempt
    _copy_place(record, event)
    # While a verdict holds, its error is the record's: a late event does not blur it.
    if takes or not verdict_held:
        _copy_error(record, event)
    # A batch re-sent after a GCS restart (the reply was lost) must not duplicate events.
    # Nor must a caller's copy of what its dead executor reported (executor_reports.py);
    # that copy may have been coalesced with the caller's own earlier states, which the
    # stored event then takes.
    state, attempt, at = event.state, event.attempt, event.time
    duplicate = next((e for e in events
                      if e.state == state and e.attempt == attempt and e.time == at), None)
    if duplicate is not None:
        times = duplicate.state_times
        for name, when in event.state_times.items():
            if name not in times:
                times[name] = when
    elif len(events) < MAX_EVENTS_PER_TASK or state in TERMINAL:
        events.append(event)


def _copy_description(record: gcs_pb2.TaskRecord, event: gcs_pb2.TaskEvent) -> None:
    """What the task is, where an event says it."""
    if event.function_name:
        record.function_name = event.function_name
    if event.call_site:
        record.call_site = event.call_site
    if event.parent_task_id:
        record.parent_task_id = event.parent_task_id
    if event.trace_id:
        record.trace_id = event.trace_id
    if event.submit_span_id:
        record.submit_span_id = event.submit_span_id
    if event.resources:
        record.resources.update(event.resources)
    if event.actor_id:
        record.actor_id = event.actor_id


def _copy_place(record: gcs_pb2.TaskRecord, event: gcs_pb2.TaskEvent) -> None:
    """Where it ran, where an event says it."""
    if event.node_id:
        record.node_id = event.node_id
    if event.worker_id:
        record.worker_id = event.worker_id
    if event.worker_pid:
        record.worker_pid = event.worker_pid


def _copy_error(record: gcs_pb2.TaskRecord, event: gcs_pb2.TaskEvent) -> None:
    if event.error_type:
        record.error_type = event.error_type
    if event.error_message:
        record.error_message = event.error_message
