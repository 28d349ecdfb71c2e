"""The GCS fails the tasks a job's end left unfinished: in memory, after a flush, on
arrival after the end, and in Redis after a restart (a GCS in this process, no nodes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracedray._proto.v1 import common_pb2, gcs_pb2
from tracedray.core.gcs.server import Gcs
from tracedray.testing.redis_server import RedisServer

JOB, OTHER_JOB = b"\x01\x00\x00\x00", b"\x02\x00\x00\x00"
NODE = "node-with-the-driver"


def register(gcs: Gcs, job_id: bytes) -> None:
    gcs.register_job(gcs_pb2.JobInfo(job_id=job_id, start_time=1.0, driver=common_pb2.Address(
        node_id=NODE, ip="127.0.0.1", port=4000, worker_id=f"driver-{job_id.hex()}", pid=42)))


def report(gcs: Gcs, index: int, state: str, job_id: bytes = JOB, attempt: int = 0,
           **fields: Any) -> bytes:
    task_id = index.to_bytes(2, "big") * 4
    gcs.add_task_events([gcs_pb2.TaskEvent(
        task_id=task_id, job_id=job_id, state=state, time=float(index), attempt=attempt,
        function_name="mod.f", **fields)])
    return task_id


def states(gcs: Gcs) -> dict[bytes, tuple[str, str]]:
    return {t.task_id: (t.state, t.error_type)
            for t in gcs.get_tasks(gcs_pb2.GetTasksRequest()).tasks}


def test_a_finished_job_fails_its_unfinished_tasks_and_leaves_the_rest(gcs: Gcs) -> None:
    register(gcs, JOB)
    register(gcs, OTHER_JOB)
    done = report(gcs, 1, "FINISHED")
    queued = report(gcs, 2, "PENDING_ARGS_AVAIL")
    running = report(gcs, 3, "RUNNING")
    waiting = report(gcs, 4, "INFEASIBLE")
    elsewhere = report(gcs, 5, "RUNNING", OTHER_JOB)
    assert gcs.flusher.flush_now().entries == 1  # the finished task left memory

    gcs.finish_job(JOB)

    assert states(gcs) == {done: ("FINISHED", ""), queued: ("FAILED", "JOB_ENDED"),
                           running: ("FAILED", "JOB_ENDED"),
                           waiting: ("FAILED", "JOB_ENDED"), elsewhere: ("RUNNING", "")}
    [record] = gcs.get_tasks(gcs_pb2.GetTasksRequest(task_ids=[running])).tasks
    assert record.events[-1].job_end and record.events[-1].state == "FAILED"
    assert "while the task was RUNNING" in record.error_message
    # Ended now, they may leave memory as every ended task does.
    assert gcs.flusher.flush_now().per_table["tasks"].entries == 3
    assert gcs.tables["tasks"].hot_count() == 1
    stats = gcs.statistics()
    assert (stats.jobs_ended_total, stats.tasks_failed_at_job_end_total) == (1, 3)
    assert gcs.jobs.statistics().ended_total == {"FINISHED": 1}
    assert gcs.jobs.statistics().registered_total == 2
    assert gcs.tasks.statistics().ended_jobs == 1


def test_a_dead_drivers_tasks_fail_as_their_owner_died(gcs: Gcs) -> None:
    register(gcs, JOB)
    running = report(gcs, 1, "RUNNING")
    gcs.on_driver_death(gcs_pb2.DriverDeath(job_id=JOB, node_id=NODE, worker_id="driver-01000000",
                                            pid=42, why="process 42 is gone"))
    [record] = gcs.get_tasks(gcs_pb2.GetTasksRequest(task_ids=[running])).tasks
    assert (record.state, record.error_type) == ("FAILED", "OWNER_DIED")
    assert record.error_message.startswith(
        "owner died: job 01000000 failed, its driver died: process 42 is gone")


def test_a_task_reported_after_its_job_ended_fails_on_arrival(gcs: Gcs) -> None:
    register(gcs, JOB)
    gcs.finish_job(JOB)
    late = report(gcs, 1, "PENDING_ARGS_AVAIL")
    finished = report(gcs, 2, "FINISHED")
    assert states(gcs) == {late: ("FAILED", "JOB_ENDED"), finished: ("FINISHED", "")}


def test_a_finished_report_after_the_verdict_wins(gcs: Gcs) -> None:
    register(gcs, JOB)
    task = report(gcs, 1, "RUNNING")
    gcs.finish_job(JOB)
    assert states(gcs)[task] == ("FAILED", "JOB_ENDED")
    report(gcs, 1, "FINISHED")  # it ended before the job did; the report came late
    assert states(gcs)[task] == ("FINISHED", "")


def test_a_gcs_restarted_on_redis_fails_the_unfinished_tasks_it_did_not_hold(
        tmp_path: Path) -> None:
    with RedisServer(appendfsync="no") as redis:
        first = Gcs(session_dir=tmp_path, storage_url=redis.url)
        try:
            register(first, JOB)
            running = report(first, 1, "RUNNING")
            done = report(first, 2, "FINISHED")
        finally:
            first.stop()
        second = Gcs(session_dir=tmp_path, storage_url=redis.url)
        try:
            assert second.tables["tasks"].hot_count() == 0
            second.finish_job(JOB)
            assert states(second) == {running: ("FAILED", "JOB_ENDED"), done: ("FINISHED", "")}
        finally:
            second.stop()


def test_the_tasks_of_a_driver_whose_node_died_fail_as_their_owner_died(gcs: Gcs) -> None:
    register(gcs, JOB)
    queued = report(gcs, 1, "PENDING_ARGS_AVAIL")
    gcs.end_jobs_driven_from(NODE, "no heartbeat for 30.0s")
    [record] = gcs.get_tasks(gcs_pb2.GetTasksRequest(task_ids=[queued])).tasks
    assert (record.state, record.error_type) == ("FAILED", "OWNER_DIED")
    assert record.error_message.startswith(
        "owner died: job 01000000 failed, its driver's node node-with-th died: "
        "no heartbeat for 30.0s, while the task was PENDING_ARGS_AVAIL")


def test_what_a_detached_actor_submitted_outlives_the_job_that_created_it(gcs: Gcs) -> None:
    register(gcs, JOB)
    actor = b"\x07" * 16
    gcs.actors.create(common_pb2.TaskSpec(
        actor_id=actor, job_id=JOB, resources={"CPU": 1.0},
        actor_options=common_pb2.ActorOptions(class_name="Service", detached=True)),
        get_if_exists=False)
    try:
        method = report(gcs, 1, "RUNNING", kind="ACTOR_TASK", actor_id=actor)
        child = report(gcs, 2, "RUNNING", parent_task_id=method)
        gcs.finish_job(JOB)
        late = report(gcs, 3, "PENDING_ARGS_AVAIL", parent_task_id=child)
        assert states(gcs) == {method: ("FAILED", "JOB_ENDED"), child: ("RUNNING", ""),
                               late: ("PENDING_ARGS_AVAIL", "")}
    finally:
        gcs.actors.kill(actor, no_restart=True)


def test_unfinished_tasks_a_burst_moved_out_of_memory_fail_too(tmp_path: Path) -> None:
    """Live records beyond max_live_entries leave memory: a job's end still finds them."""
    from tracedray.core.gcs.storage import FlushPolicy

    gcs = Gcs(session_dir=tmp_path, storage_url="memory",
              flush_policy=FlushPolicy(interval_s=60, max_hot_entries=0, min_age_s=0,
                                       max_live_entries=2))
    try:
        register(gcs, JOB)
        queued = [report(gcs, i, "PENDING_ARGS_AVAIL") for i in range(1, 6)]
        assert gcs.flusher.flush_now().per_table["tasks"].entries == 3  # the 3 oldest
        gcs.finish_job(JOB)
        assert states(gcs) == {task_id: ("FAILED", "JOB_ENDED") for task_id in queued}
    finally:
        gcs.stop()
