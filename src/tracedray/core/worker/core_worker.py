"""The core worker: what every driver and worker process runs.

It owns the objects this process creates (reference table + memory store),
submits tasks and actor calls, serves its owned objects to borrowers, and in
worker processes executes tasks pushed over task streams. I/O to the GCS and
raylets happens via the typed clients; background work (freeing objects, task events, output echo)
runs on one flusher thread.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc

from tracedray import config, logs
from tracedray._proto.v1 import common_pb2, core_worker_pb2, core_worker_pb2_grpc
from tracedray.core import rpc
from tracedray.core.address import Address
from tracedray.core.functions import FunctionManager, driver_import_paths
from tracedray.core.gcs.client import GcsClient
from tracedray.core.process import exit_now
from tracedray.core.protocol.flight_recorder import FlightRecorder
from tracedray.core.protocol.raylet_client import RayletClient
from tracedray.core.worker import reference_table as rt
from tracedray.core.worker import remote_debugger, slow_tasks, stack_dump
from tracedray.core.worker.actor_submitter import ActorSubmitter
from tracedray.core.worker.exit_blockers import WorkState, exit_blockers
from tracedray.core.worker.lineage import Lineage
from tracedray.core.worker.memory_store import MemoryStore, is_error
from tracedray.core.worker.object_io import ObjectIO
from tracedray.core.worker.pending_task import DependencyResolver, PendingTask, error_value
from tracedray.core.worker.recovery import Recovery
from tracedray.core.worker.submit_inbox import Submission, SubmitInbox
from tracedray.core.worker.task_events import TaskEventBuffer
from tracedray.core.worker.task_executor import TaskExecutor
from tracedray.core.worker.task_stream_server import TaskStreamServer
from tracedray.core.worker.task_submitter import TaskSubmitter, crash_error
from tracedray.exceptions import (
    GetTimeoutError,
    OwnerDiedError,
    RaySystemError,
    WorkerCrashedError,
)

log = logs.get_logger(__name__)
FLUSH_INTERVAL_S = 0.1
# How long a process shutting down waits for each raylet holding its objects to free
# them (it tells them all at once); one that does not answer frees them once it sees
# the process gone (raylet/owner_death.py).
OWNER_EXIT_TIMEOUT_S = 2.0


def _parse_delay(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 60.0:
        raise ValueError(f"expected seconds between 0 and 60, got {text!r}")
    return value


TESTING_BORROW_DELAY_S: config.Variable[float] = config.Variable(
    "TRACEDRAY_TESTING_BORROW_DELAY_S",
    _parse_delay,
    lambda: 0.0,
    "For tests only: seconds an owner waits before applying each borrow registration (+1 "
    "reference update) it receives, as a slow network or a busy owner would, so that tests "
    "can show no release overtakes the borrow it follows. Never set it in production.",
)


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
        self.objects = ObjectIO(self)
        self.functions = FunctionManager(
            self.gcs, driver_import_paths() if mode == "driver" else None)
        self.task_events = TaskEventBuffer(self.gcs)
        self.resolver = DependencyResolver(self)
        self._pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="tracedray-bg")
        self._raylets: dict[str, RayletClient] = {}
        # Printed lines with the job they belong to: the flusher runs after the task ended.
        self._output: list[tuple[bytes, core_worker_pb2.OutputLine]] = []
        self._output_lock = threading.Lock()
        # One flush at a time: two could send a task's events or a job's output out of
        # order (the raylet's GetExitBlockers and shutdown flush besides the flusher).
        self._flush_lock = threading.Lock()
        self._update_send_lock = threading.Lock()  # see flush_reference_updates
        self._testing_borrow_delay_s = TESTING_BORROW_DELAY_S.get()
        self._drivers: dict[bytes, str] = {}  # job id -> its driver's address
        self._blocked_depth = 0
        self._blocked_lock = threading.Lock()
        self._stopped = threading.Event()
        self.flight_recorder = FlightRecorder(session_dir / "workers" / f"{worker_id}.slot")
        self._server = rpc.make_server()
        core_worker_pb2_grpc.add_CoreWorkerServiceServicer_to_server(_Servicer(self), self._server)
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
        self.lineage = Lineage()
        self.recovery = Recovery(self)
        self.submitter = TaskSubmitter(self)
        self.actor_submitter = ActorSubmitter(self)
        # .remote() leaves its built task here; one thread submits them in batches.
        self.inbox: SubmitInbox[Submission] = SubmitInbox(self._submit_batch,
                                                          "tracedray-submit-inbox")
        self.executor: TaskExecutor | None = TaskExecutor(self) if mode == "worker" else None
        self.slow_tasks = (slow_tasks.start_watch(self, self.executor, self._stopped)
                           if self.executor is not None else None)
        if self.executor is not None:
            remote_debugger.install(self)  # breakpoint() waits for `tracedray debug`
        self._flusher = threading.Thread(target=self._flush_loop, daemon=True,
                                         name="tracedray-flusher")
        self._flusher.start()
        threading.Thread(target=self.recovery.watch_loop, args=(self._stopped,), daemon=True,
                         name="tracedray-node-watch").start()

    def _push_task(self, spec: common_pb2.TaskSpec,
                   reply: Callable[[common_pb2.TaskResult], None]) -> None:
        # Streams open only after the worker registered, by when the executor exists.
        assert self.executor is not None
        self.executor.push(spec, reply)

    # --- small services used by the submitters and executor
    def background(self, fn: Callable[..., Any], *args: Any) -> bool:
        """Run ``fn(*args)`` on the background pool; False (not run) once stopping."""
        if self._stopped.is_set():
            return False
        self._pool.submit(_logged, fn, *args)
        return True

    def object_path(self, object_id: bytes) -> Path:
        return Path(self.object_path_prefix + object_id.hex())

    def raylet_for_node(self, node_id: str) -> RayletClient:
        """The raylet of ``node_id`` if that node is alive, else the local raylet."""
        if node_id == self.node_id or not node_id:
            return self.raylet
        if self.recovery.nodes.is_dead(node_id):
            self._raylets.pop(node_id, None)
            return self.raylet
        client = self._raylets.get(node_id)
        if client is None:
            address = self.recovery.nodes.alive_raylet(node_id)
            if address is None:
                return self.raylet
            client = self._raylets[node_id] = RayletClient(address.target)
        return client

    def describe_worker_exit(self, raylet: RayletClient, worker: Address) -> WorkerCrashedError:
        try:
            info = raylet.get_worker_exit(worker.worker_id, timeout_s=5.0)
        except RaySystemError:
            from tracedray._proto.v1 import raylet_pb2

            # The raylet is unreachable: wait for the GCS to say whether its node died,
            # so the error names the cause (and retries avoid the dead node).
            if worker.node_id != self.node_id and self.recovery.await_verdict(worker.node_id):
                node = self.recovery.nodes.info(worker.node_id)
                reason = node.death_reason if node is not None else "unknown"
                return WorkerCrashedError(
                    f"the worker process (pid {worker.pid}) was lost with its node "
                    f"{worker.node_id[:12]} ({worker.ip}), which died: {reason}",
                    meaning="node died")
            info = raylet_pb2.WorkerExitInfo(exited=False)
        return crash_error(info, worker)

    def resubmit(self, spec: common_pb2.TaskSpec, return_ids: list[bytes]) -> None:
        """Run a finished task again to rebuild its lost results (lineage). Its ref
        arguments that are still referenced resolve again, so a lost input is waited
        for (it may be being rebuilt too)."""
        task = PendingTask(spec=spec, return_ids=return_ids, dep_ids=[], unresolved=[],
                           retries_left=spec.max_retries)
        for index, arg in enumerate(spec.args):
            object_id = arg.value.object_id
            entry = self.references.get(object_id) if arg.is_ref else None
            if entry is not None:
                task.dep_ids.append(object_id)
                task.unresolved.append((index, object_id, None if entry.owned else entry.owner))
                arg.ClearField("value")
        self.references.add_submitted(task.dep_ids)
        self.memory_store.delete(return_ids)  # get() waits for the rebuilt values
        self.task_events.record(spec, "PENDING_ARGS_AVAIL")
        self.submitter.submit(task)

    def value_after_loss(self, value: common_pb2.ObjectValue) -> common_pb2.ObjectValue | None:
        """An object could not be read from its node: if that node died, wait for the
        rebuilt value (or the error saying why it cannot be); None: nothing to do.

        The owner rebuilds (see recovery.py); a borrower waits for the same verdict on
        the node and then asks the owner again until it hands out the new copy. A
        borrower first asks the owner at once: an owner gone (every copy went with it,
        raylet/owner_death.py) answers nothing, which is an OwnerDiedError.
        """
        object_id, node_id = value.object_id, value.store_node_id
        entry = self.references.get(object_id)
        if entry is None or (not entry.owned and entry.owner is None):
            return None
        if not entry.owned:
            assert entry.owner is not None
            # Its owner may be gone, and every copy with it: then say so (OwnerDiedError)
            # at once, rather than wait for a verdict on a node that is alive.
            answer = self._owner_answer(object_id, entry.owner)
            if answer is not None and answer != value:
                return answer  # an error (the owner died, or freed it), or another copy
        if not node_id or node_id == self.node_id:
            return None
        if not self.recovery.await_verdict(node_id):
            return None
        if not entry.owned:
            assert entry.owner is not None
            return self._rebuilt_by_owner(object_id, entry.owner, node_id)
        self.wait_values([object_id], 1, None)
        fresh = self.memory_store.get_if_ready(object_id)
        return None if fresh is None or _still_on(fresh, node_id) else fresh

    def _owner_answer(self, object_id: bytes, owner: Address) -> common_pb2.ObjectValue | None:
        """What the owner of a borrowed object says of it now, without waiting for it
        to be ready: its value (maybe another copy), or an error value when the owner
        does not answer (OwnerDiedError) or no longer has it; None: not ready."""
        try:
            return self.fetch_from_owner(object_id, owner, timeout_s=0)
        except GetTimeoutError:
            return None

    def _rebuilt_by_owner(self, object_id: bytes, owner: Address,
                          dead_node: str) -> common_pb2.ObjectValue | None:
        # The owner learns of the death from the GCS as we did, possibly a moment later:
        # until then it still hands out the lost copy.
        deadline = time.monotonic() + config.NODE_DEATH_TIMEOUT_S.get() + 10.0
        while True:
            fresh = self.fetch_from_owner(object_id, owner, timeout_s=None)
            if not _still_on(fresh, dead_node):
                if self.references.get(object_id) is not None:
                    self.memory_store.put(object_id, fresh)
                return fresh
            if time.monotonic() > deadline:
                log.warning("object.rebuild_not_seen", object_id=object_id.hex(),
                            owner_pid=owner.pid, dead_node=dead_node)
                return None
            time.sleep(0.1)

    def current_job_id(self) -> bytes:
        spec = self.current_task
        return spec.job_id if spec is not None else self.job_id

    # --- ownership
    def store_owned_value(self, value: common_pb2.ObjectValue, status: str) -> None:
        """Record a value this process created (put, a large argument, a task's result).
        One nobody references any more is freed at once (with the refs it captured)."""
        self.memory_store.put(value.object_id, value)
        self._run_release_actions(self.references.set_object_info(
            value.object_id, size=value.size, store_node_id=value.store_node_id,
            store_raylet=Address.from_proto(value.store_raylet) if value.store_node_id else None,
            task_status=status,
            contained=[(c.object_id, Address.from_proto(c.owner) if c.HasField("owner") else None)
                       for c in value.contained_refs]))

    def new_owned_ref(self, object_id: bytes, call_site: str) -> Any:
        from tracedray.core.object_ref import ObjectRef

        return ObjectRef(object_id, self.address, call_site, _worker=self, _owned=True)

    def finish_task(self, task: PendingTask, values: list[common_pb2.ObjectValue],
                    state: str, *, reported_by_executor: bool = False) -> None:
        """Store a task's results. The executing worker already recorded how it ended,
        unless it never ran it (crash, cancel, failed dependency): then the owner does."""
        if state == "FINISHED":
            # Before storing: a result dropped already is released there, lineage too.
            self.lineage.record(task.spec, task.return_ids, values)
        for value in values:
            self.store_owned_value(value, state)
        if not reported_by_executor:
            self.task_events.record(task.spec, state)
        self._run_release_actions(self.references.remove_submitted(task.dep_ids))

    def add_captured(self, inner: common_pb2.ObjectRefInfo, outer_id: bytes) -> None:
        """``inner`` was serialized into object ``outer_id``: keep it alive while outer
        lives. Another owner hears it with the next flush (a task's caller: before the
        result, see TaskExecutor)."""
        owner = Address.from_proto(inner.owner) if inner.HasField("owner") else None
        self.references.add_captured(inner.object_id, owner, outer_id)

    def flush_reference_updates(self) -> None:
        """Deliver the reference updates for other owners, in the order they were made;
        on return every one made before the call has been applied by its owner (or the
        owner was unreachable). Callers: the flusher, the executor before it replies to
        a task's caller (so a ref the result captured is registered first), and a
        release that let go of a captured ref.

        Take and send happen under one lock: a second flush waits for the updates the
        first one took, so no update overtakes an earlier one (issue 2: a borrow's +1
        and the outer object's -1 sent concurrently reached the owner swapped, and it
        freed the inner object still borrowed)."""
        with self._update_send_lock:
            for owner, run in rt.runs_by_owner(self.references.take_updates()):
                self._send_reference_updates(owner, run)

    def _send_reference_updates(self, owner: Address, updates: list[rt.ReferenceUpdate]
                                ) -> None:
        request = core_worker_pb2.UpdateReferencesRequest(updates=[
            core_worker_pb2.ReferenceUpdate(object_id=u.object_id, borrower=u.borrower,
                                            delta=u.delta) for u in updates])
        try:
            _stub(owner).UpdateReferences(request, timeout=10)
        except grpc.RpcError as exc:
            log.debug("references.owner_unreachable", owner=owner.target, error=str(exc.code()))

    def _run_release_actions(self, actions: list[rt.ReleaseAction]) -> None:
        if not actions:
            return
        frees: dict[Address | None, list[bytes]] = defaultdict(list)
        deleted = []
        notify_owners = False
        for action in actions:
            deleted.append(action.object_id)
            if not action.owned:
                continue
            log.debug("object.release", object_id=action.object_id.hex(), size=action.size)
            if action.store_node_id:
                frees[action.store_raylet].append(action.object_id)
            # Captured refs owned elsewhere: their -1s are queued behind every update
            # made before (the table did that); only those owned here are let go here.
            notify_owners |= action.released_remote_captured
            borrower = rt.captured_in(action.object_id)
            for inner_id, _ in action.contained:
                self._run_release_actions(self.references.update_borrower(inner_id, borrower, -1))
        deleted = self.references.forget_unreferenced(deleted, self.memory_store.delete)
        self.lineage.forget(deleted)
        for raylet_address, object_ids in frees.items():
            local = raylet_address is None or raylet_address.target == self.raylet.address
            # This node's frees go behind the seals on the seal socket: soon, in order.
            if local and self.objects.free_local(object_ids):
                continue
            client = self.raylet if local or raylet_address is None \
                else RayletClient(raylet_address.target)
            self.background(_free, client, object_ids)
        if notify_owners:
            # Not inline: this may run in a gRPC handler, which must never wait for
            # another process (two owners releasing into each other would deadlock).
            self.background(self.flush_reference_updates)

    # --- fetching values
    def fetch_from_owner(self, object_id: bytes, owner: Address,
                         timeout_s: float | None) -> common_pb2.ObjectValue:
        request = core_worker_pb2.GetObjectRequest(object_id=object_id,
                                                   timeout_s=-1 if timeout_s is None else timeout_s,
                                                   requester=self.address.to_proto())
        try:
            reply = _stub(owner).GetObject(request, timeout=None if timeout_s is None
                                           else timeout_s + 10)
        except grpc.RpcError as exc:
            from tracedray.core.worker.pending_task import error_value

            return error_value(object_id, owner_died_error(object_id, owner, exc.code().name))
        if reply.status == core_worker_pb2.GetObjectReply.PENDING:
            raise GetTimeoutError(f"object {object_id.hex()} was not ready in {timeout_s}s")
        if reply.status == core_worker_pb2.GetObjectReply.UNKNOWN:
            from tracedray.core.worker.pending_task import error_value
            from tracedray.exceptions import ObjectLostError

            return error_value(object_id, ObjectLostError(
                object_id.hex(), "its owner no longer has it (freed, or owner restarted)"))
        return reply.value

    def wait_values(self, object_ids: list[bytes], num_ready: int,
                    timeout_s: float | None, *, stop_on_error: bool = False) -> set[bytes]:
        """Wait for values of owned or borrowed refs to be available here (with
        ``stop_on_error``, only until one of them is an error)."""
        self.inbox.drain()  # tasks this thread submitted go out now, not when it wakes
        missing = [oid for oid in object_ids if not self.memory_store.contains(oid)]
        for object_id in missing:
            entry = self.references.get(object_id)
            if entry is not None and not entry.owned and entry.owner is not None:
                self.background(self._fetch_into_store, object_id, entry.owner)
        ready = {oid for oid in object_ids if self.memory_store.contains(oid)}
        if len(ready) >= num_ready or (stop_on_error and any(
                is_error(self.memory_store.get_if_ready(oid)) for oid in ready)):
            return ready  # no need to tell the raylet this worker blocks
        with self.blocked():
            return self.memory_store.wait(object_ids, num_ready, timeout_s,
                                          stop_on_error=stop_on_error)

    def _fetch_into_store(self, object_id: bytes, owner: Address) -> None:
        value = self.fetch_from_owner(object_id, owner, timeout_s=None)
        if self.references.get(object_id) is not None:
            self.memory_store.put(object_id, value)

    def blocked(self) -> _Blocked:
        return _Blocked(self)

    def _set_blocked(self, entering: bool) -> None:
        if self.mode != "worker":
            return
        with self._blocked_lock:
            # Never below 0: settle_blocked may have reset it under a get() of a thread
            # the cancelled task left running.
            depth = self._blocked_depth = max(0, self._blocked_depth + (1 if entering else -1))
            changed = depth == (1 if entering else 0)
        if changed:
            if entering and self.executor is not None:
                self.executor.on_blocked()
            self._tell_raylet_blocked(entering)

    def _tell_raylet_blocked(self, blocked: bool) -> None:
        try:
            self.raylet.notify_blocked(self.worker_id, blocked)
        except RaySystemError as exc:
            log.warning("raylet.notify_blocked_failed", error=str(exc))

    def settle_blocked(self) -> None:
        """After a cancelled task: not blocked, here and at the raylet.

        The cancel's interrupt may have landed inside a get()'s blocked/unblocked
        bookkeeping (:meth:`_set_blocked`, ``_Blocked``) and left it unbalanced: the
        raylet told "blocked" and never "unblocked" (its CPU lent out while the worker
        goes on running tasks), or the depth left above 0 (the next task's get() would
        then not lend its CPU, and a nested task needing it would never start). The
        task is over, so nothing of it waits any more. An "unblocked" the raylet did
        not need is ignored there.
        """
        if self.mode != "worker":
            return
        with self._blocked_lock:
            self._blocked_depth = 0
        self._tell_raylet_blocked(False)

    # --- cancel / exit
    def cancel_on_worker(self, worker: Address, task_id: bytes, force: bool,
                         requeue: bool = False, recursive: bool = False) -> None:
        request = core_worker_pb2.CancelTaskRequest(task_id=task_id, force=force, requeue=requeue,
                                                    recursive=recursive)
        try:
            _stub(worker).CancelTask(request, timeout=10)
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

    # --- output echo to the driver
    def forward_output(self, stream: str, line: str, fields: Any) -> None:
        spec = self.current_task
        name = echo_name(spec.function_name, spec.kind) if spec is not None else "worker"
        job_id = spec.job_id if spec is not None else self.job_id
        with self._output_lock:
            if len(self._output) < 10_000:
                self._output.append((job_id, core_worker_pb2.OutputLine(
                    task_name=name, pid=self.address.pid, stream=stream, line=line,
                    ip=self.ip)))

    def flush_output(self) -> None:
        """Echo printed lines to their jobs' drivers now (cheap when nothing was printed)."""
        with self._output_lock:
            lines, self._output = self._output, []
        if not lines:
            return
        by_job: dict[bytes, list[core_worker_pb2.OutputLine]] = defaultdict(list)
        for job_id, line in lines:
            by_job[job_id].append(line)
        for job_id, batch in by_job.items():
            target = self._job_driver(job_id)
            if target is None:
                continue
            # A driver that is gone loses only the echo: the lines are in the log files.
            with contextlib.suppress(grpc.RpcError):
                core_worker_pb2_grpc.CoreWorkerServiceStub(rpc.channel(target)).PrintOutput(
                    core_worker_pb2.OutputBatch(lines=batch), timeout=5)

    def _job_driver(self, job_id: bytes) -> str | None:
        target = self._drivers.get(job_id)
        if target is None:
            try:
                for job in self.gcs.get_jobs():
                    if job.job_id == job_id:
                        target = self._drivers[job_id] = Address.from_proto(job.driver).target
            except RaySystemError:
                return None
        return target

    # --- lifecycle
    def _flush_loop(self) -> None:
        while not self._stopped.wait(FLUSH_INTERVAL_S):
            self.flush_background_work()

    def release_dropped_refs(self) -> None:
        """Free now what refs dropped since the last flush let go (a put does this first,
        so that the store can give it back the file of the object it just dropped);
        left to the flusher when it is at work."""
        if not self.references.has_dropped_refs() or not self._flush_lock.acquire(False):
            return
        try:
            self._run_release_actions(self.references.take_deferred_actions())
        finally:
            self._flush_lock.release()

    def flush_background_work(self) -> None:
        try:
            with self._flush_lock:
                self._run_release_actions(self.references.take_deferred_actions())
                self.flush_reference_updates()
                self.task_events.flush()
                self.flush_output()
        except Exception as exc:  # noqa: BLE001 - the flusher must survive anything
            log.error("flusher.error", error=repr(exc))

    def submit_later(self, task: PendingTask, line: logs.DeferredLine | None,
                     actor_retries: int | None = None) -> None:
        """Submit ``task`` off this thread (an actor call when ``actor_retries`` is not
        None), writing its deferred ``task.submit`` line first."""
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

    def shutdown(self) -> None:
        if self._stopped.is_set():
            return
        self.inbox.close()
        self.flush_background_work()
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
            client = self.raylet_for_node(node_id)
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
                "executor": self.executor.statistics() if self.executor else None,
                "task_stream": self.task_stream.statistics() if self.task_stream else None}

    def exit_blockers(self) -> list[str]:
        """What stopping this (idle) process would lose; the raylet asks before it reaps."""
        # Send pending releases and borrow notices first: a ref dropped a moment ago is
        # not a reason to stay, but its release must reach the owner before we go.
        self.flush_background_work()
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


class _Blocked:
    def __init__(self, worker: CoreWorker) -> None:
        self._worker = worker

    def __enter__(self) -> None:
        self._worker._set_blocked(True)

    def __exit__(self, *exc: object) -> None:
        self._worker._set_blocked(False)


def _stub(address: Address) -> core_worker_pb2_grpc.CoreWorkerServiceStub:
    return core_worker_pb2_grpc.CoreWorkerServiceStub(rpc.channel(address.target))


def owner_died_error(object_id: bytes, owner: Address, answer: str) -> OwnerDiedError:
    """A borrowed object whose owner does not answer (``answer``: the RPC's status)."""
    return OwnerDiedError(
        object_id.hex(), f"its owner has exited or died: the process that created it with "
        f"put() or .remote() (pid {owner.pid}, worker {owner.worker_id}, node "
        f"{owner.node_id} at {owner.ip}) does not answer ({answer}). An object lives only as "
        f"long as its owner; its logs: `tracedray logs --worker {owner.pid}`")


def _free(client: RayletClient, object_ids: list[bytes]) -> None:
    try:
        client.free_objects(object_ids)
    except RaySystemError as exc:
        log.debug("objects.free_failed", raylet=client.address, error=str(exc))


def _logged(fn: Callable[..., Any], *args: Any) -> None:
    try:
        fn(*args)
    except Exception as exc:  # noqa: BLE001 - background work reports, never dies silently
        log.error("background.error", function=getattr(fn, "__qualname__", repr(fn)),
                  error=repr(exc))


class _Servicer(core_worker_pb2_grpc.CoreWorkerServiceServicer):
    def __init__(self, worker: CoreWorker) -> None:
        self._w = worker

    def GetObject(self, request: Any, context: grpc.ServicerContext) -> Any:
        worker = self._w
        object_id = request.object_id
        reply = core_worker_pb2.GetObjectReply
        if not worker.memory_store.contains(object_id) and not worker.references.owns(object_id):
            return reply(status=reply.UNKNOWN)
        timeout = None if request.timeout_s < 0 else request.timeout_s
        ready = worker.memory_store.wait([object_id], 1, timeout)
        value = worker.memory_store.get_if_ready(object_id)
        if not ready or value is None:
            return reply(status=reply.PENDING if worker.references.owns(object_id)
                         else reply.UNKNOWN)
        return reply(status=reply.READY, value=value)

    def UpdateReferences(self, request: Any, context: grpc.ServicerContext) -> Any:
        for update in request.updates:
            log.debug("object.reference_update", object_id=update.object_id.hex(),
                      borrower=update.borrower, delta=update.delta)
            if update.delta > 0 and self._w._testing_borrow_delay_s:
                time.sleep(self._w._testing_borrow_delay_s)  # the test hook, see its doc
            self._w._run_release_actions(self._w.references.update_borrower(
                update.object_id, update.borrower, update.delta))
        return common_pb2.Empty()

    def CancelTask(self, request: Any, context: grpc.ServicerContext) -> Any:
        executor = self._w.executor
        if executor is None:
            return core_worker_pb2.CancelTaskReply(found=False)
        if request.requeue:
            return core_worker_pb2.CancelTaskReply(found=executor.requeue(request.task_id))
        if request.recursive:  # first: a forced cancel ends this process
            self._w.submitter.cancel_children(request.task_id, request.force)
        found = executor.cancel(request.task_id, request.force)
        return core_worker_pb2.CancelTaskReply(found=found)

    def GetReferenceTable(self, request: Any, context: grpc.ServicerContext) -> Any:
        return self._w.reference_table()

    def Exit(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._w.exit_soon(request.reason or "exit requested")
        return common_pb2.Empty()

    def GetExitBlockers(self, request: Any, context: grpc.ServicerContext) -> Any:
        return core_worker_pb2.ExitBlockers(reasons=self._w.exit_blockers())

    def PrintOutput(self, request: Any, context: grpc.ServicerContext) -> Any:
        from tracedray import config

        if config.LOG_TO_DRIVER.get():
            for line in request.lines:
                prefix = f"({line.task_name} pid={line.pid}, ip={line.ip})"
                stream = sys.stderr if line.stream == "stderr" else sys.stdout
                stream.write(f"{prefix} {line.line}\n")
            sys.stdout.flush()
        return common_pb2.Empty()

    def DumpStacks(self, request: Any, context: grpc.ServicerContext) -> Any:
        return stack_dump.dump_process(self._w, request)


def echo_name(function_name: str, kind: int) -> str:
    """The name in a printed line's prefix, as Ray shows it: ``(f pid=..)``, ``(Counter pid=..)``.

    ``function_name`` is ``module.qualname`` for a function and ``Class.method`` for
    an actor call; the prefix keeps the function's own name, or the actor's class.
    """
    if kind in (common_pb2.ACTOR_METHOD, common_pb2.ACTOR_CREATION):
        return function_name.rsplit(".", 1)[0].rsplit(".", 1)[-1]
    return function_name.rsplit(".", 1)[-1]


def _still_on(value: common_pb2.ObjectValue, node_id: str) -> bool:
    """The value is the copy that lived on ``node_id`` (not a rebuilt or inline one)."""
    return value.store_node_id == node_id and not value.HasField("inline_value")
