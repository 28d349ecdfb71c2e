"""Normal (non-actor) task submission: leases, pipelined pushes, retries.

Like Ray's direct task submission: the caller asks a raylet for a worker lease
per scheduling key (resource shape + preferred node), pushes tasks straight to
the leased worker over a stream, keeps the lease while it has work (and for a
short linger so a loop of round trips reuses it), and returns it when idle.
A worker that dies fails its in-flight tasks over to a retry (``max_retries``)
or to ``WorkerCrashedError`` with the exit code, signal and what they mean.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from opentelemetry import trace as otel_trace

from tracedray import config, logs, telemetry
from tracedray._proto.v1 import common_pb2, raylet_pb2
from tracedray.core import trace_context
from tracedray.core.address import Address
from tracedray.core.protocol.connection import WorkerConnection
from tracedray.core.protocol.raylet_client import RayletClient
from tracedray.core.worker.infeasible_watch import (
    WARN_AFTER_S,
    InfeasibleWatch,
    Waiting,
    shape_of,
)
from tracedray.core.worker.lease_requests import (
    LeaseAsk,
    lease_requests_wanted,
    requests_to_withdraw,
)
from tracedray.core.worker.pending_task import (
    PendingTask,
    end_dispatch_spans,
    error_value,
    stored_error,
)
from tracedray.core.worker.recovery import is_lost_input
from tracedray.exceptions import (
    ObjectLostError,
    RaySystemError,
    TaskCancelledError,
    WorkerCrashedError,
)
from tracedray.telemetry import attributes as A
from tracedray.telemetry import instruments

if TYPE_CHECKING:
    from tracedray.core.worker.core_worker import CoreWorker

log = logs.get_logger(__name__)

# Tasks in flight per leased worker. More than one hides the stream round trip for
# short tasks. Tasks queued behind a running one keep asking for leases of their own,
# and a worker that becomes free steals them back, so long tasks never wait behind each
# other while a CPU is idle; a worker that blocks in get() hands back the ones it has
# not started.
PIPELINE_DEPTH = 4
# Locality matters once inputs are big enough that moving them costs more than a lease
# (benchmarks/locality.py: a 1 MB pull between nodes costs ~10 ms, a lease ~1 ms).
LOCALITY_MIN_BYTES = 512 << 10
# How long the linger thread waits for a raylet to withdraw requests (it gives idle
# leases back after that): a raylet that does not answer has them answered when it
# fails, or grants them and the worker goes straight back.
WITHDRAW_TIMEOUT_S = 1.0
# How long a closing submitter spends giving its leases back, in all: a raylet that
# does not answer by then takes them back itself once this process is gone.
CLOSE_BUDGET_S = 2.0


@dataclass
class Lease:
    lease_id: str
    key: str
    raylet: RayletClient
    worker: Address
    conn: WorkerConnection
    decision: dict[str, object]
    inflight: dict[bytes, PendingTask] = field(default_factory=dict)
    idle_since: float = field(default_factory=time.monotonic)
    dispatched: int = 0
    # The dispatch span attributes this lease's tasks share, built once. The reason is a
    # reused lease's; the lease's first dispatch names the raylet's decision instead.
    reuse_attributes: dict[str, Any] = field(default_factory=dict)
    reuse_shape: telemetry.SpanShape | None = None  # the same, as a span shape

    def reused_attributes(self) -> dict[str, Any]:
        if not self.reuse_attributes:
            worker = self.worker
            self.reuse_attributes = {
                A.NODE_ID: worker.node_id, A.NODE_IP: worker.ip, A.WORKER_ID: worker.worker_id,
                A.WORKER_PID: worker.pid, A.LEASE_ID: self.lease_id,
                A.SCHEDULING_REASON: f"reused lease {self.lease_id[:8]} on node "
                                     f"{worker.node_id[:12]}"}
        return self.reuse_attributes

    def reused_dispatch_shape(self) -> telemetry.SpanShape:
        """The shape of the ``task.dispatch`` spans of this lease's later tasks: their
        task id and attempt, then :meth:`reused_attributes`."""
        shape = self.reuse_shape
        if shape is None:
            shape = self.reuse_shape = instruments.dispatch_shape(self.reused_attributes())
        return shape


class LeaseReturn(NamedTuple):
    """A lease the close gives back. ``running``: its worker still runs tasks of this
    process, which nobody will wait for, so the raylet kills it instead of leasing it to
    the next process behind them."""
    raylet: RayletClient
    lease_id: str
    failed: bool
    running: bool = False


@dataclass(frozen=True)
class SubmitterStatistics:
    queued: int
    inflight: int
    leases: int
    pending_lease_requests: int  # sent or about to be, withdrawn ones not answered yet too
    submitted_total: int
    finished_total: int
    retried_total: int
    # Lease requests withdrawn because no task needed them any more, and workers granted
    # to such a request before its withdrawal reached the raylet (given back at once).
    lease_requests_withdrawn_total: int = 0
    unneeded_grants_total: int = 0
    infeasible_warnings_total: int = 0  # work that fits no alive node, warned about
    # Tasks sent to leased workers, and the writes that sent them (tasks submitted
    # together and bound for one worker go out in one write).
    sent_total: int = 0
    writes_total: int = 0


def resource_shape(resources: Mapping[str, float]) -> str:
    """The resource part of a scheduling key: ``CPU=1,GPU=0.5``."""
    return ",".join(f"{k}={v:g}" for k, v in sorted(resources.items()))


def scheduling_key(resources: Mapping[str, float], preferred_node: str) -> str:
    return f"{resource_shape(resources)}@{preferred_node}"


def least_loaded(leases: list[Lease]) -> Lease | None:
    """The lease to pipeline the next task onto, if any has room."""
    best = min(leases, key=lambda le: len(le.inflight), default=None)
    if best is None or len(best.inflight) >= PIPELINE_DEPTH:
        return None
    return best


def waiting_behind(lease: Lease) -> list[PendingTask]:
    """Tasks pipelined on ``lease`` that have not been asked back yet (likely unstarted)."""
    tasks = list(lease.inflight.values())[1:]
    return [task for task in tasks if not task.steal_requested]


def steal_plan(leases: list[Lease]) -> list[PendingTask]:
    """One pipelined task (the newest of the busiest lease) per idle lease."""
    idle = sum(1 for le in leases if not le.inflight)
    backlog = sorted((waiting_behind(le) for le in leases), key=len, reverse=True)
    plan: list[PendingTask] = []
    while idle and backlog and backlog[0]:
        plan.append(backlog[0].pop())
        idle -= 1
        backlog.sort(key=len, reverse=True)
    return plan


def preferred_node(input_bytes_by_node: dict[str, int]) -> str:
    """The node holding the most input bytes, if that is worth moving the task for."""
    if not input_bytes_by_node:
        return ""
    node, size = max(input_bytes_by_node.items(), key=lambda item: item[1])
    return node if size >= LOCALITY_MIN_BYTES else ""


class TaskSubmitter:
    def __init__(self, worker: CoreWorker) -> None:
        self._worker = worker
        self._lock = threading.RLock()
        self._queues: dict[str, collections.deque[PendingTask]] = {}
        self._leases: dict[str, list[Lease]] = {}
        # Lease requests not answered yet, oldest first, per key; how many of them are
        # not withdrawn (what _pump compares with what a key wants); how many
        # _request_lease runs are under way (the close waits for them to end).
        self._asks: dict[str, list[LeaseAsk]] = {}
        self._lease_requests: dict[str, int] = {}
        self._ask_ids = itertools.count(1)
        # When each key with requests out last needed all of them (lease_requests.py).
        self._needed_at: dict[str, float] = {}
        self._requesting = 0
        self._requests_over = threading.Condition(self._lock)
        # Leases dropped while the process stops, before the close: it gives them back.
        self._dropped_late: list[LeaseReturn] = []
        self._tasks: dict[bytes, PendingTask] = {}
        # While submit_many dispatches (under the lock): the specs to send, per stream.
        self._outbox: dict[WorkerConnection, list[common_pb2.TaskSpec]] | None = None
        self._sent = self._writes = 0
        self._linger_s = config.LEASE_LINGER_S.get()
        self._locality_enabled = config.LOCALITY_AWARE.get()
        self._closed = False
        self._submitted = self._finished = self._retried = 0
        self._withdrawn_total = self._unneeded_grants = 0
        self._infeasible = InfeasibleWatch(self._alive_node_totals, self._worker.background)
        self._linger_thread = threading.Thread(target=self._return_idle_leases, daemon=True,
                                               name="tracedray-lease-linger")
        self._linger_thread.start()

    # --- submission
    def submit(self, task: PendingTask) -> None:
        with self._lock:
            self._tasks[task.task_id] = task
            self._submitted += 1
        self._worker.resolver.resolve(task, self._enqueue, self._fail_with_value)

    def submit_many(self, tasks: list[PendingTask]) -> None:
        """Submit tasks in order: those with nothing to wait for are queued together, each
        scheduling key pumped once, and the tasks bound for one worker sent in one write."""
        ready: list[tuple[str, PendingTask]] = []
        for task in tasks:
            if not task.unresolved:
                preferred = (preferred_node(task.input_bytes_by_node)
                             if self._locality_enabled else "")
                shape = task.resource_shape or resource_shape(task.spec.resources)
                task.scheduling_key = f"{shape}@{preferred}"
                ready.append((task.scheduling_key, task))
        with self._lock:
            for task in tasks:
                self._tasks[task.task_id] = task
            self._submitted += len(tasks)
            keys: dict[str, None] = {}
            for key, task in ready:
                if task.cancelled:
                    continue
                self._queues.setdefault(key, collections.deque()).append(task)
                keys[key] = None
            self._pump_together(keys)
        for task in tasks:
            if task.unresolved:
                self._worker.resolver.resolve(task, self._enqueue, self._fail_with_value)

    def set_locality_enabled(self, enabled: bool) -> None:
        self._locality_enabled = enabled

    def _enqueue(self, task: PendingTask) -> None:
        preferred = preferred_node(task.input_bytes_by_node) if self._locality_enabled else ""
        shape = task.resource_shape or resource_shape(task.spec.resources)
        key = f"{shape}@{preferred}"
        task.scheduling_key = key
        with self._lock:
            if task.cancelled:
                return
            self._queues.setdefault(key, collections.deque()).append(task)
            self._pump(key)

    def _pump_together(self, keys: Iterable[str]) -> None:
        """(Lock held) pump each key; the tasks they dispatch to one worker go out in one
        write."""
        if self._outbox is not None:  # already gathering: the outer call sends
            for key in keys:
                self._pump(key)
            return
        outbox: dict[WorkerConnection, list[common_pb2.TaskSpec]] = {}
        self._outbox = outbox
        try:
            for key in keys:
                self._pump(key)
        finally:
            self._outbox = None
            for conn, specs in outbox.items():
                conn.send_many(specs)
                self._sent += len(specs)
                self._writes += 1

    def _pump(self, key: str) -> None:
        queue = self._queues.setdefault(key, collections.deque())
        leases = [le for le in self._leases.get(key, ()) if not le.conn.broken]
        while queue:
            lease = least_loaded(leases)
            if lease is None:
                break
            self._dispatch(queue.popleft(), lease)
        behind = [task for le in leases for task in waiting_behind(le)]
        if not queue:
            for task in steal_plan(leases):
                task.steal_requested = True
                self._worker.background(self._worker.cancel_on_worker, task.lease.worker,
                                        task.task_id, False, True)
        # Queued and pipelined tasks both want a worker of their own.
        wanted = lease_requests_wanted(len(queue), len(behind))
        example = queue[0] if queue else (behind[0] if behind else None)
        requested = self._lease_requests.get(key, 0)
        while example is not None and requested < wanted:
            requested = self._lease_requests[key] = requested + 1
            ask = LeaseAsk(next(self._ask_ids).to_bytes(8, "big"), key, since=time.monotonic())
            self._asks.setdefault(key, []).append(ask)
            self._worker.background(self._request_lease, ask, example)
        if requested and wanted >= requested:
            self._needed_at[key] = time.monotonic()

    def _dispatch(self, task: PendingTask, lease: Lease) -> None:
        spec = task.spec
        task.lease = lease
        lease.inflight[spec.task_id] = task
        lease.dispatched += 1
        # A scheduling decision is made once per lease (by the raylet that granted it);
        # later tasks of the same shape reuse the worker without a new decision. So the
        # decision's span and log line come with the lease's first task only, and every
        # dispatch names the lease it went out on.
        decided = lease.dispatched == 1
        if telemetry.enabled():
            parent = task.trace_parent or trace_context.parent_of(spec)
            if decided:
                parent_context = telemetry.parent_context(parent)
                common: dict[str, Any] = {A.TASK_ID: spec.task_id.hex(),
                                          A.TASK_ATTEMPT: spec.attempt}
                reason = str(lease.decision.get(A.SCHEDULING_REASON, ""))
                decision: dict[str, Any] = lease.decision
                telemetry.start_span("task.schedule", {**common, **decision,
                                                       A.SCHEDULING_REASON: reason},
                                     parent=parent_context).end()
                # The first dispatch of a lease writes a log line inside its span (which
                # needs a span object); the others only need recording when their result
                # is in.
                task.dispatch_span = telemetry.start_span("task.dispatch", {
                    **common, **lease.reused_attributes(), A.SCHEDULING_REASON: reason},
                    parent=parent_context)
            else:
                task.dispatch_span = instruments.task_dispatched(
                    lease.reused_dispatch_shape(), spec.task_id, spec.attempt, parent=parent)
        self._worker.task_events.record(spec, "SUBMITTED_TO_WORKER", node_id=lease.worker.node_id,
                                        worker_id=lease.worker.worker_id,
                                        worker_pid=lease.worker.pid)
        if decided:  # one line for the decision and the dispatch it led to
            with telemetry.activate(task.dispatch_span or otel_trace.INVALID_SPAN):
                log.info("task.dispatch", task_id=spec.task_id.hex(), job_id=spec.job_id.hex(),
                         attempt=spec.attempt, node_id=lease.worker.node_id,
                         worker_pid=lease.worker.pid, lease_id=lease.lease_id,
                         reason=str(lease.decision.get(A.SCHEDULING_REASON, "")))
        outbox = self._outbox
        if outbox is None:
            lease.conn.send(spec)
            self._sent += 1
            self._writes += 1
        else:  # submit_many sends them together when it is done
            outbox.setdefault(lease.conn, []).append(spec)

    # --- leases
    def _request_lease(self, ask: LeaseAsk, example: PendingTask) -> None:
        with self._lock:
            if self._closed or ask.withdrawn:  # queued before the close (or withdrawal)
                self._end_ask(ask)
                return
            self._requesting += 1
        try:
            failed = self._lease_for(ask, example)
        finally:
            with self._lock:
                self._requesting -= 1
                self._requests_over.notify_all()
        if failed and not self._closed:
            time.sleep(0.5)
            with self._lock:
                self._pump(ask.key)

    def _end_ask(self, ask: LeaseAsk) -> None:
        """Forget an answered request (the caller holds the lock)."""
        asks = self._asks[ask.key]
        asks.remove(ask)
        if not asks:
            del self._asks[ask.key]
            self._needed_at.pop(ask.key, None)
        if not ask.withdrawn:
            self._lease_requests[ask.key] -= 1

    def _lease_for(self, ask: LeaseAsk, example: PendingTask) -> bool:
        """Ask for a lease and keep it (or give it back if this submitter closed or
        withdrew the request meanwhile); True when the request failed and is still
        wanted."""
        worker = self._worker
        key, spec = ask.key, example.spec
        preferred = key.rpartition("@")[2]
        raylet = worker.raylet_for_node(preferred) if preferred else worker.raylet
        request = raylet_pb2.LeaseRequest(
            scheduling_key=key, resources=dict(spec.resources), requester=worker.address.to_proto(),
            job_id=spec.job_id, task_id=spec.task_id,
            input_bytes_by_node=example.input_bytes_by_node, request_id=ask.request_id)
        try:
            reply, raylet = self._lease_from(raylet, request, ask)
        except RaySystemError as exc:
            if not self._closed and not ask.withdrawn:  # else cancelled by the close
                log.warning("lease.request_failed", error=str(exc), raylet=raylet.address)
            with self._lock:
                self._end_ask(ask)
                return not ask.withdrawn
        with self._lock:
            self._end_ask(ask)
            if reply is None or reply.status != raylet_pb2.LeaseReply.GRANTED:
                return False
            if not self._closed and not ask.withdrawn:
                self._add_lease(key, raylet, reply)
                return False
            closing = self._closed
            if not closing:
                self._unneeded_grants += 1
        if closing:
            # Granted while closing: given back here, not through worker.background,
            # which stops with this process (the close waits for this).
            self._return_worker(LeaseReturn(raylet, reply.lease_id, False),
                                timeout=CLOSE_BUDGET_S)
            return False
        # Granted just before its withdrawal reached the raylet: a task queued since has
        # a request of its own, so the worker goes straight back to idle (the raylet
        # grants it to the next request waiting, perhaps another caller's).
        log.info("lease.unneeded_grant", scheduling_key=key, lease_id=reply.lease_id,
                 worker_pid=reply.worker.pid, raylet=raylet.address)
        self._return_worker(LeaseReturn(raylet, reply.lease_id, False))
        return False

    def _add_lease(self, key: str, raylet: RayletClient, reply: raylet_pb2.LeaseReply) -> None:
        decision: dict[str, object] = {
            A.SCHEDULING_CANDIDATES: list(reply.candidates),
            A.SCHEDULING_LOCAL_BYTES: list(reply.local_bytes),
            A.SCHEDULING_QUEUE_LENGTHS: list(reply.queue_lengths),
            A.SCHEDULING_REASON: reply.reason,
            A.SCHEDULING_CHOSEN_NODE: reply.chosen_node,
        }
        address = Address.from_proto(reply.worker)
        conn = WorkerConnection(address, self._on_results, self._on_broken)
        lease = Lease(reply.lease_id, key, raylet, address, conn, decision)
        self._leases.setdefault(key, []).append(lease)
        self._pump(key)

    def _lease_from(self, raylet: RayletClient, request: raylet_pb2.LeaseRequest,
                    ask: LeaseAsk) -> tuple[raylet_pb2.LeaseReply | None, RayletClient]:
        """Ask ``raylet``, following spillbacks. A remote raylet that cannot be reached
        (its node died, perhaps not yet declared dead) is replaced by the local one,
        which then keeps the request (grant_or_reject) instead of spilling it back to
        the same dead node from a stale view. The reply is None when the request was
        withdrawn before a hop. Raises ``RaySystemError`` when the local raylet fails or
        the hops run out."""
        local = self._worker.raylet
        for _ in range(8):
            try:
                reply = self._ask(raylet, request, ask)
            except RaySystemError as exc:
                if raylet is local or self._closed:
                    raise
                log.warning("lease.node_unreachable", raylet=raylet.address, error=str(exc),
                            fallback=local.address)
                raylet, request.grant_or_reject = local, True
                continue
            if reply is None or reply.status != raylet_pb2.LeaseReply.SPILLBACK:
                return reply, raylet
            raylet = RayletClient(Address.from_proto(reply.spillback_raylet).target)
            request.grant_or_reject = True
        raise RaySystemError(f"lease request for {request.scheduling_key} bounced between "
                             "raylets 8 times")

    def _ask(self, raylet: RayletClient, request: raylet_pb2.LeaseRequest, ask: LeaseAsk
             ) -> raylet_pb2.LeaseReply | None:
        """One hop of a lease request, known to the close and to withdrawals while it
        waits; None (not sent) once withdrawn."""
        with self._lock:
            if self._closed:
                raise RaySystemError("the task submitter is closed")
            if ask.withdrawn:
                return None
            call = raylet.start_lease_request(request)
            ask.raylet, ask.call = raylet, call
        try:
            return call.result()
        finally:
            with self._lock:
                ask.raylet = ask.call = None

    def _withdraw_unneeded_requests(self, now: float
                                    ) -> list[tuple[RayletClient, str, list[bytes]]]:
        """Mark the requests no task needs withdrawn (the caller holds the lock); returns
        the ids to withdraw per raylet and key, of those waiting at a raylet (the others
        are not sent, or not sent on after a spillback).

        Patience is half a linger: the requests of a key whose work has ended go before
        its idle leases are given back, else the raylet would grant a worker given back
        to one of them instead of to the next caller in its queue."""
        batches: dict[tuple[str, str], tuple[RayletClient, str, list[bytes]]] = {}
        patience_s = self._linger_s / 2
        for key, asks in self._asks.items():
            unneeded_for_s = now - self._needed_at.get(key, 0.0)
            if unneeded_for_s < patience_s:
                continue  # as in every tick of a burst: nothing to withdraw, nothing to count
            queue = self._queues.get(key)
            behind = sum(len(waiting_behind(lease)) for lease in self._leases.get(key, ())
                         if not lease.conn.broken)
            for ask in requests_to_withdraw(asks, len(queue) if queue else 0, behind,
                                            unneeded_for_s=unneeded_for_s,
                                            patience_s=patience_s):
                ask.withdrawn = True
                self._lease_requests[key] -= 1
                self._withdrawn_total += 1
                if ask.raylet is not None:
                    batch = batches.setdefault((ask.raylet.address, key), (ask.raylet, key, []))
                    batch[2].append(ask.request_id)
        return list(batches.values())

    def _send_withdrawal(self, raylet: RayletClient, key: str, request_ids: list[bytes]) -> None:
        try:
            waiting = raylet.withdraw_lease_requests(self._worker.worker_id,
                                                     timeout=WITHDRAW_TIMEOUT_S,
                                                     request_ids=request_ids)
        except RaySystemError as exc:  # its requests end when the raylet answers or fails
            log.debug("lease.withdraw_failed", raylet=raylet.address, error=str(exc))
            return
        log.info("lease.requests_withdrawn", scheduling_key=key, raylet=raylet.address,
                 requests=len(request_ids), waiting=waiting)

    def lease_nodes(self) -> set[str]:
        """Nodes this process holds worker leases on."""
        with self._lock:
            return {lease.worker.node_id for lease in self._all_leases()}

    def _release_lease_remote(self, raylet: RayletClient, lease_id: str, failed: bool) -> None:
        given_back = LeaseReturn(raylet, lease_id, failed)
        if not self._worker.background(self._return_worker, given_back):
            self._dropped_late.append(given_back)

    @staticmethod
    def _return_worker(lease: LeaseReturn, timeout: float = 60.0) -> None:
        try:
            lease.raylet.return_worker(lease.lease_id, worker_failed=lease.failed,
                                       disconnect=lease.running, timeout=timeout)
        except RaySystemError as exc:
            log.debug("lease.return_failed", lease_id=lease.lease_id, error=str(exc))

    def _drop_lease(self, lease: Lease, failed: bool) -> None:
        leases = self._leases.get(lease.key, [])
        if lease in leases:
            leases.remove(lease)
            lease.conn.close()
            self._release_lease_remote(lease.raylet, lease.lease_id, failed)

    def _return_idle_leases(self) -> None:
        """Every half linger: withdraw the lease requests no task needs any more (here
        rather than as a key's last task goes out, so that submitting pays nothing for
        it and a key whose work comes in waves does not withdraw and ask again between
        two tasks), then give back the leases idle for a linger. The withdrawals are
        answered first: a worker given back must go to the next caller waiting, not to
        one of this process's own requests about to be withdrawn."""
        while not self._closed:
            time.sleep(self._linger_s / 2)
            now = time.monotonic()
            with self._lock:
                withdrawals = self._withdraw_unneeded_requests(now)
                waiting = self._waiting_long(now)
            for raylet, key, request_ids in withdrawals:
                self._send_withdrawal(raylet, key, request_ids)
            if waiting:
                self._infeasible.poll(waiting)
            with self._lock:
                for key, leases in list(self._leases.items()):
                    if self._queues.get(key):
                        continue
                    for lease in list(leases):
                        if not lease.inflight and now - lease.idle_since >= self._linger_s:
                            self._drop_lease(lease, failed=False)

    def _waiting_long(self, now: float) -> list[Waiting]:
        """Queued work whose oldest lease request has waited long enough to ask whether
        any node can run it (the caller holds the lock)."""
        out = []
        for key, asks in self._asks.items():
            queue = self._queues.get(key)
            if queue and asks and now - asks[0].since >= WARN_AFTER_S:
                spec = queue[0].spec
                out.append(Waiting(shape_of(spec.resources), asks[0].since,
                                   f"task {spec.function_name}"))
        return out

    def watch_actor_creation(self, resources: dict[str, float], class_name: str) -> None:
        """Warn like a task's if the GCS can place the actor on no alive node."""
        self._infeasible.watch_creation(resources, f"actor {class_name}")

    def _alive_node_totals(self) -> list[dict[str, float]]:
        return [dict(n.info.resources_total) for n in self._worker.gcs.get_nodes()
                if n.info.state == "ALIVE"]

    # --- results
    def _on_results(self, conn: WorkerConnection, results: list[common_pb2.TaskResult]) -> None:
        finished: list[tuple[PendingTask, common_pb2.TaskResult]] = []
        with self._lock:
            for result in results:
                task = self._find_inflight(result.task_id)
                if task is None:
                    continue
                lease = task.lease
                del lease.inflight[result.task_id]
                if not lease.inflight:
                    lease.idle_since = time.monotonic()
                if result.requeued:
                    _end_span(task, ok=True, note="requeued")
                    task.lease = None
                    task.steal_requested = False
                    self._queues.setdefault(lease.key, collections.deque()).appendleft(task)
                    continue
                if (result.is_application_error and result.retryable_error
                        and task.retries_left != 0 and not task.cancelled and result.returns
                        and task.retry_exceptions.matches(
                            stored_error(self._worker, result.returns[0]))):
                    _end_span(task, ok=False, note="application error; retrying")
                    self._retry(task)
                    continue
                if (result.is_application_error and task.retries_left != 0
                        and not task.cancelled and is_lost_input(result)):
                    # Not the task's fault: a node holding its input died. Run it again
                    # once the input is rebuilt (it may take the dead node's verdict).
                    _end_span(task, ok=False, note="an input object was lost; retrying")
                    task.lease = None
                    self._worker.background(self._retry_after_loss, task, True)
                    continue
                finished.append((task, result))
            self._pump_together({t.scheduling_key for t, _ in finished} | {
                le.key for le in self._all_leases() if le.conn is conn})
        end_dispatch_spans(task for task, result in finished if not result.is_application_error)
        for task, result in finished:
            _end_span(task, ok=not result.is_application_error)  # the failed ones
            self._complete(task, list(result.returns),
                           "FAILED" if result.is_application_error else "FINISHED",
                           reported_by_executor=True)

    def _find_inflight(self, task_id: bytes) -> PendingTask | None:
        task = self._tasks.get(task_id)
        if task is None or task.lease is None or task_id not in task.lease.inflight:
            return None
        return task

    def _all_leases(self) -> list[Lease]:
        return [lease for leases in self._leases.values() for lease in leases]

    def _on_broken(self, conn: WorkerConnection, error: BaseException | None) -> None:
        with self._lock:
            lease = next((le for le in self._all_leases() if le.conn is conn), None)
            if lease is None:
                return
            orphans = list(lease.inflight.values())
            lease.inflight.clear()
            self._drop_lease(lease, failed=True)
        if orphans:
            self._worker.background(self._handle_worker_death, lease, orphans)
        else:
            with self._lock:
                self._pump(lease.key)

    def _handle_worker_death(self, lease: Lease, orphans: list[PendingTask]) -> None:
        crash = self._worker.describe_worker_exit(lease.raylet, lease.worker)
        # describe_worker_exit waited for the verdict if the worker's raylet was gone.
        node_dead = self._worker.recovery.nodes.is_dead(lease.worker.node_id)
        with self._lock:
            for task in orphans:
                _end_span(task, ok=False, note=str(crash))
                if task.cancelled:
                    self._complete_error(task, TaskCancelledError(task.task_id.hex()), "CANCELLED")
                elif task.retries_left != 0:
                    log.warning("task.retry", task_id=task.task_id.hex(),
                                attempt=task.spec.attempt + 1, cause=str(crash))
                    self._worker.task_events.record(task.spec, "FAILED",
                                                    error_type="WorkerCrashedError",
                                                    error_message=str(crash),
                                                    node_id=lease.worker.node_id,
                                                    worker_id=lease.worker.worker_id,
                                                    worker_pid=lease.worker.pid)
                    if node_dead:
                        task.lease = None
                        self._worker.background(self._retry_after_loss, task, False)
                    else:
                        self._retry(task)
                else:
                    self._complete_error(task, crash, "FAILED")
            self._pump(lease.key)

    def _retry_after_loss(self, task: PendingTask, input_lost: bool) -> None:
        """Retry a task after a node died: its inputs that lived there are resolved
        again (their owners rebuild them), then it is queued under a fresh key."""
        recovery = self._worker.recovery
        try:
            if input_lost:
                recovery.settle_inputs(task.spec)
            recovery.refresh_inputs(task)
        except ObjectLostError as exc:
            self._complete_error(task, exc, "FAILED")
            return
        with self._lock:
            if task.retries_left > 0:
                task.retries_left -= 1
            task.spec.attempt += 1
            self._retried += 1
        log.warning("task.retry", task_id=task.task_id.hex(), attempt=task.spec.attempt,
                    cause="input lost with a dead node" if input_lost else "node died")
        self._worker.resolver.resolve(task, self._enqueue, self._fail_with_value)

    def _retry(self, task: PendingTask) -> None:
        if task.retries_left > 0:
            task.retries_left -= 1
        task.spec.attempt += 1
        task.lease = None
        self._retried += 1
        self._queues.setdefault(task.scheduling_key, collections.deque()).append(task)
        self._pump(task.scheduling_key)

    # --- completion
    def _fail_with_value(self, task: PendingTask, error: common_pb2.ObjectValue) -> None:
        values = []
        for oid in task.return_ids:
            value = common_pb2.ObjectValue()
            value.CopyFrom(error)
            value.object_id = oid
            values.append(value)
        self._complete(task, values, "FAILED")

    def _complete_error(self, task: PendingTask, exc: BaseException, state: str) -> None:
        self._complete(task, [error_value(oid, exc) for oid in task.return_ids], state)

    def _complete(self, task: PendingTask, values: list[common_pb2.ObjectValue],
                  state: str, *, reported_by_executor: bool = False) -> None:
        with self._lock:
            if self._tasks.pop(task.task_id, None) is None:
                return
            self._finished += 1
        self._worker.finish_task(task, values, state, reported_by_executor=reported_by_executor)

    # --- cancel / shutdown / introspection
    def cancel(self, task_id: bytes, force: bool, recursive: bool = True) -> bool:
        with self._lock:
            task = self._tasks.get(task_id)
            if task is None:
                return False
            task.cancelled = True
            task.force_cancelled = force
            queue = self._queues.get(task.scheduling_key)
            if task.lease is None:
                if queue and task in queue:
                    queue.remove(task)
                self._complete_error(task, TaskCancelledError(task_id.hex()), "CANCELLED")
                return True
            worker_address = task.lease.worker
        self._worker.cancel_on_worker(worker_address, task_id, force, recursive=recursive)
        return True

    def cancel_children(self, parent_task_id: bytes, force: bool) -> int:
        """Cancel, recursively, the unfinished tasks submitted by ``parent_task_id``
        (which ran, or runs, in this process)."""
        with self._lock:
            children = [t.task_id for t in self._tasks.values()
                        if t.spec.parent_task_id == parent_task_id]
        for child in children:
            self.cancel(child, force, recursive=True)
        return len(children)

    def fail_all(self, exc: BaseException) -> None:
        """Close: give every lease back, then fail every unfinished task."""
        with self._lock:
            self._closed = True
            tasks = list(self._tasks.values())
            held = self._all_leases()
            for lease in held:
                lease.conn.close()
            self._leases.clear()
            self._queues.clear()
            waiting_at = {ask.raylet.address: ask.raylet for ask in self._all_asks()
                          if ask.raylet is not None}
            to_return = [LeaseReturn(le.raylet, le.lease_id, False, bool(le.inflight))
                         for le in held] + self._dropped_late
        self._give_leases_back(to_return, list(waiting_at.values()))
        for task in tasks:
            self._complete_error(task, exc, "FAILED")

    def _give_leases_back(self, leases: list[LeaseReturn],
                          waiting_at: list[RayletClient]) -> None:
        """Leave no lease behind, within CLOSE_BUDGET_S: here, not through
        worker.background, which stops with this process (the raylets would otherwise
        only take the leases back once it is gone, killing their workers).

        First the raylets where requests wait withdraw them, so that no worker given
        back (by this process or another) is granted to this one again; then the leases
        go back (one whose worker still runs tasks of this process to be stopped, see
        LeaseReturn); then the close waits for the requests to end: each is answered, or was
        granted just before its withdrawal and its thread gives that lease back. A
        request still waiting at the end (a raylet that did not answer) is cancelled.
        """
        deadline = time.monotonic() + CLOSE_BUDGET_S
        for raylet in waiting_at:
            try:
                raylet.withdraw_lease_requests(self._worker.worker_id,
                                               timeout=max(0.1, deadline - time.monotonic()))
            except RaySystemError as exc:
                log.debug("lease.withdraw_failed", raylet=raylet.address, error=str(exc))
        for lease in leases:
            self._return_worker(lease, timeout=max(0.1, deadline - time.monotonic()))
        with self._lock:
            self._requests_over.wait_for(lambda: self._requesting == 0,
                                         timeout=max(0.0, deadline - time.monotonic()))
            for ask in self._all_asks():
                if ask.call is not None:
                    ask.call.cancel()

    def _all_asks(self) -> list[LeaseAsk]:
        return [ask for asks in self._asks.values() for ask in asks]

    def pending_task(self, task_id: bytes) -> PendingTask | None:
        with self._lock:
            return self._tasks.get(task_id)

    def statistics(self) -> SubmitterStatistics:
        with self._lock:
            return SubmitterStatistics(
                queued=sum(len(q) for q in self._queues.values()),
                inflight=sum(len(le.inflight) for le in self._all_leases()),
                leases=len(self._all_leases()),
                pending_lease_requests=len(self._all_asks()),
                submitted_total=self._submitted, finished_total=self._finished,
                retried_total=self._retried, lease_requests_withdrawn_total=self._withdrawn_total,
                unneeded_grants_total=self._unneeded_grants,
                infeasible_warnings_total=self._infeasible.statistics().warnings,
                sent_total=self._sent, writes_total=self._writes)

    def __repr__(self) -> str:
        s = self.statistics()
        return f"<TaskSubmitter queued={s.queued} inflight={s.inflight} leases={s.leases}>"


def _end_span(task: PendingTask, *, ok: bool, note: str = "") -> None:
    span = task.dispatch_span
    if span is None:
        return
    task.dispatch_span = None
    if ok:
        telemetry.finish_span(span, attributes={"tracedray.dispatch.note": note} if note else None)
    else:
        telemetry.finish_span(span, error=WorkerCrashedError(note) if note
                              else RuntimeError("failed"))


def crash_error(info: raylet_pb2.WorkerExitInfo, worker: Address) -> WorkerCrashedError:
    if info.exited:
        how = f"signal {info.signal} (exit {info.exit_code})" if info.signal else \
            f"exit code {info.exit_code}"
        message = (f"the worker process (pid {info.pid or worker.pid}) on node "
                   f"{worker.node_id[:12]} ({worker.ip}) died: {how}: {info.meaning}")
        if info.node_memory_percent:
            message += f"; node memory was {info.node_memory_percent:.0f}% used"
    else:
        message = (f"the connection to worker pid {worker.pid} on {worker.ip} was lost "
                   "and the raylet could not say why (node unreachable?)")
    return WorkerCrashedError(message, exit_code=info.exit_code if info.exited else None,
                              signal_name=info.signal or None, meaning=info.meaning)
