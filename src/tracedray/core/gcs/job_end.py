"""How a job ends, and which evidence ends it.

A job is ``RUNNING`` from its driver's ``init()`` until the driver finishes it
(``shutdown()``, or the exit hook at interpreter exit): ``FINISHED``. A driver that dies
first (SIGKILL, a hard crash, its node's death) finishes nothing, so others tell the GCS:
the raylet the driver registered with, which watches its process
(``raylet/driver_watch.py``), or the GCS itself when it declares that node dead. The job
then ends ``FAILED``, the evidence in its end reason. Either way the GCS then does what
a job's end does: the job's non-detached actors die, and their creations still waiting
for resources are withdrawn.

A job ends once: evidence that comes after its end (a driver that finished its job, then
exited) changes nothing. Only evidence of the driver's death ends a job: a driver that
merely does not answer is never reported (``driver_watch`` says what counts).

Each function answers how the job ends given its record now (None: the GCS has none),
or None when it does not end; ``jobs.JobBook`` reads and writes the jobs table under its
lock and runs the end.
"""

from __future__ import annotations

from dataclasses import dataclass

from tracedray._proto.v1 import gcs_pb2

RUNNING, FINISHED, FAILED = "RUNNING", "FINISHED", "FAILED"


@dataclass(frozen=True)
class Ending:
    state: str  # FINISHED | FAILED
    reason: str


FINISHED_BY_DRIVER = Ending(FINISHED, "its driver finished it (shutdown() or exit)")


def on_driver_finish(job: gcs_pb2.JobInfo | None) -> Ending | None:
    """The driver finishes its job. A job the GCS has no record of is recorded finished,
    as it always was; one that ended already stays as it ended."""
    return FINISHED_BY_DRIVER if job is None or job.state == RUNNING else None


def on_driver_death(job: gcs_pb2.JobInfo | None, death: gcs_pb2.DriverDeath) -> Ending | None:
    """The raylet the driver registered with saw its process die. Nothing ends when the
    job ended already (the driver finished it, then exited), when the GCS has no record
    of it (the driver died before registering it), or when the job's driver is another
    process than the one reported."""
    if job is None or job.state != RUNNING:
        return None
    if job.driver.worker_id != death.worker_id:
        return None
    return Ending(FAILED, f"its driver died: {death.why} (pid {death.pid}, "
                          f"node {death.node_id[:12]})")


def on_node_death(job: gcs_pb2.JobInfo | None, node_id: str, death_reason: str
                  ) -> Ending | None:
    """The GCS declared ``node_id`` dead. A running job whose driver registered with that
    node's raylet (it runs on that machine; without its raylet it can do nothing) fails."""
    if job is None or job.state != RUNNING or job.driver.node_id != node_id:
        return None
    return Ending(FAILED, f"its driver's node {node_id[:12]} died: {death_reason}")


def actor_death_cause(job_id: bytes, ending: Ending) -> str:
    """Why a non-detached actor of the job dies with it."""
    if ending.state == FINISHED:
        return f"its job {job_id.hex()} finished (the actor is not detached)"
    return f"its job {job_id.hex()} failed, {ending.reason} (the actor is not detached)"
