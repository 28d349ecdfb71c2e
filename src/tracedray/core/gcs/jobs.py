"""The GCS's jobs: registered by their drivers, ended once (``job_end`` decides how),
after which their non-detached actors die and their unfinished tasks fail.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tracedray import logs
from tracedray._proto.v1 import gcs_pb2
from tracedray.core.gcs import job_end, job_tasks
from tracedray.core.gcs.storage import TieredTable
from tracedray.core.gcs.task_records import TaskRecords
from tracedray.telemetry.cluster_events import GcsEvents

log = logs.get_logger(__name__)
_events = GcsEvents(log)


@dataclass(frozen=True)
class JobStatistics:
    registered_total: int  # by this GCS
    ended_total: dict[str, int]  # by this GCS, by end state (FINISHED, FAILED)


class JobBook:
    """``end_actors(job_id, cause)`` has the ended job's non-detached actors die."""

    def __init__(self, table: TieredTable, tasks: TaskRecords, *,
                 end_actors: Callable[[bytes, str], None]) -> None:
        self._table = table
        self._tasks = tasks
        self._end_actors = end_actors
        # A job's state changes (read, decide, write) one at a time: it ends once.
        self._lock = threading.Lock()
        # Ends the jobs of drivers on a node declared dead, off the node watch: ending a
        # job waits for raylets to withdraw its actors' creations.
        self._node_ends = ThreadPoolExecutor(max_workers=1,
                                             thread_name_prefix="tracedray-job-end")
        self._registered = 0
        self._ended: Counter[str] = Counter()

    def restore(self) -> None:
        """After a GCS restart: the tasks of the jobs that had ended stay failed."""
        for _, raw in self._table.scan():
            verdict = job_tasks.verdict_for(gcs_pb2.JobInfo.FromString(raw))
            if verdict is not None:
                self._tasks.job_ended(verdict)

    def stop(self) -> None:
        self._node_ends.shutdown(wait=False, cancel_futures=True)

    def statistics(self) -> JobStatistics:
        with self._lock:
            return JobStatistics(self._registered, dict(self._ended))

    def all(self) -> list[gcs_pb2.JobInfo]:
        return [gcs_pb2.JobInfo.FromString(v) for _, v in self._table.scan()]

    def register(self, job: gcs_pb2.JobInfo) -> None:
        job.state = job_end.RUNNING
        with self._lock:
            self._table.put(job.job_id.hex(), job.SerializeToString(), finished=False)
            self._registered += 1
        log.info("job.start", job_id=job.job_id.hex(), entrypoint=job.entrypoint)

    def finish(self, job_id: bytes) -> None:
        """Its driver finishes it (``shutdown()``, or its exit)."""
        self._end(job_id, job_end.on_driver_finish)

    def on_driver_death(self, death: gcs_pb2.DriverDeath) -> gcs_pb2.DriverDeathReply:
        """The raylet the driver registered with saw its process die."""
        job, ended = self._end(death.job_id, lambda j: job_end.on_driver_death(j, death))
        if not ended:  # usually a driver that finished its job, then exited (the raylet says)
            log.debug("job.driver_death_ignored", job_id=death.job_id.hex(),
                     driver_pid=death.pid, job_state=job.state if job else "",
                     why=death.why)
        return gcs_pb2.DriverDeathReply(job_ended=ended, job_state=job.state if job else "")

    def on_node_death(self, node_id: str, death_reason: str) -> None:
        """The node is dead: the jobs of its drivers end, on a thread of their own."""
        self._node_ends.submit(self.end_jobs_driven_from, node_id, death_reason)

    def end_jobs_driven_from(self, node_id: str, death_reason: str) -> None:
        """The node is dead: so are the drivers registered with its raylet."""
        try:
            for job in self.all():
                if job_end.on_node_death(job, node_id, death_reason) is not None:
                    self._end(job.job_id,
                              lambda j: job_end.on_node_death(j, node_id, death_reason))
        except Exception as exc:  # noqa: BLE001 - a pool thread: say it, or nobody will
            log.error("job.end_failed", node_id=node_id, error=repr(exc))

    def _end(self, job_id: bytes,
             decide: Callable[[gcs_pb2.JobInfo | None], job_end.Ending | None]
             ) -> tuple[gcs_pb2.JobInfo | None, bool]:
        """End the job if ``decide`` says how, given its record now; then its
        non-detached actors die and its unfinished tasks fail. Returns the record after,
        and whether it ended now."""
        with self._lock:
            raw = self._table.get(job_id.hex())
            job = gcs_pb2.JobInfo.FromString(raw) if raw else None
            ending = decide(job)
            if ending is None:
                return job, False
            job = job if job is not None else gcs_pb2.JobInfo(job_id=job_id)
            job.state, job.end_reason, job.end_time = ending.state, ending.reason, time.time()
            self._table.put(job_id.hex(), job.SerializeToString(), finished=True)
            self._ended[ending.state] += 1
        with _events.job_finish(job_id, ending.state, ending.reason, job.driver.pid,
                                finished=ending.state == job_end.FINISHED):
            self._end_actors(job_id, job_end.actor_death_cause(job_id, ending))
        verdict = job_tasks.verdict_for(job)
        assert verdict is not None  # the job has just ended
        self._tasks.job_ended(verdict)
        self._tasks.fail_unfinished(job_id)
        return job, True
