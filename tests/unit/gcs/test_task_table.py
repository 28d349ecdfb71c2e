"""The GCS task table: merging events, re-sent batches, and GetTasks over flushed entries."""

from __future__ import annotations

from tracedray._proto.v1 import gcs_pb2
from tracedray.core.gcs.server import Gcs

JOB_A = b"\x0a" * 4
JOB_B = b"\x0b" * 4


def events(task_id: bytes, job_id: bytes, t0: float) -> list[gcs_pb2.TaskEvent]:
    return [gcs_pb2.TaskEvent(task_id=task_id, job_id=job_id, state=state, time=t0 + i,
                              function_name="mod.f")
            for i, state in enumerate(("PENDING_ARGS_AVAIL", "RUNNING", "FINISHED"))]


def task_id(i: int) -> bytes:
    return i.to_bytes(2, "big") * 4


def test_a_resent_batch_does_not_duplicate_events(gcs: Gcs) -> None:
    batch = events(task_id(1), JOB_A, 100.0)
    gcs.add_task_events(batch)
    gcs.add_task_events(batch)  # the reply was lost, the client sent it again
    [record] = gcs.get_tasks(gcs_pb2.GetTasksRequest(task_ids=[task_id(1)])).tasks
    assert record.state == "FINISHED"
    assert [e.state for e in record.events] == ["PENDING_ARGS_AVAIL", "RUNNING", "FINISHED"]


def test_get_tasks_filters_limits_and_counts_flushed_records(gcs: Gcs) -> None:
    for i in range(30):
        gcs.add_task_events(events(task_id(i), JOB_A if i % 3 else JOB_B, float(i)))
    live = gcs_pb2.TaskEvent(task_id=task_id(99), job_id=JOB_A, state="RUNNING", time=1.0)
    gcs.add_task_events([live])
    report = gcs.flusher.flush_now()
    assert report.entries == 30  # the running task stays hot
    assert gcs.tables["tasks"].hot_count() == 1

    everything = gcs.get_tasks(gcs_pb2.GetTasksRequest())
    assert everything.total == 31 and len(everything.tasks) == 31
    limited = gcs.get_tasks(gcs_pb2.GetTasksRequest(limit=5))
    assert limited.total == 31 and len(limited.tasks) == 5
    job_b = gcs.get_tasks(gcs_pb2.GetTasksRequest(job_id=JOB_B))
    assert job_b.total == 10 and {t.job_id for t in job_b.tasks} == {JOB_B}
    job_a = gcs.get_tasks(gcs_pb2.GetTasksRequest(job_id=JOB_A, limit=3))
    assert job_a.total == 21 and len(job_a.tasks) == 3
    flushed = gcs.get_tasks(gcs_pb2.GetTasksRequest(task_ids=[task_id(0), task_id(99)]))
    assert [t.state for t in flushed.tasks] == ["FINISHED", "RUNNING"]


def test_job_filter_is_not_fooled_by_the_id_bytes_elsewhere(gcs: Gcs) -> None:
    # JOB_B's bytes inside another field must not make a JOB_A record match.
    tricky = gcs_pb2.TaskEvent(task_id=JOB_B * 4, job_id=JOB_A, state="FINISHED", time=1.0)
    gcs.add_task_events([tricky])
    assert gcs.get_tasks(gcs_pb2.GetTasksRequest(job_id=JOB_B)).total == 0
    assert gcs.get_tasks(gcs_pb2.GetTasksRequest(job_id=JOB_A)).total == 1
