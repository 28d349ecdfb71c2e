"""The GCS: the cluster's tables behind one gRPC service.

Tables live in ``TieredTable``s over the configured storage (memory + SQLite, or
Redis), so finished entries leave memory and, on Redis, a restarted GCS finds
everything again. Live state (node liveness, actor state machines) is rebuilt
from the tables at start.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.trace import Status, StatusCode

from tracedray import config, logs, telemetry
from tracedray._proto.v1 import common_pb2, gcs_pb2, gcs_pb2_grpc
from tracedray.core import rpc
from tracedray.core.environment import drift
from tracedray.core.gcs import job_end, job_tasks, node_health, task_query, tasks_backpressure
from tracedray.core.gcs.actor_manager import ActorManager
from tracedray.core.gcs.storage import (
    Flusher,
    FlushPolicy,
    TieredTable,
    is_write_through,
    open_storage,
)
from tracedray.telemetry import attributes as A
from tracedray.telemetry import remote_parent

log = logs.get_logger(__name__)
TABLES = ("nodes", "jobs", "kv", "actors", "tasks")
# Written through to any storage, the embedded one too: a GCS SIGKILL must lose no node,
# job, actor or function (they change rarely); the task table may stay flushed-behind.
DURABLE_TABLES = frozenset({"nodes", "jobs", "kv", "actors"})
TERMINAL = job_tasks.TERMINAL
# Task records a job's end fails per hold of the lock: task events wait meanwhile.
_FAIL_BATCH = 500


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
        self._backpressure = (tasks_backpressure.Backpressure(policy.max_hot_entries)
                              if flushing and policy.max_hot_entries > 0 else None)
        self._lock = threading.RLock()
        self._nodes: dict[str, gcs_pb2.NodeWithLoad] = {}
        self._head_env: dict[str, str] = {}
        # Stretches (wall clock start, end) the node watch was stalled: node_health.
        self._stalls: deque[tuple[float, float]] = deque()
        self._stalls_total = 0
        self._stalled_s_total = 0.0
        self._longest_stall_s = 0.0
        self.actors = ActorManager(nodes=self.node_list, persist=self._persist_actor)
        # A job's state changes (read, decide, write) one at a time: it ends once.
        self._jobs_lock = threading.Lock()
        # Ends the jobs of drivers on a node declared dead, off the node watch: ending a
        # job waits for raylets to withdraw its actors' creations.
        self._job_ends = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tracedray-job-end")
        # Ended jobs: the tasks of each that are still unfinished, or whose events come
        # after its end, are failed (job_tasks). Guarded by _lock, as the task table is.
        self._verdicts: dict[bytes, job_tasks.Verdict] = {}
        # Whether the task table's storage held records when this GCS started (a GCS
        # restarted on Redis): unfinished ones may be there and not in memory.
        self._tasks_stored_before = False
        self._stopped = threading.Event()
        self._server = rpc.make_server(max_workers=128)
        gcs_pb2_grpc.add_GcsServiceServicer_to_server(_Servicer(self), self._server)
        self.port = rpc.bind(self._server, listen_host, port)
        self._recover()

    def _recover(self) -> None:
        started = time.perf_counter()
        nodes = [gcs_pb2.NodeInfo.FromString(v) for _, v in self.tables["nodes"].scan()]
        now = time.time()
        for info in nodes:
            self._nodes[info.node_id] = gcs_pb2.NodeWithLoad(info=info, last_heartbeat=now)
            if info.is_head:
                self._head_env = dict(info.environment)
        actors = [gcs_pb2.ActorInfo.FromString(v) for _, v in self.tables["actors"].scan()]
        self.actors.restore(actors)
        for _, raw in self.tables["jobs"].scan():
            verdict = job_tasks.verdict_for(gcs_pb2.JobInfo.FromString(raw))
            if verdict is not None:
                self._verdicts[verdict.job_id] = verdict
        # Unfinished records may be in the storage: a write-through table's, and the
        # embedded cold tier's once a burst moved live records there (max_live_entries).
        tasks = self.tables["tasks"]
        self._tasks_stored_before = len(tasks) > 0
        if nodes or actors:
            # How long a restart spent where (gcs_failover.py measures the whole).
            log.info("gcs.recovered", nodes=len(nodes), actors=len(actors),
                     storage=self.storage.description,
                     storage_open_s=round(self._storage_open_s, 3),
                     recover_s=round(time.perf_counter() - started, 3))

    def start(self) -> None:
        self._server.start()
        self.flusher.start()
        threading.Thread(target=self._watch_nodes, daemon=True, name="tracedray-node-watch").start()
        log.info("gcs.start", port=self.port, storage=self.storage.description)

    def stop(self) -> None:
        self._stopped.set()
        self._server.stop(grace=0.5)
        self._job_ends.shutdown(wait=False, cancel_futures=True)
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

    # --- nodes
    def node_list(self) -> list[gcs_pb2.NodeWithLoad]:
        with self._lock:
            return list(self._nodes.values())

    def register_node(self, info: gcs_pb2.NodeInfo) -> None:
        with self._lock:
            if info.is_head or not self._head_env:
                self._head_env = dict(info.environment) if info.is_head else self._head_env
            differences = drift(self._head_env, dict(info.environment)) if self._head_env else []
            info.ClearField("version_drift")
            info.version_drift.extend(differences)
            entry = gcs_pb2.NodeWithLoad(info=info, last_heartbeat=time.time())
            entry.resources_available.update(info.resources_total)
            self._nodes[info.node_id] = entry
            self.tables["nodes"].put(info.node_id, info.SerializeToString(), finished=False)
        if differences:
            log.warning("node.version_drift", node_id=info.node_id, differences=differences)
        log.info("node.registered", node_id=info.node_id, address=f"{info.raylet.ip}:"
                 f"{info.raylet.port}", resources=dict(info.resources_total))

    def heartbeat(self, request: gcs_pb2.HeartbeatRequest) -> gcs_pb2.HeartbeatReply:
        now = time.time()
        with self._lock:
            entry = self._nodes.get(request.node_id)
            if entry is None:
                return gcs_pb2.HeartbeatReply(gcs_time=now, unknown_node=True)
            if entry.info.state == "DEAD":
                return gcs_pb2.HeartbeatReply(gcs_time=now, declared_dead=True,
                                              death_reason=entry.info.death_reason)
            entry.last_heartbeat = now
            entry.resources_available.clear()
            entry.resources_available.update(request.resources_available)
            entry.store_used = request.store_used
            entry.pending_leases = request.pending_leases
            entry.infeasible_leases = request.infeasible_leases
            # The raylet measured it over the previous heartbeat's round trip (node_health).
            if request.has_clock_estimate:
                entry.info.clock_offset_s = request.clock_offset_s
                entry.info.clock_rtt_s = request.clock_rtt_s
        return gcs_pb2.HeartbeatReply(gcs_time=now)

    def _watch_nodes(self) -> None:
        timeout = config.NODE_DEATH_TIMEOUT_S.get()
        interval = config.HEARTBEAT_INTERVAL_S.get()
        period = min(0.5, interval)
        while True:
            expected = time.monotonic() + period
            if self._stopped.wait(period):
                return
            with self._lock:
                # Measured with the lock held: heartbeats wait for it too.
                now = time.time()
                self._note_stall(now, node_health.stall_after(expected, time.monotonic()),
                                 horizon_s=10 * timeout, interval_s=interval)
                late = [(e.info.node_id, e.info.raylet.ip, e.info.raylet.port,
                         e.last_heartbeat) for e in self._nodes.values()
                        if e.info.state == "ALIVE"
                        and node_health.should_probe(now - e.last_heartbeat, interval)]
                stalls = list(self._stalls)
            # Probes run outside the lock: a connect may take up to its timeout.
            verdicts: dict[str, tuple[float, str]] = {}
            for node_id, ip, port, last in late:
                silent = now - last
                stalled = node_health.stalled_within(stalls, last, now)
                # Past the timeout the probe could not change the verdict: not made.
                probe = ("" if node_health.timed_out(silent, stalled, timeout)
                         else node_health.probe_port(ip, port))
                reason = node_health.death_reason(
                    node_health.Liveness(silent, interval, timeout, probe, stalled))
                if reason:
                    verdicts[node_id] = (last, reason)
            for info in self._mark_dead(verdicts):
                attributes = {A.NODE_ID: info.node_id, A.NODE_IP: info.raylet.ip,
                              A.NODE_DEATH_REASON: info.death_reason}
                with telemetry.span("node.dead", attributes):
                    log.warning("node.dead", node_id=info.node_id, ip=info.raylet.ip,
                                pid=info.raylet.pid, reason=info.death_reason)
                self.actors.on_node_death(info.node_id)
                self._job_ends.submit(self.end_jobs_driven_from, info.node_id,
                                      info.death_reason)

    def _note_stall(self, now: float, stalled_s: float, *, horizon_s: float,
                    interval_s: float) -> None:
        """Keep a stall of the node watch (the caller holds the lock), and forget those
        older than ``horizon_s``: no node is silent that long and still alive."""
        while self._stalls and self._stalls[0][1] < now - horizon_s:
            self._stalls.popleft()
        if not stalled_s:
            return
        self._stalls.append((now - stalled_s, now))
        self._stalls_total += 1
        self._stalled_s_total += stalled_s
        self._longest_stall_s = max(self._longest_stall_s, stalled_s)
        # A stall as long as a heartbeat interval may have cost nodes a heartbeat.
        (log.warning if stalled_s >= interval_s else log.debug)(
            "gcs.stalled", stalled_s=round(stalled_s, 3), stalls_total=self._stalls_total,
            why="the GCS's node watch woke late: this process was not scheduled or its "
                "lock was held; the time is left out of nodes' heartbeat silence")

    def statistics(self) -> GcsStatistics:
        with self._lock:
            states = [e.info.state for e in self._nodes.values()]
            return GcsStatistics(
                nodes_alive=states.count("ALIVE"), nodes_dead=states.count("DEAD"),
                watch_stalls_total=self._stalls_total,
                watch_stalled_s_total=self._stalled_s_total,
                longest_watch_stall_s=self._longest_stall_s,
                backpressure_flushes_total=(self._backpressure.flushes
                                            if self._backpressure is not None else 0))

    def _mark_dead(self, verdicts: dict[str, tuple[float, str]]) -> list[gcs_pb2.NodeInfo]:
        """``verdicts``: node id -> (the last heartbeat the verdict saw, why it is dead)."""
        dead = []
        with self._lock:
            for node_id, (last, reason) in verdicts.items():
                entry = self._nodes.get(node_id)
                if entry is None or entry.info.state != "ALIVE" or entry.last_heartbeat != last:
                    continue  # a heartbeat came back meanwhile: it stays alive
                entry.info.state = "DEAD"
                entry.info.end_time = time.time()
                entry.info.death_reason = reason
                self.tables["nodes"].put(node_id, entry.info.SerializeToString(), finished=False)
                dead.append(entry.info)
        return dead

    # --- jobs
    def register_job(self, job: gcs_pb2.JobInfo) -> None:
        job.state = job_end.RUNNING
        with self._jobs_lock:
            self.tables["jobs"].put(job.job_id.hex(), job.SerializeToString(), finished=False)
        log.info("job.start", job_id=job.job_id.hex(), entrypoint=job.entrypoint)

    def finish_job(self, job_id: bytes) -> None:
        """Its driver finishes it (``shutdown()``, or its exit)."""
        self._end_job(job_id, job_end.on_driver_finish)

    def on_driver_death(self, death: gcs_pb2.DriverDeath) -> gcs_pb2.DriverDeathReply:
        """The raylet the driver registered with saw its process die."""
        job, ended = self._end_job(death.job_id, lambda j: job_end.on_driver_death(j, death))
        if not ended:  # usually a driver that finished its job, then exited (the raylet says)
            log.debug("job.driver_death_ignored", job_id=death.job_id.hex(),
                     driver_pid=death.pid, job_state=job.state if job else "",
                     why=death.why)
        return gcs_pb2.DriverDeathReply(job_ended=ended, job_state=job.state if job else "")

    def end_jobs_driven_from(self, node_id: str, death_reason: str) -> None:
        """The node is dead: so are the drivers registered with its raylet."""
        try:
            jobs = [gcs_pb2.JobInfo.FromString(v) for _, v in self.tables["jobs"].scan()]
            for job in jobs:
                if job_end.on_node_death(job, node_id, death_reason) is not None:
                    self._end_job(job.job_id,
                                  lambda j: job_end.on_node_death(j, node_id, death_reason))
        except Exception as exc:  # noqa: BLE001 - a pool thread: say it, or nobody will
            log.error("job.end_failed", node_id=node_id, error=repr(exc))

    def _end_job(self, job_id: bytes,
                 decide: Callable[[gcs_pb2.JobInfo | None], job_end.Ending | None]
                 ) -> tuple[gcs_pb2.JobInfo | None, bool]:
        """End the job if ``decide`` says how, given its record now; then its
        non-detached actors die and its unfinished tasks fail. Returns the record after,
        and whether it ended now."""
        table = self.tables["jobs"]
        with self._jobs_lock:
            raw = table.get(job_id.hex())
            job = gcs_pb2.JobInfo.FromString(raw) if raw else None
            ending = decide(job)
            if ending is None:
                return job, False
            job = job if job is not None else gcs_pb2.JobInfo(job_id=job_id)
            job.state, job.end_reason, job.end_time = ending.state, ending.reason, time.time()
            table.put(job_id.hex(), job.SerializeToString(), finished=True)
        attributes = {A.JOB_ID: job_id.hex(), A.JOB_STATE: ending.state,
                      A.JOB_END_REASON: ending.reason}
        with telemetry.span("job.finish", attributes):
            (log.info if ending.state == job_end.FINISHED else log.warning)(
                "job.finish", job_id=job_id.hex(), state=ending.state, reason=ending.reason,
                driver_pid=job.driver.pid)
            self.actors.on_job_finished(job_id, job_end.actor_death_cause(job_id, ending))
        verdict = job_tasks.verdict_for(job)
        assert verdict is not None  # the job has just ended
        with self._lock:
            # From now on a task of the job whose events arrive is failed on arrival.
            self._verdicts[job_id] = verdict
        self.fail_unfinished_tasks(job_id)
        return job, True

    # --- actors
    def _persist_actor(self, info: gcs_pb2.ActorInfo) -> None:
        self.tables["actors"].put(info.actor_id.hex(), info.SerializeToString(),
                                  finished=info.state == "DEAD")

    # --- tasks
    def fail_unfinished_tasks(self, job_id: bytes) -> int:
        """Fail the tasks of the ended job ``job_id`` that have not ended (job_tasks);
        returns how many. Unfinished records stay in memory up to the flush policy's
        ``max_live_entries``, so memory is searched, and the storage too where a burst
        moved some there or it held records before this GCS started."""
        try:
            table = self.tables["tasks"]
            # A record of the job holds its id verbatim: others are skipped unparsed.
            keys = [key for key, raw in table.live_items() if job_id in raw]
            if self._tasks_stored_before or table.live_flushed():
                keys.extend(key for key, raw in table.scan() if job_id in raw)
            failed = self._fail_tasks(list(dict.fromkeys(keys)))
            if failed:
                counts = Counter(record.function_name for record, _ in failed)
                log.warning("job.tasks_failed", job_id=job_id.hex(), tasks=len(failed),
                            by_function=dict(counts), error_type=failed[0][1].error_type)
            return len(failed)
        except Exception as exc:  # noqa: BLE001 - the job has ended: its end goes on
            log.error("job.tasks_fail_failed", job_id=job_id.hex(), error=repr(exc))
            return 0

    def _fail_tasks(self, keys: list[str]
                    ) -> list[tuple[gcs_pb2.TaskRecord, gcs_pb2.TaskEvent]]:
        """Fail those of these tasks that their job's end left unfinished; each is read
        and written under the lock, so that no event of it comes in between."""
        if not keys:
            return []
        outliving = {a.actor_id for a in self.actors.list()
                     if a.detached and a.state != "DEAD"}
        table = self.tables["tasks"]
        failed = []
        for start in range(0, len(keys), _FAIL_BATCH):
            with self._lock:
                updates = {}
                for key in keys[start:start + _FAIL_BATCH]:
                    raw = table.get(key)
                    if raw is None:
                        continue
                    record = gcs_pb2.TaskRecord.FromString(raw)
                    verdict = self._verdicts.get(record.job_id)
                    event = (None if verdict is None else job_tasks.failure_event(
                        record, verdict, outliving, self._ancestors(record)))
                    if event is None:
                        continue
                    job_tasks.merge(record, event)
                    updates[key] = record.SerializeToString()
                    failed.append((record, event))
                table.put_many(updates, finished=True)
        for record, event in failed:
            _record_task_failure(record, event)
        return failed

    def _ancestors(self, record: gcs_pb2.TaskRecord) -> list[gcs_pb2.TaskRecord]:
        """The task's parent, its parent's parent, … as the task table has them (a
        driver's tasks have none: nothing is read)."""
        table = self.tables["tasks"]
        found: list[gcs_pb2.TaskRecord] = []
        parent = record.parent_task_id
        while parent and len(found) < job_tasks.MAX_ANCESTORS:
            raw = table.get(parent.hex())
            if raw is None:
                break
            found.append(gcs_pb2.TaskRecord.FromString(raw))
            parent = found[-1].parent_task_id
        return found

    def add_task_events(self, events: Any) -> None:
        table = self.tables["tasks"]
        with self._lock:
            records: dict[str, gcs_pb2.TaskRecord] = {}
            for event in events:
                key = event.task_id.hex()
                record = records.get(key)
                if record is None:
                    raw = table.get(key)
                    record = gcs_pb2.TaskRecord.FromString(raw) if raw else gcs_pb2.TaskRecord(
                        task_id=event.task_id, job_id=event.job_id, kind=event.kind)
                    records[key] = record
                job_tasks.merge(record, event)
            # One write per batch and kind (one pipelined round trip on Redis), and each
            # task once, however many of its events the batch carried.
            for finished in (True, False):
                table.put_many({key: record.SerializeToString() for key, record in records.items()
                                if (record.state in TERMINAL) == finished}, finished=finished)
            late = ([key for key, record in records.items()
                     if record.state not in TERMINAL and record.job_id in self._verdicts]
                    if self._verdicts else [])
        # Tasks of a job that has ended: their reports came after the job's end.
        self._fail_tasks(late)
        if self._backpressure is not None and self._backpressure.due(table.hot_count()):
            self.flusher.flush_now()
            self._backpressure.flushed(table.hot_count())

    def get_tasks(self, request: gcs_pb2.GetTasksRequest) -> gcs_pb2.GetTasksReply:
        table = self.tables["tasks"]
        if task_query.is_query(request):
            return task_query.query_tasks(table.scan(prefix=request.id_prefix.lower()), request)
        reply = gcs_pb2.GetTasksReply()
        if request.task_ids:
            for task_id in request.task_ids:
                raw = table.get(task_id.hex())
                if raw:
                    reply.tasks.append(gcs_pb2.TaskRecord.FromString(raw))
            reply.total = len(reply.tasks)
            return reply
        if not request.job_id:
            # The count is O(1) on Redis and one batched lookup of the hot keys otherwise,
            # so a `--limit`ed listing parses only the records it returns.
            reply.total = len(table)
            for _, raw in table.scan():
                if request.limit and len(reply.tasks) >= request.limit:
                    break
                reply.tasks.append(gcs_pb2.TaskRecord.FromString(raw))
            return reply
        total = 0
        for _, raw in table.scan():
            # A record of the job holds its id verbatim, so a record without those bytes
            # cannot match: most records of other jobs are skipped without being parsed.
            if request.job_id not in raw:
                continue
            record = gcs_pb2.TaskRecord.FromString(raw)
            if record.job_id != request.job_id:
                continue
            total += 1
            if not request.limit or len(reply.tasks) < request.limit:
                reply.tasks.append(record)
        reply.total = total
        return reply


def _record_task_failure(record: gcs_pb2.TaskRecord, event: gcs_pb2.TaskEvent) -> None:
    """A span in the task's trace (under its task.submit) and a log line, for ``trace``
    and ``logs``: the GCS failed the task as its job ended."""
    task_hex = record.task_id.hex()
    attributes: dict[str, Any] = {
        A.TASK_ID: task_hex, A.TASK_ATTEMPT: event.attempt, A.TASK_FUNCTION: record.function_name,
        A.TASK_STATE: event.state, A.JOB_ID: record.job_id.hex(), A.ERROR_TYPE: event.error_type,
        A.TASK_FAILURE_REASON: event.error_message}
    if record.actor_id:
        attributes[A.ACTOR_ID] = record.actor_id.hex()
    parent = None
    if len(record.trace_id) == 32 and record.submit_span_id:
        parent = remote_parent(int(record.trace_id, 16), record.submit_span_id, 1)
    at_ns = int(event.time * 1e9)
    span = telemetry.start_span("task.job_end", attributes, start_time=at_ns, parent=parent)
    span.set_status(Status(StatusCode.ERROR, f"{event.error_type}: {event.error_message}"))
    span.end(at_ns)
    log.info("task.job_end", task_id=task_hex, attempt=event.attempt,
             function=record.function_name, job_id=record.job_id.hex(),
             error_type=event.error_type, reason=event.error_message,
             **({"trace_id": record.trace_id} if record.trace_id else {}))


class _Servicer(gcs_pb2_grpc.GcsServiceServicer):
    def __init__(self, gcs: Gcs) -> None:
        self._g = gcs

    def RegisterNode(self, request: Any, context: Any) -> Any:
        self._g.register_node(request)
        return common_pb2.Empty()

    def Heartbeat(self, request: Any, context: Any) -> Any:
        return self._g.heartbeat(request)

    def GetNodes(self, request: Any, context: Any) -> Any:
        return gcs_pb2.GetNodesReply(nodes=self._g.node_list())

    def RegisterJob(self, request: Any, context: Any) -> Any:
        self._g.register_job(request)
        return common_pb2.Empty()

    def FinishJob(self, request: Any, context: Any) -> Any:
        self._g.finish_job(request.job_id)
        return common_pb2.Empty()

    def ReportDriverDeath(self, request: Any, context: Any) -> Any:
        return self._g.on_driver_death(request)

    def GetJobs(self, request: Any, context: Any) -> Any:
        return gcs_pb2.GetJobsReply(jobs=[gcs_pb2.JobInfo.FromString(v)
                                          for _, v in self._g.tables["jobs"].scan()])

    def KvPut(self, request: Any, context: Any) -> Any:
        table = self._g.tables["kv"]
        if not request.overwrite and table.get(request.key) is not None:
            return gcs_pb2.KvPutReply(added=False)
        table.put(request.key, request.value, finished=False)
        return gcs_pb2.KvPutReply(added=True)

    def KvGet(self, request: Any, context: Any) -> Any:
        value = self._g.tables["kv"].get(request.key)
        return gcs_pb2.KvGetReply(found=value is not None, value=value or b"")

    def CreateActor(self, request: Any, context: Any) -> Any:
        try:
            return self._g.actors.create(request.creation_task, request.get_if_exists)
        except ValueError as exc:
            context.abort(grpc.StatusCode.ALREADY_EXISTS, str(exc))

    def GetActor(self, request: Any, context: Any) -> Any:
        info = self._g.actors.get(request)
        if info is None:
            what = request.name or request.actor_id.hex()
            context.abort(grpc.StatusCode.NOT_FOUND,
                          f"no actor {what!r} in namespace {request.namespace!r}")
        return info

    def ListActors(self, request: Any, context: Any) -> Any:
        return gcs_pb2.ListActorsReply(actors=self._g.actors.list())

    def KillActor(self, request: Any, context: Any) -> Any:
        if request.cause:
            self._g.actors.kill(request.actor_id, request.no_restart, request.cause)
        else:
            self._g.actors.kill(request.actor_id, request.no_restart)
        return common_pb2.Empty()

    def ReportWorkerDeath(self, request: Any, context: Any) -> Any:
        self._g.actors.on_worker_death(request)
        return common_pb2.Empty()

    def AddTaskEvents(self, request: Any, context: Any) -> Any:
        self._g.add_task_events(request.events)
        return common_pb2.Empty()

    def GetTasks(self, request: Any, context: Any) -> Any:
        return self._g.get_tasks(request)

    def GetClusterStatus(self, request: Any, context: Any) -> Any:
        gcs = self._g
        return gcs_pb2.ClusterStatus(nodes=gcs.node_list(), num_actors=len(gcs.actors.list()),
                                     num_tasks=len(gcs.tables["tasks"]),
                                     storage=gcs.storage.description)
