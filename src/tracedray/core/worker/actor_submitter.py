"""Actor method calls: one ordered stream per (caller, actor), restarts and death.

Calls are sent in submission order once their arguments are resolved (a call
whose argument is not ready holds back later calls, preserving order). When the
actor's process dies, the GCS restarts it (``max_restarts``); calls in flight
are retried on the new instance up to ``max_task_retries``, otherwise they fail
with ``RayActorError``; once the actor is DEAD every call fails with
``ActorDiedError`` carrying the cause.
"""

from __future__ import annotations

import collections
import functools
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tracedray import logs, telemetry
from tracedray._proto.v1 import common_pb2
from tracedray.core import trace_context
from tracedray.core.address import Address
from tracedray.core.protocol.connection import WorkerConnection
from tracedray.core.worker.executor_reports import ExecutorReports
from tracedray.core.worker.pending_task import (
    DependencyResolver,
    PendingTask,
    end_dispatch_spans,
    loaded_error,
)
from tracedray.core.worker.retry_policy import budget_left, retry_after_application_error
from tracedray.exceptions import (
    ActorDiedError,
    RayActorError,
    RaySystemError,
    TaskCancelledError,
)
from tracedray.telemetry import attributes as A
from tracedray.telemetry import instruments

if TYPE_CHECKING:
    from tracedray.core.gcs.client import GcsClient
    from tracedray.core.worker.task_results import TaskResults

log = logs.get_logger(__name__)


@dataclass
class ActorChannel:
    actor_id: bytes
    max_task_retries: int
    state: str = "UNKNOWN"  # UNKNOWN | CONNECTING | ALIVE | DEAD
    address: Address | None = None
    conn: WorkerConnection | None = None
    num_restarts: int = 0
    death_cause: str = ""
    next_sequence: int = 0
    ordered: collections.deque[PendingTask] = field(default_factory=collections.deque)
    ready: set[bytes] = field(default_factory=set)
    inflight: dict[bytes, PendingTask] = field(default_factory=dict)
    # The dispatch span attributes every call to the actor's current address shares,
    # built once per address (a restarted actor has a new one).
    shape_address: Address | None = field(default=None, repr=False)
    shape: telemetry.SpanShape | None = field(default=None, repr=False)

    def dispatch_shape(self, address: Address) -> telemetry.SpanShape:
        """The shape (span_shape.py) of the ``task.dispatch`` spans of calls sent to the
        actor at ``address``: their task id and attempt, then the actor's place."""
        shape = self.shape
        if shape is None or self.shape_address is not address:
            shape = self.shape = instruments.dispatch_shape(
                {A.ACTOR_ID: self.actor_id.hex(), A.NODE_ID: address.node_id,
                 A.NODE_IP: address.ip, A.WORKER_ID: address.worker_id,
                 A.WORKER_PID: address.pid})
            self.shape_address = address
        return shape


class ActorSubmitter:
    def __init__(self, gcs: GcsClient, resolver: DependencyResolver, results: TaskResults, *,
                 load: Callable[[common_pb2.ObjectValue], Any],
                 background: Callable[..., bool],
                 first_state_reported: Callable[[Iterable[bytes]], None],
                 release_first_state: Callable[[Iterable[bytes]], None],
                 reports: ExecutorReports) -> None:
        self._gcs = gcs
        self._reports = reports
        # A call that cannot be sent at once: its caller records its first state itself.
        self._release_first_state = release_first_state
        # The actor answered a call: it reported the call's first state (task_events.py).
        self._first_state_reported = first_state_reported
        self._load = load  # a value as get() returns it (raises its error)
        self._resolver = resolver
        self._results = results  # where a call's results (or its error) go
        self._background = background
        self._lock = threading.RLock()
        self._channels: dict[bytes, ActorChannel] = {}
        self._calls_sent = self._writes = 0

    def submit(self, task: PendingTask, max_task_retries: int) -> None:
        self.submit_many([(task, max_task_retries)])

    def submit_many(self, calls: list[tuple[PendingTask, int]]) -> None:
        """Queue calls (task, its max_task_retries) in order; the calls to one actor whose
        arguments are ready go out together, as one write."""
        ready: dict[bytes, ActorChannel] = {}
        with self._lock:
            for task, max_task_retries in calls:
                actor_id = task.spec.actor_id
                channel = self._channels.get(actor_id)
                if channel is None:
                    channel = ActorChannel(actor_id, max_task_retries)
                    self._channels[actor_id] = channel
                task.spec.sequence_number = channel.next_sequence
                channel.next_sequence += 1
                channel.ordered.append(task)
                if channel.state == "UNKNOWN":
                    channel.state = "CONNECTING"
                    self._background(self._connect, channel, 0)
                if not task.unresolved:
                    channel.ready.add(task.task_id)
                    ready[actor_id] = channel
            for channel in ready.values():
                self._flush(channel)
            # Calls left waiting (no connection yet, arguments pending) may wait long.
            waiting = [task.task_id for task, _ in calls
                       if task.task_id not in self._channels[task.spec.actor_id].inflight]
        if waiting:
            self._release_first_state(waiting)
        for task, _ in calls:
            if task.unresolved:
                self._resolver.resolve(task, self._on_resolved,
                                              self._on_dependency_failed)

    def _on_resolved(self, task: PendingTask) -> None:
        with self._lock:
            channel = self._channels[task.spec.actor_id]
            channel.ready.add(task.task_id)
            self._flush(channel)

    def _on_dependency_failed(self, task: PendingTask, error: common_pb2.ObjectValue) -> None:
        with self._lock:
            channel = self._channels[task.spec.actor_id]
            if task in channel.ordered:
                channel.ordered.remove(task)
            self._flush(channel)
        values = []
        for oid in task.return_ids:
            value = common_pb2.ObjectValue()
            value.CopyFrom(error)
            value.object_id = oid
            values.append(value)
        self._results.finish(task, values, "FAILED")

    def _flush(self, channel: ActorChannel) -> None:
        """Send, in order, every call at the head of the queue whose arguments are ready."""
        if channel.state == "DEAD":
            dead = list(channel.ordered)
            channel.ordered.clear()
            for task in dead:
                self._fail(task, ActorDiedError(channel.death_cause, channel.actor_id.hex()))
            return
        if channel.state != "ALIVE" or channel.conn is None:
            return
        specs = []
        while channel.ordered and channel.ordered[0].task_id in channel.ready:
            task = channel.ordered.popleft()
            channel.ready.discard(task.task_id)
            channel.inflight[task.task_id] = task
            address = channel.address
            if telemetry.enabled() and address is not None:
                task.dispatch_span = instruments.task_dispatched(
                    channel.dispatch_shape(address), task.task_id, task.spec.attempt,
                    parent=task.trace_parent or trace_context.parent_of(task.spec))
            specs.append(task.spec)
        if specs:
            channel.conn.send_many(specs)
            self._calls_sent += len(specs)
            self._writes += 1

    def _connect(self, channel: ActorChannel, min_restarts: int) -> None:
        gcs = self._gcs
        try:
            info = gcs.find_actor(channel.actor_id, wait_until_settled=True, timeout_s=3600.0,
                                  min_restarts=min_restarts)
            cause = (f"Can't find actor {channel.actor_id.hex()}. It might be dead or it's from "
                     f"a different cluster (the GCS at {gcs.address} never had it)")
        except RaySystemError as exc:
            info = None
            cause = f"the GCS could not be asked about the actor: {exc}"
        with self._lock:
            if info is not None and info.state == "ALIVE":
                channel.address = Address.from_proto(info.address)
                channel.num_restarts = info.num_restarts
                channel.conn = WorkerConnection(
                    channel.address, functools.partial(self._on_results, channel),
                    self._on_broken)
                channel.state = "ALIVE"
            else:
                channel.state = "DEAD"
                channel.death_cause = info.death_cause if info is not None else cause
            self._flush(channel)

    def _on_results(self, sent_on: ActorChannel, conn: WorkerConnection,
                    results: list[common_pb2.TaskResult]) -> None:
        """Results read from the connection of ``sent_on``: its calls' results, looked up
        there first (one lookup per result, not one per actor of this process)."""
        done = []
        answered = []
        with self._lock:
            for result in results:
                found = self._pop_inflight(sent_on, result.task_id)
                if found is None:
                    continue
                channel, task = found
                answered.append((task.spec, result))
                if self._retries_error(task, result):
                    # Runs again on the actor, ahead of the calls still queued.
                    _end(task, ok=False)
                    task.spec.attempt += 1
                    channel.ordered.appendleft(task)
                    channel.ready.add(task.task_id)
                    log.info("actor.call_retry", actor_id=channel.actor_id.hex(),
                             task_id=task.task_id.hex(), attempt=task.spec.attempt)
                    self._flush(channel)
                else:
                    done.append((task, result))
        # The actor ran these calls (a retried one too): it reported their first states,
        # which we record ourselves should it die before they reach the GCS.
        self._reports.answered(conn, answered)
        self._first_state_reported(r.task_id for r in results
                                   if not (r.requeued or r.cancelled))
        end_dispatch_spans(task for task, result in done if not result.is_application_error)
        for task, result in done:
            _end(task, ok=not result.is_application_error)  # the failed ones
            self._results.finish(task, list(result.returns),
                                     "FAILED" if result.is_application_error else "FINISHED",
                                     reported_by_executor=True)

    def _pop_inflight(self, sent_on: ActorChannel, task_id: bytes
                      ) -> tuple[ActorChannel, PendingTask] | None:
        """The in-flight call ``task_id`` and its channel, taken out of it: looked for in
        ``sent_on`` first, then in every channel (lock held)."""
        task = sent_on.inflight.pop(task_id, None)
        if task is not None:
            return sent_on, task
        for channel in self._channels.values():
            task = channel.inflight.pop(task_id, None)
            if task is not None:
                return channel, task
        return None

    def _on_broken(self, conn: WorkerConnection, error: BaseException | None) -> None:
        self._reports.lost(conn)
        with self._lock:
            channel = next((c for c in self._channels.values() if c.conn is conn), None)
            if channel is None:
                return
            conn.close()
            channel.conn = None
            channel.state = "CONNECTING"
            orphans = sorted(channel.inflight.values(), key=lambda t: t.spec.sequence_number)
            channel.inflight.clear()
            retry: list[PendingTask] = []
            fail: list[PendingTask] = []
            for task in orphans:  # the call's own budget: @method / .options() / the actor's
                (retry if budget_left(task.spec.max_retries, task.spec.attempt)
                 else fail).append(task)
            for task in reversed(retry):
                task.spec.attempt += 1
                channel.ordered.appendleft(task)
                channel.ready.add(task.task_id)
            restarts = channel.num_restarts + 1
        log.warning("actor.connection_lost", actor_id=channel.actor_id.hex(),
                    retrying=len(retry), failing=len(fail))
        if fail:
            self._background(self._fail_orphans, channel.actor_id, fail)
        self._background(self._connect, channel, restarts)

    def _fail_orphans(self, actor_id: bytes, orphans: list[PendingTask]) -> None:
        """Fail the calls a lost connection took, without retries left, saying why: an
        actor that ended for good (``__ray_terminate__``, ``exit_actor()``, ``kill``) told
        the GCS before it left, so its calls fail with its death cause, as in Ray; one
        the GCS does not know dead yet (a crash) died while running them."""
        error: RayActorError = RayActorError(
            f"the actor {actor_id.hex()} died while running this call "
            "(set max_task_retries to retry calls on the restarted actor)", actor_id.hex())
        try:
            info = self._gcs.find_actor(actor_id)
        except RaySystemError:
            info = None
        if info is not None and info.state == "DEAD" and info.death_cause:
            error = ActorDiedError(info.death_cause, actor_id.hex())
        for task in orphans:
            _end(task, ok=False)
            self._fail(task, error)

    def _retries_error(self, task: PendingTask, result: common_pb2.TaskResult) -> bool:
        """Whether an application error of an actor call runs it again (its
        ``retry_exceptions`` and ``max_task_retries``, as in Ray)."""
        if (not (result.is_application_error and result.retryable_error) or result.cancelled
                or not result.returns):
            return False
        return retry_after_application_error(
            task.retry_exceptions, loaded_error(self._load, result.returns[0]),
            task.spec.max_retries, task.spec.attempt, task.cancelled)

    def _fail(self, task: PendingTask, exc: BaseException) -> None:
        from tracedray.core.worker.pending_task import error_value

        self._results.finish(task, [error_value(oid, exc) for oid in task.return_ids], "FAILED")

    def owns_call(self, task_id: bytes) -> bool:
        """Whether an unfinished actor call of this process has that id."""
        with self._lock:
            return any(task_id in c.inflight or any(t.task_id == task_id for t in c.ordered)
                       for c in self._channels.values())

    def cancel(self, task_id: bytes) -> bool:
        """Cancel an actor call not sent yet; a running one is not interrupted (as in
        Ray). Returns whether it was cancelled."""
        with self._lock:
            for channel in self._channels.values():
                task = next((t for t in channel.ordered if t.task_id == task_id), None)
                if task is not None:
                    channel.ordered.remove(task)
                    channel.ready.discard(task_id)
                    task.cancelled = True
                    self._flush(channel)
                    break
            else:
                return False
        self._fail(task, TaskCancelledError(task_id.hex()))
        return True

    def mark_dead(self, actor_id: bytes, cause: str) -> None:
        with self._lock:
            channel = self._channels.get(actor_id)
            if channel is not None and channel.state != "DEAD":
                channel.state = "DEAD"
                channel.death_cause = cause
                self._flush(channel)

    def close(self) -> None:
        with self._lock:
            for channel in self._channels.values():
                if channel.conn is not None:
                    channel.conn.close()
                    channel.conn = None

    def statistics(self) -> dict[str, int]:
        with self._lock:
            return {"actors": len(self._channels),
                    "inflight": sum(len(c.inflight) for c in self._channels.values()),
                    "queued": sum(len(c.ordered) for c in self._channels.values()),
                    # Calls sent, and the writes that sent them (calls ready together go
                    # out in one write).
                    "calls_sent": self._calls_sent, "writes": self._writes}


def _end(task: PendingTask, *, ok: bool) -> None:
    span = task.dispatch_span
    if span is not None:
        task.dispatch_span = None
        telemetry.finish_span(span, error=None if ok else RayActorError("actor call failed"))
