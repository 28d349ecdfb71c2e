"""The GCS's jobs table: a job ends once, by its driver's finish, its driver's death or
its driver's node's death, and its non-detached actors die with it (a GCS in this
process, no nodes: actors stay pending)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tracedray._proto.v1 import common_pb2, gcs_pb2
from tracedray.core.gcs import job_end
from tracedray.core.gcs.server import Gcs

NODE, OTHER_NODE = "node-with-the-driver", "another-node"


@pytest.fixture
def gcs(tmp_path: Path) -> Iterator[Gcs]:
    server = Gcs(session_dir=tmp_path, storage_url="memory", flushing=False)
    try:
        yield server
    finally:
        # Their placements wait for a node that never comes, until the actor is dead.
        for actor in server.actors.list():
            server.actors.kill(actor.actor_id, no_restart=True)
        server.stop()


def register(gcs: Gcs, job_id: bytes, node_id: str = NODE) -> None:
    gcs.register_job(gcs_pb2.JobInfo(job_id=job_id, start_time=1.0, driver=common_pb2.Address(
        node_id=node_id, ip="127.0.0.1", port=4000, worker_id=f"driver-{job_id.hex()}",
        pid=42)))


def death(job_id: bytes) -> gcs_pb2.DriverDeath:
    return gcs_pb2.DriverDeath(job_id=job_id, node_id=NODE, worker_id=f"driver-{job_id.hex()}",
                               pid=42, why="process 42 is gone")


def jobs(gcs: Gcs) -> dict[bytes, gcs_pb2.JobInfo]:
    return {bytes.fromhex(key): gcs_pb2.JobInfo.FromString(raw)
            for key, raw in gcs.tables["jobs"].scan()}


def create_actor(gcs: Gcs, job_id: bytes, index: int, *, detached: bool) -> bytes:
    actor_id = bytes([index]) * 16
    gcs.actors.create(common_pb2.TaskSpec(
        actor_id=actor_id, job_id=job_id, resources={"CPU": 1.0},
        actor_options=common_pb2.ActorOptions(class_name="A", detached=detached)),
        get_if_exists=False)
    return actor_id


def test_a_dead_drivers_job_fails_and_its_actors_die_but_detached_ones(gcs: Gcs) -> None:
    job_id = b"\x01\x00\x00\x00"
    register(gcs, job_id)
    owned = create_actor(gcs, job_id, 1, detached=False)
    kept = create_actor(gcs, job_id, 2, detached=True)

    reply = gcs.on_driver_death(death(job_id))

    assert reply == gcs_pb2.DriverDeathReply(job_ended=True, job_state=job_end.FAILED)
    job = jobs(gcs)[job_id]
    assert job.state == job_end.FAILED and job.end_time > job.start_time
    assert job.end_reason.startswith("its driver died: process 42 is gone"), job
    states = {a.actor_id: a for a in gcs.actors.list()}
    assert states[owned].state == "DEAD"
    assert states[owned].death_cause.startswith(f"its job {job_id.hex()} failed, its driver died")
    assert states[kept].state == "PENDING_CREATION"


def test_a_job_its_driver_finished_stays_finished_when_the_driver_exits(gcs: Gcs) -> None:
    job_id = b"\x02\x00\x00\x00"
    register(gcs, job_id)
    gcs.finish_job(job_id)
    finished = jobs(gcs)[job_id]
    assert (finished.state, finished.end_reason) == (job_end.FINISHED,
                                                     job_end.FINISHED_BY_DRIVER.reason)

    reply = gcs.on_driver_death(death(job_id))

    assert reply == gcs_pb2.DriverDeathReply(job_ended=False, job_state=job_end.FINISHED)
    assert jobs(gcs)[job_id] == finished


def test_a_second_report_of_the_same_death_changes_nothing(gcs: Gcs) -> None:
    job_id = b"\x03\x00\x00\x00"
    register(gcs, job_id)
    assert gcs.on_driver_death(death(job_id)).job_ended
    failed = jobs(gcs)[job_id]
    assert not gcs.on_driver_death(death(job_id)).job_ended
    assert jobs(gcs)[job_id] == failed


def test_a_report_for_a_job_never_registered_records_nothing(gcs: Gcs) -> None:
    assert gcs.on_driver_death(death(b"\x04\x00\x00\x00")) == gcs_pb2.DriverDeathReply()
    assert jobs(gcs) == {}


def test_a_node_death_fails_the_jobs_of_the_drivers_attached_to_it(gcs: Gcs) -> None:
    here, elsewhere, done = b"\x05\x00\x00\x00", b"\x06\x00\x00\x00", b"\x07\x00\x00\x00"
    register(gcs, here)
    register(gcs, elsewhere, node_id=OTHER_NODE)
    register(gcs, done)
    gcs.finish_job(done)
    owned = create_actor(gcs, here, 3, detached=False)

    gcs.end_jobs_driven_from(NODE, "no heartbeat for 30.0s (timeout 30.0s)")

    table = jobs(gcs)
    assert table[here].state == job_end.FAILED
    assert table[here].end_reason == (f"its driver's node {NODE[:12]} died: no heartbeat for "
                                      "30.0s (timeout 30.0s)")
    assert table[elsewhere].state == job_end.RUNNING
    assert table[done].state == job_end.FINISHED
    (actor,) = [a for a in gcs.actors.list() if a.actor_id == owned]
    assert actor.state == "DEAD" and "its driver's node" in actor.death_cause
