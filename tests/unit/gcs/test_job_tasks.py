"""What a job's end does to its tasks, and which event decides a task's state (pure)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from tracedray._proto.v1 import gcs_pb2
from tracedray.core.gcs import job_tasks

JOB = b"\x01\x00\x00\x00"
OTHER_JOB = b"\x02\x00\x00\x00"
ENDED_AT = 100.0


def job(state: str, reason: str = "") -> gcs_pb2.JobInfo:
    return gcs_pb2.JobInfo(job_id=JOB, state=state, end_reason=reason, end_time=ENDED_AT)


DIED = job("FAILED", "its driver died: process 42 is gone (pid 42, node abc)")
FINISHED = job("FINISHED", "its driver finished it (shutdown() or exit)")


def verdict(of: gcs_pb2.JobInfo = DIED) -> job_tasks.Verdict:
    found = job_tasks.verdict_for(of)
    assert found is not None
    return found


def event(state: str, time: float, attempt: int = 0, **fields: Any) -> gcs_pb2.TaskEvent:
    return gcs_pb2.TaskEvent(task_id=b"t" * 8, job_id=JOB, state=state, time=time,
                             attempt=attempt, function_name="mod.f", **fields)


def record_of(*events: gcs_pb2.TaskEvent) -> gcs_pb2.TaskRecord:
    record = gcs_pb2.TaskRecord(task_id=b"t" * 8, job_id=JOB, kind="NORMAL_TASK")
    for e in events:
        job_tasks.merge(record, e)
    return record


def test_a_running_job_has_no_verdict() -> None:
    assert job_tasks.verdict_for(job("RUNNING")) is None


def test_a_dead_drivers_unfinished_task_fails_as_owner_died_with_the_jobs_reason() -> None:
    record = record_of(event("PENDING_ARGS_AVAIL", 1.0), event("RUNNING", 2.0))
    failure = job_tasks.failure_event(record, verdict(DIED))
    assert failure is not None and failure.job_end
    assert (failure.state, failure.attempt, failure.error_type) == ("FAILED", 0, "OWNER_DIED")
    assert failure.error_message == (
        "owner died: job 01000000 failed, its driver died: process 42 is gone (pid 42, "
        "node abc), while the task was RUNNING (attempt 0)")
    assert failure.time == ENDED_AT and dict(failure.state_times) == {"FAILED": ENDED_AT}
    job_tasks.merge(record, failure)
    assert (record.state, record.error_type) == ("FAILED", "OWNER_DIED")
    assert job_tasks.failed_by_job_end(record)


def test_a_finished_drivers_unfinished_task_fails_as_job_ended() -> None:
    record = record_of(event("SUBMITTED_TO_WORKER", 1.0))
    failure = job_tasks.failure_event(record, verdict(FINISHED))
    assert failure is not None and failure.error_type == "JOB_ENDED"
    assert failure.error_message.startswith("job ended: job 01000000 finished, its driver "
                                            "finished it (shutdown() or exit), while the task "
                                            "was SUBMITTED_TO_WORKER")


@pytest.mark.parametrize("state", ["FINISHED", "FAILED", "CANCELLED"])
def test_a_task_that_ended_is_never_failed(state: str) -> None:
    record = record_of(event("RUNNING", 1.0), event(state, 2.0))
    assert job_tasks.failure_event(record, verdict()) is None


def test_tasks_of_other_jobs_and_creations_of_actors_outliving_the_job_are_left_alone() -> None:
    other = gcs_pb2.TaskRecord(task_id=b"o" * 8, job_id=OTHER_JOB, state="RUNNING")
    assert job_tasks.failure_event(other, verdict()) is None
    creation = gcs_pb2.TaskRecord(task_id=b"c" * 8, job_id=JOB, state="PENDING_ARGS_AVAIL",
                                  kind="ACTOR_CREATION_TASK", actor_id=b"a" * 16)
    assert job_tasks.failure_event(creation, verdict(), outliving_actors={b"a" * 16}) is None
    assert job_tasks.failure_event(creation, verdict(), outliving_actors=()) is not None


def test_the_failure_comes_last_even_when_a_workers_clock_is_ahead() -> None:
    record = record_of(event("RUNNING", ENDED_AT + 5))
    failure = job_tasks.failure_event(record, verdict())
    assert failure is not None and failure.time == ENDED_AT + 5


def test_the_failure_is_at_the_current_attempt() -> None:
    record = record_of(event("FAILED", 1.0, 0, error_type="WorkerCrashedError"),
                       event("RUNNING", 2.0, 1))
    failure = job_tasks.failure_event(record, verdict())
    assert failure is not None and failure.attempt == 1
    job_tasks.merge(record, failure)
    assert (record.state, record.attempt, record.error_type) == ("FAILED", 1, "OWNER_DIED")


def _final(events: list[gcs_pb2.TaskEvent]) -> tuple[str, int, str]:
    record = record_of(*events)
    return record.state, record.attempt, record.error_type


def test_a_task_that_finished_before_its_job_ended_stays_finished_whatever_comes_first(
        ) -> None:
    """Its FINISHED may reach the GCS before or after the verdict: the same end."""
    running = event("RUNNING", 1.0)
    record = record_of(running)
    failure = job_tasks.failure_event(record, verdict())
    assert failure is not None
    finished = event("FINISHED", 2.0, node_id="n1")
    for order in itertools.permutations([failure, finished]):
        assert _final([running, *order]) == ("FINISHED", 0, ""), order


def test_the_tasks_own_failure_beats_the_verdict_and_keeps_its_error() -> None:
    running = event("RUNNING", 1.0)
    failure = job_tasks.failure_event(record_of(running), verdict())
    assert failure is not None
    raised = event("FAILED", 2.0, error_type="ValueError", error_message="bad")
    for order in itertools.permutations([failure, raised]):
        record = record_of(running, *order)
        assert (record.state, record.error_type, record.error_message) == (
            "FAILED", "ValueError", "bad"), order
        assert not job_tasks.failed_by_job_end(record)


def test_a_late_report_of_progress_does_not_undo_the_verdict() -> None:
    record = record_of(event("PENDING_ARGS_AVAIL", 1.0))
    failure = job_tasks.failure_event(record, verdict())
    assert failure is not None
    job_tasks.merge(record, failure)
    job_tasks.merge(record, event("RUNNING", ENDED_AT + 1, node_id="n1"))
    assert (record.state, record.error_type) == ("FAILED", "OWNER_DIED")
    assert record.node_id == "n1"  # where it ran is still worth knowing


def test_a_later_attempt_reopens_the_task_and_its_job_being_over_it_fails_again() -> None:
    record = record_of(event("RUNNING", 1.0))
    first = job_tasks.failure_event(record, verdict())
    assert first is not None
    job_tasks.merge(record, first)
    job_tasks.merge(record, event("SUBMITTED_TO_WORKER", 3.0, attempt=1))
    assert (record.state, record.attempt, record.error_type) == ("SUBMITTED_TO_WORKER", 1, "")
    second = job_tasks.failure_event(record, verdict())
    assert second is not None and second.attempt == 1
    job_tasks.merge(record, second)
    assert (record.state, record.attempt, record.error_type) == ("FAILED", 1, "OWNER_DIED")


def test_a_verdict_on_an_ended_task_leaves_no_trace() -> None:
    record = record_of(event("RUNNING", 1.0))
    failure = job_tasks.failure_event(record, verdict())
    assert failure is not None
    job_tasks.merge(record, event("FINISHED", 2.0))
    before = record.SerializeToString()
    job_tasks.merge(record, failure)
    assert record.SerializeToString() == before


def test_the_ending_event_is_kept_when_the_record_holds_its_most_events() -> None:
    record = record_of(*[event("RUNNING", float(i), attempt=i)
                         for i in range(job_tasks.MAX_EVENTS_PER_TASK)])
    failure = job_tasks.failure_event(record, verdict())
    assert failure is not None
    job_tasks.merge(record, failure)
    assert record.events[-1].job_end and record.state == "FAILED"
    job_tasks.merge(record, event("RUNNING", 500.0, attempt=40))
    assert len(record.events) == job_tasks.MAX_EVENTS_PER_TASK + 1  # progress is capped


def test_tasks_a_detached_actor_submitted_outlive_the_job_that_created_it() -> None:
    actor = b"a" * 16
    method = gcs_pb2.TaskRecord(task_id=b"m" * 8, job_id=JOB, kind="ACTOR_TASK",
                                actor_id=actor, state="RUNNING")
    child = gcs_pb2.TaskRecord(task_id=b"c" * 8, job_id=JOB, kind="NORMAL_TASK",
                               parent_task_id=method.task_id, state="RUNNING")
    grandchild = gcs_pb2.TaskRecord(task_id=b"g" * 8, job_id=JOB, kind="NORMAL_TASK",
                                    parent_task_id=child.task_id, state="PENDING_ARGS_AVAIL")
    assert job_tasks.failure_event(child, verdict(), {actor}, [method]) is None
    assert job_tasks.failure_event(grandchild, verdict(), {actor}, [child, method]) is None
    # The call to the actor is the driver's: it fails with the job.
    assert job_tasks.failure_event(method, verdict(), {actor}, []) is not None
    # Once the actor is gone, what it submitted is the job's like any task.
    assert job_tasks.failure_event(child, verdict(), set(), [method]) is not None


def test_a_copy_of_a_stored_event_adds_only_the_states_the_stored_one_lacks() -> None:
    """A worker's report (RUNNING, FINISHED), then its caller's copy of it coalesced with
    the caller's own earlier states (core/worker/executor_reports.py): one event, which
    takes the states it lacked; a copy brings nothing else, and nothing twice."""
    executor = event("FINISHED", 3.0, state_times={"RUNNING": 2.0, "FINISHED": 3.0})
    caller = event("FINISHED", 3.0, state_times={"PENDING_ARGS_AVAIL": 1.0, "RUNNING": 9.0,
                                                  "FINISHED": 3.0})
    record = record_of(executor, caller, executor)
    [stored] = record.events
    assert dict(stored.state_times) == {"RUNNING": 2.0, "FINISHED": 3.0,
                                        "PENDING_ARGS_AVAIL": 1.0}
    assert record.state == "FINISHED"
