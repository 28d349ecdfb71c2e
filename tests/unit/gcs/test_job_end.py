"""How a job ends given its record now, and which evidence ends it (pure)."""

from __future__ import annotations

import pytest

from tracedray._proto.v1 import common_pb2, gcs_pb2
from tracedray.core.gcs import job_end

NODE = "a1b2c3d4e5f6a7b8c9d0"
JOB_ID = bytes.fromhex("01000000")


def job(state: str = job_end.RUNNING, *, worker_id: str = "driver-1",
        node_id: str = NODE) -> gcs_pb2.JobInfo:
    return gcs_pb2.JobInfo(job_id=JOB_ID, state=state, driver=common_pb2.Address(
        node_id=node_id, ip="127.0.0.1", port=4000, worker_id=worker_id, pid=42))


def death(worker_id: str = "driver-1") -> gcs_pb2.DriverDeath:
    return gcs_pb2.DriverDeath(job_id=JOB_ID, node_id=NODE, worker_id=worker_id, pid=42,
                               why="process 42 is gone")


def test_a_driver_finishing_its_running_job_finishes_it() -> None:
    assert job_end.on_driver_finish(job()) == job_end.FINISHED_BY_DRIVER
    assert job_end.FINISHED_BY_DRIVER.state == job_end.FINISHED


def test_a_driver_finishing_a_job_the_gcs_never_recorded_records_it_finished() -> None:
    assert job_end.on_driver_finish(None) == job_end.FINISHED_BY_DRIVER


@pytest.mark.parametrize("state", [job_end.FINISHED, job_end.FAILED])
def test_a_job_ends_once(state: str) -> None:
    # A driver declared dead with its node that later shuts down, a finish sent twice.
    assert job_end.on_driver_finish(job(state)) is None
    assert job_end.on_driver_death(job(state), death()) is None
    assert job_end.on_node_death(job(state), NODE, "no heartbeat for 30.0s") is None


def test_a_dead_driver_fails_its_running_job_and_says_why() -> None:
    ending = job_end.on_driver_death(job(), death())
    assert ending is not None and ending.state == job_end.FAILED
    assert ending.reason == f"its driver died: process 42 is gone (pid 42, node {NODE[:12]})"


def test_a_driver_that_finished_its_job_then_exited_changes_nothing() -> None:
    assert job_end.on_driver_death(job(job_end.FINISHED), death()) is None


def test_a_death_of_a_driver_whose_job_was_never_registered_ends_nothing() -> None:
    # It died between registering with its raylet and registering its job.
    assert job_end.on_driver_death(None, death()) is None


def test_a_death_of_another_process_than_the_jobs_driver_ends_nothing() -> None:
    assert job_end.on_driver_death(job(worker_id="driver-2"), death("driver-1")) is None


def test_a_node_death_fails_the_running_jobs_of_drivers_attached_to_it() -> None:
    ending = job_end.on_node_death(job(), NODE, "no heartbeat for 30.0s (timeout 30.0s)")
    assert ending == job_end.Ending(job_end.FAILED, f"its driver's node {NODE[:12]} died: "
                                                    "no heartbeat for 30.0s (timeout 30.0s)")


def test_a_node_death_leaves_jobs_of_drivers_elsewhere_running() -> None:
    assert job_end.on_node_death(job(node_id="another-node"), NODE, "its raylet exited") is None
    assert job_end.on_node_death(None, NODE, "its raylet exited") is None


def test_an_actor_dying_with_its_job_says_how_the_job_ended() -> None:
    assert job_end.actor_death_cause(JOB_ID, job_end.FINISHED_BY_DRIVER) == (
        "its job 01000000 finished (the actor is not detached)")
    failed = job_end.Ending(job_end.FAILED, "its driver died: process 42 is gone")
    assert job_end.actor_death_cause(JOB_ID, failed) == (
        "its job 01000000 failed, its driver died: process 42 is gone "
        "(the actor is not detached)")
