"""The core worker: what every driver and worker process runs.

It owns the objects this process creates (reference table + memory store),
submits tasks and actor calls, serves its owned objects to borrowers, and in
worker processes executes tasks pushed over task streams. This module builds the
parts and wires each to the narrow collaborators it uses; I/O to the GCS and
raylets happens via the typed clients; background work (freeing objects, task
events, output echo) runs on one flusher thread (flusher.py).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import grpc

from tracedray import logs
from tracedray._proto.v1 import common_pb2, core_worker_pb2, core_worker_pb2_grpc, raylet_pb2
from tracedray.core import rpc
from tracedray.core.address import Address
from tracedray.core.functions import FunctionManager, driver_import_paths
from tracedray.core.gcs.client import GcsClient
from tracedray.core.process import exit_now
from tracedray.core.protocol.flight_recorder import FlightRecorder
from tracedray.core.protocol.raylet_client import RayletClient
from tracedray.core.worker import reference_table as rt
from tracedray.core.worker import remote_debugger, slow_tasks
from tracedray.core.worker.actor_submitter import ActorSubmitter
from tracedray.core.worker.blocking import BlockedState
from tracedray.core.worker.executor_reports import ExecutorReports
from tracedray.core.worker.exit_blockers import WorkState, exit_blockers
from tracedray.core.worker.flusher import Flusher
from tracedray.core.worker.lineage import Lineage
from tracedray.core.worker.memory_store import MemoryStore
from tracedray.core.worker.object_io import ObjectIO
from tracedray.core.worker.object_values import ObjectValues
from tracedray.core.worker.output_echo import OutputEcho
from tracedray.core.worker.ownership import Ownership
from tracedray.core.worker.pending_task import DependencyResolver, PendingTask, error_value
from tracedray.core.worker.raylet_directory import RayletDirectory
from tracedray.core.worker.recovery import NodeDirectory, Recovery
from tracedray.core.worker.submit_inbox import DeferredRecord, Submission, SubmitInbox
from tracedray.core.worker.task_events import TaskEventBuffer
from tracedray.core.worker.task_executor import TaskExecutor
from tracedray.core.worker.task_results import TaskResults
from tracedray.core.worker.task_stream_server import TaskStreamServer
from tracedray.core.worker.task_submitter import TaskSubmitter
from tracedray.core.worker.worker_servicer import CoreWorkerServicer
from tracedray.exceptions import RaySystemError, WorkerCrashedError

log = logs.get_logger(__name__)
# How long a process shutting down waits for each raylet holding its objects to free
# them (it tells them all at once); one that does not answer frees them once it sees
# the process gone (raylet/owner_death.py).
OWNER_EXIT_TIMEOUT_S = 2.0


class CoreWorker:
    def __init__(self, *, mode: str, gcs_address: str, raylet_address: str, node_id: str,
                 ip: str, worker_id: str, job_id: bytes, session_dir: Path,
                 object_path_prefix: str, namespace: str = "", listen_host: str = "127.0.0.1"
                 ) -> None:
        self.mode = mode  # "driver" | "worker"
        self.node_id = node_id
        self.ip = ip
        self.worker_id = worker_id
        self.job_id = job_id
        self.namespace = namespace
        self.session_dir = session_dir
        self.object_path_prefix = object_path_prefix
        self.current_task: common_pb2.TaskSpec | None = None
        self.gcs = GcsClient(gcs_address)
        self.raylet = RayletClient(raylet_address)
        host, _, port = raylet_address.rpartition(":")
        self.raylet_address = Address(node_id, host, int(port))
        self.references = rt.ReferenceTable(worker_id)
        self.memory_store = MemoryStore()
        self.lineage = Lineage()
        self.functions = FunctionManager(
            self.gcs, driver_import_paths() if mode == "driver" else None)
        self.task_events = TaskEventBuffer(self.gcs)
        # What executors reported of the tasks they answered us, until the GCS has it.
        self.executor_reports = ExecutorReports(self.task_events)
        self._pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="tracedray-bg")
        self._stopped = threading.Event()
        self.flight_recorder = FlightRecorder(session_dir / "workers" / f"{worker_id}.slot")
        # The parts are built in the order they need each other; the lambdas close the
        # cycles late: Ownership frees through ObjectIO (which frees dropped refs through
        # the flusher before a put), Recovery resubmits through the submitter.
        self.ownership = Ownership(self.references, self.memory_store, self.lineage, self.raylet,
                                   free_local=lambda ids: self.objects.free_local(ids),
                                   background=self.background)
        self.results = TaskResults(self.lineage, self.ownership, self.references,
                                   self.task_events)
        self._server = rpc.make_server()
        core_worker_pb2_grpc.add_CoreWorkerServiceServicer_to_server(
            CoreWorkerServicer(self), self._server)
        port_bound = rpc.bind(self._server, listen_host, 0)
        self._server.start()
        # Tasks arrive on plain TCP task streams, not gRPC (task_stream.py says why);
        # a driver runs no tasks and listens for none.
        self.task_stream = (TaskStreamServer(listen_host, self._push_task)
                            if mode == "worker" else None)
        self.address = Address(node_id, ip, port_bound, worker_id, os.getpid(),
                               self.task_stream.port if self.task_stream else 0)
        # Every task spec names its caller: built once (a message per task cost ~1 µs).
        # Never mutated: protobuf copies it into each spec.
        self.address_proto = self.address.to_proto()
        self.output = OutputEcho(self.gcs.get_jobs, ip=ip, pid=self.address.pid, job_id=job_id,
                                 current_task=lambda: self.current_task)
        self.flusher = Flusher(self.ownership, self.references, self.task_events, self.output,
                               self.executor_reports)
        nodes = NodeDirectory(self.gcs)
        self.recovery = Recovery(nodes, node_id, self.references, self.memory_store,
                                 self.lineage, self.task_events,
                                 submit=lambda task: self.submitter.submit(task),
                                 lease_nodes=lambda: self.submitter.lease_nodes())
        self.raylets = RayletDirectory(self.raylet, node_id, nodes, self.recovery.await_verdict)
        # .remote() leaves its built task here; one thread submits them in batches.
        self.inbox: SubmitInbox[Submission] = SubmitInbox(self._submit_batch,
                                                          "tracedray-submit-inbox")
        # Only a worker tells its raylet it blocks (and lends its CPU meanwhile).
        self.blocking = BlockedState(self.raylet.notify_blocked, worker_id,
                                     tells_raylet=mode == "worker", on_blocked=self._on_blocked)
        self.values = ObjectValues(self.address, self.references, self.memory_store,
                                   self.blocking, await_verdict=self.recovery.await_verdict,
                                   background=self.background,
                                   drain_submissions=self.inbox.drain)
        self.objects = ObjectIO(self.raylet, object_path_prefix, node_id=node_id,
                                raylet_address=self.raylet_address.to_proto(),
                                owner=self.address_proto,
                                release_dropped_refs=self.flusher.release_dropped_refs,
                                after_loss=self.values.after_loss)
        self.resolver = DependencyResolver(worker_id, self.memory_store,
                                           fetch_from_owner=self.values.fetch_from_owner,
                                           background=self.background)
        self.executor = (TaskExecutor(
            self, self.address, functions=self.functions, objects=self.objects,
            ownership=self.ownership, task_events=self.task_events, output=self.output,
            flight_recorder=self.flight_recorder, blocking=self.blocking,
            drain_submissions=self.inbox.drain) if mode == "worker" else None)
        self.submitter = TaskSubmitter(self)
        self.actor_submitter = ActorSubmitter(
            self.gcs, self.resolver, self.results, load=self.objects.load,
            background=self.background,
            first_state_reported=self.task_events.reported_by_actor,
            release_first_state=self.task_events.release_held,
            reports=self.executor_reports)
        self.slow_tasks = (slow_tasks.start_watch(self.address, self.executor,
                                                  self.task_events.add, self._stopped)
                           if self.executor is not None else None)
        if self.executor is not None:
            # breakpoint() waits for `tracedray debug`
            remote_debugger.install(self.address, self.executor)
        self.flusher.start(self._stopped)
        threading.Thread(target=self.recovery.watch_loop, args=(self._stopped,), daemon=True,
                         name="tracedray-node-watch").start()

    def _push_task(self, spec: common_pb2.TaskSpec,
                   reply: Callable[[common_pb2.TaskResult], None]) -> None:
        # Streams open only after the worker registered, by when the executor exists.
        assert self.executor is not None
        self.executor.push(spec, reply)

    def _on_blocked(self) -> None:
        if self.executor is not None:
            self.executor.on_blocked()

    # --- small services used by the submitters and executor
    def background(self, fn: Callable[..., Any], *args: Any) -> bool:
        """Run ``fn(*args)`` on the background pool; False (not run) once stopping."""
        if self._stopped.is_set():
            return False
        self._pool.submit(_logged, fn, *args)
        return True

    def raylet_for_node(self, node_id: str) -> RayletClient:
        return self.raylets.for_node(node_id)

    def describe_worker_exit(self, raylet: RayletClient, worker: Address
                             ) -> tuple[WorkerCrashedError, raylet_pb2.WorkerExitInfo]:
        return self.raylets.describe_worker_exit(raylet, worker)

    def current_job_id(self) -> bytes:
        spec = self.current_task
        return spec.job_id if spec is not None else self.job_id

    # --- ownership
    def store_owned_value(self, value: common_pb2.ObjectValue, status: str) -> None:
        self.ownership.store_value(value, status)

    def new_owned_ref(self, object_id: bytes, call_site: str) -> Any:
        from tracedray.core.object_ref import ObjectRef

        return ObjectRef._owned_by(self, object_id, self.address, call_site)

    def finish_task(self, task: PendingTask, values: list[common_pb2.ObjectValue],
                    state: str, *, reported_by_executor: bool = False) -> None:
        self.results.finish(task, values, state, reported_by_executor=reported_by_executor)

    def add_captured(self, inner: common_pb2.ObjectRefInfo, outer_id: bytes) -> None:
        self.ownership.add_captured(inner, outer_id)

    def wait_values(self, object_ids: list[bytes], num_ready: int,
                    timeout_s: float | None, *, stop_on_error: bool = False) -> set[bytes]:
        return self.values.wait(object_ids, num_ready, timeout_s, stop_on_error=stop_on_error)

    def blocked(self) -> AbstractContextManager[None]:
        """A context in which this thread waits for values (blocking.py)."""
        return self.blocking.blocked()

    # --- cancel / exit
    def cancel_on_worker(self, worker: Address, task_id: bytes, force: bool,
                         requeue: bool = False, recursive: bool = False) -> None:
        request = core_worker_pb2.CancelTaskRequest(task_id=task_id, force=force, requeue=requeue,
                                                    recursive=recursive)
        try:
            core_worker_pb2_grpc.CoreWorkerServiceStub(rpc.channel(worker.target)).CancelTask(
                request, timeout=10)
        except grpc.RpcError as exc:
            log.debug("cancel.unreachable", worker=worker.target, error=str(exc.code()))

    def became_actor(self, spec: common_pb2.TaskSpec) -> None:
        logs.set_process_context(actor_id=spec.actor_id.hex())

    def exit_actor_soon(self, actor_id: bytes, cause: str) -> None:
        """End this actor for good: the GCS records it dead (no restart) and has the
        raylet stop this worker; this process also leaves by itself, as after a kill."""
        def _exit() -> None:
            try:
                self.gcs.kill_actor(actor_id, no_restart=True, cause=cause)
            except RaySystemError as exc:
                log.warning("actor.exit_report_failed", error=str(exc))
            self.exit_soon("exit_actor")

        threading.Thread(target=_exit, daemon=True, name="tracedray-actor-exit").start()

    def exit_soon(self, reason: str, code: int = 0) -> None:
        def _exit() -> None:
            time.sleep(0.05)  # let the reply go out
            log.info("worker.exit_requested", reason=reason)
            self.inbox.drain()
            exit_now(code)

        threading.Thread(target=_exit, daemon=True).start()

    def submit_later(self, task: PendingTask, line: DeferredRecord | None,
                     actor_retries: int | None = None) -> None:
        """Submit ``task`` off this thread (an actor call when ``actor_retries`` is not
        None), writing its deferred ``task.submit`` record first."""
        self.inbox.put(Submission(task, line, actor_retries))

    def _submit_batch(self, batch: list[Submission]) -> None:
        tasks: list[PendingTask] = []
        calls: list[tuple[PendingTask, int]] = []  # actor calls
        for item in batch:
            if item.line is not None:
                item.line.write()
            if item.actor_retries is None:
                tasks.append(item.task)
            else:
                calls.append((item.task, item.actor_retries))
        if tasks:
            try:
                self.submitter.submit_many(tasks)
            except Exception as exc:  # noqa: BLE001 - fail them, submit the calls
                self._submit_failed(tasks, exc)
        if calls:
            try:
                self.actor_submitter.submit_many(calls)
            except Exception as exc:  # noqa: BLE001
                self._submit_failed([task for task, _ in calls], exc)

    def _submit_failed(self, tasks: list[PendingTask], exc: Exception) -> None:
        for task in tasks:
            log.error("task.submit_failed", task_id=task.task_id.hex(), error=repr(exc))
            self.finish_task(task, [error_value(oid, exc) for oid in task.return_ids], "FAILED")

    def flush_background_work(self) -> None:
        self.flusher.flush()

    def shutdown(self) -> None:
        if self._stopped.is_set():
            return
        self.inbox.close()
        self.flusher.flush()
        self._exit_as_owner()
        self._stopped.set()
        self.submitter.fail_all(RaySystemError("tracedray is shutting down"))
        self.actor_submitter.close()
        self.objects.close()
        self._server.stop(grace=0.5)
        if self.task_stream is not None:
            self.task_stream.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _exit_as_owner(self) -> None:
        """Every object this process owns goes with it, on every node, as in Ray (its
        borrowers' get() raises OwnerDiedError): tell the raylets holding them, and the
        local one, which also frees the returns of its tasks sealed from now on."""
        nodes = {entry.store_node_id for _, entry in self.references.snapshot()
                 if entry.owned and entry.store_node_id}
        raylets = {self.raylet.address: self.raylet}
        for node_id in nodes:
            client = self.raylets.for_node(node_id)
            raylets[client.address] = client
        owner = self.address_proto

        def tell(raylet: RayletClient) -> None:
            try:
                raylet.owner_exiting(owner, timeout=OWNER_EXIT_TIMEOUT_S)
            except RaySystemError as exc:
                log.warning("objects.owner_exit_unheard", raylet=raylet.address, error=str(exc))

        list(self._pool.map(tell, raylets.values()))

    def statistics(self) -> dict[str, Any]:
        return {"references": self.references.statistics(),
                "memory_store": self.memory_store.statistics(),
                "submitter": self.submitter.statistics(),
                "inbox": self.inbox.statistics(),
                "actors": self.actor_submitter.statistics(),
                "lineage": self.lineage.statistics(),
                "recovery": self.recovery.statistics(),
                "ownership": self.ownership.statistics(),
                "values": self.values.statistics(),
                "blocking": self.blocking.statistics(),
                "flusher": self.flusher.statistics(),
                "output": self.output.statistics(),
                "raylets": self.raylets.statistics(),
                "objects": self.objects.statistics(),
                "executor": self.executor.statistics() if self.executor else None,
                "task_stream": self.task_stream.statistics() if self.task_stream else None}

    def exit_blockers(self) -> list[str]:
        """What stopping this (idle) process would lose; the raylet asks before it reaps."""
        # Send pending releases and borrow notices first: a ref dropped a moment ago is
        # not a reason to stay, but its release must reach the owner before we go.
        self.flusher.flush()
        entries = [entry for _, entry in self.references.snapshot()]
        submitter = self.submitter.statistics()
        actors = self.actor_submitter.statistics()
        executor = self.executor.statistics() if self.executor is not None else None
        return exit_blockers(WorkState(
            owned_objects=sum(1 for e in entries if e.owned),
            borrowed_objects=sum(1 for e in entries if not e.owned),
            unfinished_tasks=submitter.submitted_total - submitter.finished_total,
            held_leases=submitter.leases, lease_requests=submitter.pending_lease_requests,
            actor_calls=actors["inflight"] + actors["queued"],
            executing=executor.queued + executor.running if executor is not None else 0))

    def __repr__(self) -> str:
        return f"<CoreWorker {self.mode} {self.address.target} {self.references!r}>"

    def reference_table(self) -> core_worker_pb2.ReferenceTable:
        component = self.mode
        actor_id = b""
        if self.executor is not None and self.executor.actor_id:
            component, actor_id = "actor", self.executor.actor_id
        table = core_worker_pb2.ReferenceTable(address=self.address.to_proto(),
                                               component=component, ip=self.ip,
                                               actor_id=actor_id.hex())
        for object_id, entry in self.references.snapshot():
            table.rows.add(object_id=object_id, reference_type=rt.reference_type(entry),
                           size=entry.size, call_site=entry.call_site,
                           task_status=entry.task_status if entry.owned else "",
                           node_id=entry.store_node_id or self.node_id,
                           owner_worker_id=entry.owner.worker_id if entry.owner else "",
                           local_refs=entry.local, pending_tasks=entry.submitted,
                           borrowers=len(entry.borrowers))
        return table


def _logged(fn: Callable[..., Any], *args: Any) -> None:
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001 - background work reports, never dies silently
        log.error("background.error", function=getattr(fn, "__qualname__", repr(fn)),
                  error=repr(exc))

