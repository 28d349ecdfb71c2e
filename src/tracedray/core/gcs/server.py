"""The GCS: the cluster's tables, and the parts that keep them, behind one gRPC service.

Tables live in ``TieredTable``s over the configured storage (memory + SQLite, or
Redis), so finished entries leave memory and, on Redis, a restarted GCS finds
everything again. Each concern has its part: nodes and their health
(``node_directory``), jobs (``jobs``), actors (``actor_manager``), tasks and the state
queries over them (``task_records``); ``servicer`` answers the RPCs with them. Live
state (node liveness, actor state machines) is rebuilt from the tables at start.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracedray import logs
from tracedray._proto.v1 import gcs_pb2, gcs_pb2_grpc
from tracedray.core import rpc
from tracedray.core.gcs import tasks_backpressure
from tracedray.core.gcs.actor_manager import ActorManager
from tracedray.core.gcs.jobs import JobBook
from tracedray.core.gcs.node_directory import NodeDirectory
from tracedray.core.gcs.servicer import GcsServicer
from tracedray.core.gcs.storage import (
    Flusher,
    FlushPolicy,
    TieredTable,
    is_write_through,
    open_storage,
)
from tracedray.core.gcs.task_records import TaskRecords

log = logs.get_logger(__name__)
TABLES = ("nodes", "jobs", "kv", "actors", "tasks")
# Written through to any storage, the embedded one too: a GCS SIGKILL must lose no node,
# job, actor or function (they change rarely); the task table may stay flushed-behind.
DURABLE_TABLES = frozenset({"nodes", "jobs", "kv", "actors"})


@dataclass(frozen=True)
class GcsStatistics:
    nodes_alive: int
    nodes_dead: int
    # Times the node watch woke late (the GCS process was starved), and for how long in
    # all: that time is left out of nodes' silence, so nodes outlive the GCS's stalls.
    watch_stalls_total: int
    watch_stalled_s_total: float
    longest_watch_stall_s: float
    # Task-event batches that found the hot set over its high-water mark and flushed it
    # before answering: the producers waited instead of the GCS's memory growing.
    backpressure_flushes_total: int = 0
    jobs_ended_total: int = 0  # by this GCS
    tasks_failed_at_job_end_total: int = 0  # by this GCS
    actor_restarts_total: int = 0  # of the actors this GCS knows
    actor_creations_under_way: int = 0


class Gcs:
    def __init__(self, *, session_dir: Path, storage_url: str, port: int = 0,
                 listen_host: str = "127.0.0.1", flush_policy: FlushPolicy | None = None,
                 flushing: bool = True) -> None:
        self.session_dir = session_dir
        opened = time.perf_counter()
        self.storage = open_storage(storage_url, session_dir=session_dir)
        self._storage_open_s = time.perf_counter() - opened
        through = is_write_through(self.storage)
        self.tables = {name: TieredTable(name, self.storage,
                                         write_through=through or name in DURABLE_TABLES)
                       for name in TABLES}
        policy = flush_policy or FlushPolicy()
        self.flusher = Flusher(self.tables, policy, enabled=flushing)
        # A burst the flusher thread cannot keep up with (a starved machine) is flushed
        # by the batches that grow the hot set past twice its bound, each half-bound of
        # growth once: the producers wait for it rather than the GCS's memory growing.
        backpressure = (tasks_backpressure.Backpressure(policy.max_hot_entries)
                        if flushing and policy.max_hot_entries > 0 else None)
        self.nodes = NodeDirectory(self.tables["nodes"], on_dead=self._on_node_death)
        self.actors = ActorManager(nodes=self.nodes.all, persist=self._persist_actor)
        self.tasks = TaskRecords(self.tables["tasks"], self.flusher, backpressure,
                                 outliving=self.actors.outliving)
        self.jobs = JobBook(self.tables["jobs"], self.tasks,
                            end_actors=self.actors.on_job_finished)
        self._server = rpc.make_server(max_workers=128)
        gcs_pb2_grpc.add_GcsServiceServicer_to_server(GcsServicer(self), self._server)
        self.port = rpc.bind(self._server, listen_host, port)
        self._recover()

    def _recover(self) -> None:
        started = time.perf_counter()
        nodes = self.nodes.restore()
        actors = [gcs_pb2.ActorInfo.FromString(v) for _, v in self.tables["actors"].scan()]
        self.actors.restore(actors)
        self.jobs.restore()
        if nodes or actors:
            # How long a restart spent where (gcs_failover.py measures the whole).
            log.info("gcs.recovered", nodes=nodes, actors=len(actors),
                     storage=self.storage.description,
                     storage_open_s=round(self._storage_open_s, 3),
                     recover_s=round(time.perf_counter() - started, 3))

    def start(self) -> None:
        self._server.start()
        self.flusher.start()
        self.nodes.start()
        log.info("gcs.start", port=self.port, storage=self.storage.description)

    def stop(self) -> None:
        self.nodes.stop()
        self._server.stop(grace=0.5)
        self.jobs.stop()
        self.flusher.stop()
        self._persist_last_state()
        self.storage.close()

    def _persist_last_state(self) -> None:
        """Leave every table whole in the storage, the hot entries too (live nodes, jobs,
        unfinished tasks): ``tracedray list``/``memory`` on the stopped cluster read it."""
        for table in self.tables.values():
            try:
                table.persist_hot()
            except Exception as exc:  # noqa: BLE001 - stopping anyway: say it and go on
                log.warning("gcs.persist_failed", table=table.name, error=repr(exc))

    def statistics(self) -> GcsStatistics:
        nodes, tasks = self.nodes.statistics(), self.tasks.statistics()
        actors = self.actors.statistics()
        return GcsStatistics(
            nodes_alive=nodes.nodes_alive, nodes_dead=nodes.nodes_dead,
            watch_stalls_total=nodes.watch_stalls_total,
            watch_stalled_s_total=nodes.watch_stalled_s_total,
            longest_watch_stall_s=nodes.longest_watch_stall_s,
            backpressure_flushes_total=tasks.backpressure_flushes_total,
            jobs_ended_total=sum(self.jobs.statistics().ended_total.values()),
            tasks_failed_at_job_end_total=tasks.failed_at_job_end_total,
            actor_restarts_total=actors.restarts_total,
            actor_creations_under_way=actors.creations_under_way)

    def _on_node_death(self, info: gcs_pb2.NodeInfo) -> None:
        self.actors.on_node_death(info.node_id)
        self.jobs.on_node_death(info.node_id, info.death_reason)

    def _persist_actor(self, info: gcs_pb2.ActorInfo) -> None:
        self.tables["actors"].put(info.actor_id.hex(), info.SerializeToString(),
                                  finished=info.state == "DEAD")

    # --- what tests and the metrics collector call
    def node_list(self) -> list[gcs_pb2.NodeWithLoad]:
        return self.nodes.all()

    def register_node(self, info: gcs_pb2.NodeInfo) -> None:
        self.nodes.register(info)

    def register_job(self, job: gcs_pb2.JobInfo) -> None:
        self.jobs.register(job)

    def finish_job(self, job_id: bytes) -> None:
        self.jobs.finish(job_id)

    def on_driver_death(self, death: gcs_pb2.DriverDeath) -> gcs_pb2.DriverDeathReply:
        return self.jobs.on_driver_death(death)

    def end_jobs_driven_from(self, node_id: str, death_reason: str) -> None:
        self.jobs.end_jobs_driven_from(node_id, death_reason)

    def add_task_events(self, events: Any) -> None:
        self.tasks.add_events(events)

    def get_tasks(self, request: gcs_pb2.GetTasksRequest) -> gcs_pb2.GetTasksReply:
        return self.tasks.get(request)
