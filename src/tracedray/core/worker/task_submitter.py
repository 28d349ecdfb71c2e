"""Normal (non-actor) task submission: leases, pipelined pushes, retries.

Like Ray's direct task submission: the caller asks a raylet for a worker lease
per scheduling key (resource shape + preferred node), pushes tasks straight to
the leased worker over a stream, keeps the lease while it has work (and for a
short linger so a loop of round trips reuses it), and returns it when idle.
A worker that dies fails its in-flight tasks over to a retry (``max_retries``)
or to ``WorkerCrashedError`` with the exit code, signal and what they mean.

``TaskSubmitter`` is the I/O shell of ``SubmitterBook`` (``submitter_book.py``), which
makes the leasing decisions: under the lock it hands the book an event and sends the
tasks the book dispatched (a send never blocks, see ``connection.py``; sending under the
lock keeps a stream's tasks in dispatch order and starts a task's dispatch span before
its result can come back); the other actions (lease requests and returns, withdrawals,
steals, retries) it performs after releasing the lock.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tracedray import config, logs
from tracedray._proto.v1 import common_pb2, raylet_pb2
from tracedray.core.address import Address
from tracedray.core.protocol.connection import WorkerConnection
from tracedray.core.worker import submitter_events as ev
from tracedray.core.worker.dispatch_record import (
    end_span,
    record_dispatch,
    record_orphans_dispatch,
)
from tracedray.core.worker.infeasible_watch import InfeasibleWatch
from tracedray.core.worker.lease_client import CLOSE_BUDGET_S, LeaseClient
from tracedray.core.worker.lease_requests import LeaseAsk
from tracedray.core.worker.leases import Lease, LeaseReturn, preferred_node, started_orphans
from tracedray.core.worker.leases import resource_shape as resource_shape
from tracedray.core.worker.pending_task import (
    PendingTask,
    end_dispatch_spans,
    error_value,
    stored_error,
)
from tracedray.core.worker.recovery import is_lost_input
from tracedray.core.worker.submitter_book import SubmitterBook
from tracedray.exceptions import (
    ObjectLostError,
    TaskCancelledError,
    WorkerCrashedError,
)

if TYPE_CHECKING:
    from tracedray.core.worker.core_worker import CoreWorker

log = logs.get_logger(__name__)

# How long a key whose lease request failed waits before it asks again.
REQUEST_RETRY_PAUSE_S = 0.5


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


class TaskSubmitter:
    def __init__(self, worker: CoreWorker) -> None:
        self._worker = worker
        self._lock = threading.RLock()
        self._book = SubmitterBook(config.LEASE_LINGER_S.get(), self._connect)
        self._tasks: dict[bytes, PendingTask] = {}
        self._raylets = LeaseClient(worker, self._lock, self._book)
        # Leases dropped while the process stops, before the close: it gives them back.
        self._dropped_late: list[LeaseReturn] = []
        self._sent = self._writes = 0
        self._locality_enabled = config.LOCALITY_AWARE.get()
        self._submitted = self._finished = self._retried = 0
        self._infeasible = InfeasibleWatch(self._alive_node_totals, self._worker.background)
        self._linger_thread = threading.Thread(target=self._return_idle_leases, daemon=True,
                                               name="tracedray-lease-linger")
        self._linger_thread.start()

    def _connect(self, address: Address) -> WorkerConnection:
        return WorkerConnection(address, self._on_results, self._on_broken)

    # --- submission
    def submit(self, task: PendingTask) -> None:
        with self._lock:
            self._tasks[task.task_id] = task
            self._submitted += 1
        self._worker.resolver.resolve(task, self._enqueue, self._fail_with_value)

    def submit_many(self, tasks: list[PendingTask]) -> None:
        """Submit tasks in order: those with nothing to wait for are queued together, each
        scheduling key pumped once, and the tasks bound for one worker sent in one write."""
        ready: list[PendingTask] = []
        for task in tasks:
            if not task.unresolved:
                self._set_key(task)
                ready.append(task)
        with self._lock:
            for task in tasks:
                self._tasks[task.task_id] = task
            self._submitted += len(tasks)
            rest = self._decide(ev.TasksReady(ready, time.monotonic()), together=True)
        if rest:
            self._perform(rest)
        for task in tasks:
            if task.unresolved:
                self._worker.resolver.resolve(task, self._enqueue, self._fail_with_value)

    def set_locality_enabled(self, enabled: bool) -> None:
        self._locality_enabled = enabled

    def _set_key(self, task: PendingTask) -> None:
        preferred = preferred_node(task.input_bytes_by_node) if self._locality_enabled else ""
        shape = task.resource_shape or resource_shape(task.spec.resources)
        task.scheduling_key = f"{shape}@{preferred}"

    def _enqueue(self, task: PendingTask) -> None:
        self._set_key(task)
        self._handle(ev.TasksReady((task,), time.monotonic()))

    def _handle(self, event: ev.Event, *, together: bool = False) -> None:
        with self._lock:
            rest = self._decide(event, together=together)
        if rest:
            self._perform(rest)

    def _decide(self, event: ev.Event, *, together: bool = False) -> list[ev.Action]:
        """(Lock held) hand ``event`` to the book and send the tasks it dispatched (in one
        write per worker when ``together``); returns the other actions, to perform once
        the lock is released."""
        actions = self._book.handle(event)
        if not actions:
            return actions
        rest: list[ev.Action] = []
        outbox: dict[WorkerConnection, list[common_pb2.TaskSpec]] = {}
        for action in actions:
            if type(action) is not ev.Dispatch:
                rest.append(action)
                continue
            lease = action.lease
            record_dispatch(self._worker.task_events, action.task, lease, action.decided)
            if together:
                outbox.setdefault(lease.conn, []).append(action.task.spec)
            else:
                lease.conn.send(action.task.spec)
                self._sent += 1
                self._writes += 1
        for conn, specs in outbox.items():
            conn.send_many(specs)
            self._sent += len(specs)
            self._writes += 1
        return rest

    def _perform(self, actions: list[ev.Action]) -> None:
        """Perform the book's actions other than sending (the lock released)."""
        background = self._worker.background
        for action in actions:
            if type(action) is ev.RequestLease:
                background(self._request_lease, action.ask, action.example)
            elif type(action) is ev.StealBack:
                background(self._worker.cancel_on_worker, action.worker, action.task_id,
                           False, True)
            elif type(action) is ev.ReturnLease:
                lease = action.lease
                lease.conn.close()
                given_back = LeaseReturn(lease.raylet, lease.lease_id, action.failed)
                if not background(self._raylets.return_worker, given_back):
                    with self._lock:
                        self._dropped_late.append(given_back)
            elif type(action) is ev.ReturnGrant:
                self._return_grant(action)
            elif type(action) is ev.RetryRequestLater:
                background(self._ask_again, action.key)
            elif type(action) is ev.Withdraw:
                self._raylets.withdraw(action)
            elif type(action) is ev.WorkerLost:
                background(self._handle_worker_death, action.lease, action.orphans)
            elif type(action) is ev.RetryAfterLoss:
                background(self._retry_after_loss, action.task, action.input_lost)
            else:  # GiveAllBack: fail_all performs it
                raise AssertionError(f"not performed here: {action!r}")

    # --- lease requests
    def _request_lease(self, ask: LeaseAsk, example: PendingTask) -> None:
        self._raylets.request(ask, example, self._handle)

    def _return_grant(self, action: ev.ReturnGrant) -> None:
        given_back = action.given_back
        if action.closing:  # here, not through worker.background, which stops with us
            self._raylets.return_worker(given_back, timeout=CLOSE_BUDGET_S)
            return
        log.info("lease.unneeded_grant", scheduling_key=action.key,
                 lease_id=given_back.lease_id, worker_pid=action.worker_pid,
                 raylet=given_back.raylet.address)
        self._raylets.return_worker(given_back)

    def _ask_again(self, key: str) -> None:
        if not self._book.closed:
            time.sleep(REQUEST_RETRY_PAUSE_S)
            self._handle(ev.Pump((key,), time.monotonic()))

    # --- leases
    def lease_nodes(self) -> set[str]:
        """Nodes this process holds worker leases on."""
        with self._lock:
            return {lease.worker.node_id for lease in self._book.leases()}

    def _return_idle_leases(self) -> None:
        """Every half linger: withdraw the lease requests no task needs any more (here
        rather than as a key's last task goes out, so that submitting pays nothing for
        it and a key whose work comes in waves does not withdraw and ask again between
        two tasks), then give back the leases idle for a linger. The withdrawals are
        answered first: a worker given back must go to the next caller waiting, not to
        one of this process's own requests about to be withdrawn."""
        while not self._book.closed:
            time.sleep(self._book.linger_s / 2)
            now = time.monotonic()
            with self._lock:
                withdrawals = self._decide(ev.LingerTick(now))
                waiting = self._book.waiting_long(now)
            self._perform(withdrawals)
            if waiting:
                self._infeasible.poll(waiting)
            self._handle(ev.IdleLeasesDue(now))

    def watch_actor_creation(self, resources: dict[str, float], class_name: str) -> None:
        """Warn like a task's if the GCS can place the actor on no alive node."""
        self._infeasible.watch_creation(resources, f"actor {class_name}")

    def _alive_node_totals(self) -> list[dict[str, float]]:
        return [dict(n.info.resources_total) for n in self._worker.gcs.get_nodes()
                if n.info.state == "ALIVE"]

    # --- results
    def _on_results(self, conn: WorkerConnection, results: list[common_pb2.TaskResult]) -> None:
        """A stream's batch of results: one lock hold decides them all (and sends the
        tasks they make room for), then the finished ones are stored together."""
        succeeded: list[tuple[PendingTask, list[common_pb2.ObjectValue]]] = []
        failed: list[tuple[PendingTask, list[common_pb2.ObjectValue]]] = []
        landed: list[tuple[PendingTask, ev.Verdict]] = []
        answered: list[tuple[common_pb2.TaskSpec, common_pb2.TaskResult]] = []
        with self._lock:
            tasks = self._tasks
            for result in results:
                task = self._find_inflight(result.task_id)
                if task is None:
                    continue
                answered.append((task.spec, result))
                verdict = (ev.Verdict.DONE if not (result.requeued or result.is_application_error)
                           else self._verdict(task, result))
                landed.append((task, verdict))
                if verdict is ev.Verdict.DONE:
                    # Taken out here, under the lock this batch holds anyway, rather than
                    # one acquisition per task in _complete.
                    del tasks[task.task_id]
                    (failed if result.is_application_error else succeeded).append(
                        (task, list(result.returns)))
            self._finished += len(succeeded) + len(failed)
            rest = self._decide(ev.ResultsArrived(conn, landed, time.monotonic()),
                                together=True)
        # Recorded by their executor, which may die before its report reaches the GCS.
        self._worker.executor_reports.answered(conn, answered)
        if rest:
            self._perform(rest)
        if succeeded:
            end_dispatch_spans(task for task, _ in succeeded)
            self._worker.results.finish_reported(succeeded, "FINISHED")
        if failed:
            for task, _ in failed:
                end_span(task, ok=False)
            self._worker.results.finish_reported(failed, "FAILED")

    def _verdict(self, task: PendingTask, result: common_pb2.TaskResult) -> ev.Verdict:
        """(Lock held) what becomes of a task whose result came in; a task that runs
        again has its dispatch span ended here, before it can be dispatched again."""
        if result.requeued:
            end_span(task, ok=True, note="requeued")
            return ev.Verdict.REQUEUED
        if (result.is_application_error and result.retryable_error
                and task.retries_left != 0 and not task.cancelled and result.returns
                and task.retry_exceptions.matches(
                    stored_error(self._worker, result.returns[0]))):
            end_span(task, ok=False, note="application error; retrying")
            self._count_attempt(task)
            return ev.Verdict.RETRY
        if (result.is_application_error and task.retries_left != 0
                and not task.cancelled and is_lost_input(result)):
            # Not the task's fault: a node holding its input died. Run it again once the
            # input is rebuilt (it may take the dead node's verdict).
            end_span(task, ok=False, note="an input object was lost; retrying")
            return ev.Verdict.RETRY_AFTER_LOSS
        return ev.Verdict.DONE

    def _find_inflight(self, task_id: bytes) -> PendingTask | None:
        task = self._tasks.get(task_id)
        if task is None or task.lease is None or task_id not in task.lease.inflight:
            return None
        return task

    def _on_broken(self, conn: WorkerConnection, error: BaseException | None) -> None:
        self._worker.executor_reports.lost(conn)
        self._handle(ev.ConnectionBroke(conn, time.monotonic()))

    def _handle_worker_death(self, lease: Lease, orphans: list[PendingTask]) -> None:
        crash, info = self._worker.describe_worker_exit(lease.raylet, lease.worker)
        # describe_worker_exit waited for the verdict if the worker's raylet was gone.
        node_dead = self._worker.recovery.nodes.is_dead(lease.worker.node_id)
        # Tasks queued behind the one it died in never started: as in Ray, where a
        # worker holds one task at a time, they run elsewhere, costing no retry.
        started = orphans if node_dead else orphans[:started_orphans(
            orphans, info.running_task_id, info.running_attempt)]
        unstarted = orphans[len(started):]
        retried: list[PendingTask] = []
        record_orphans_dispatch(self._worker.task_events, orphans, lease.worker)
        with self._lock:
            for task in unstarted:
                if task.cancelled:
                    end_span(task, ok=False, note=str(crash))
                    self._complete_error(task, TaskCancelledError(task.task_id.hex()), "CANCELLED")
                    continue
                end_span(task, ok=True, note="not started: its worker died running an "
                                             "earlier task; sent again")
                task.lease = None
                retried.append(task)
            if unstarted:
                log.info("task.requeued", tasks=len(unstarted), worker_pid=lease.worker.pid,
                         cause=str(crash),
                         meaning="queued behind the task their worker died in, they never "
                                 "started; they run on another worker without using a retry")
            for task in started:
                end_span(task, ok=False, note=str(crash))
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
                    task.lease = None
                    if node_dead:
                        self._worker.background(self._retry_after_loss, task, False)
                    else:
                        self._count_attempt(task)
                        retried.append(task)
                else:
                    self._complete_error(task, crash, "FAILED")
            now = time.monotonic()
            rest = self._decide(ev.TasksRetried(retried, now))
            rest += self._decide(ev.Pump((lease.key,), now))
        if rest:
            self._perform(rest)

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
            self._count_attempt(task)
        log.warning("task.retry", task_id=task.task_id.hex(), attempt=task.spec.attempt,
                    cause="input lost with a dead node" if input_lost else "node died")
        self._worker.resolver.resolve(task, self._enqueue, self._fail_with_value)

    def _count_attempt(self, task: PendingTask) -> None:
        """(Lock held) the task runs again: one retry fewer left, the next attempt."""
        if task.retries_left > 0:
            task.retries_left -= 1
        task.spec.attempt += 1
        self._retried += 1

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
            if task.lease is None:
                self._book.handle(ev.QueuedTaskCancelled(task))
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
            tasks = list(self._tasks.values())
            close = self._book.handle(ev.Closing())
            give_back = next(a for a in close if type(a) is ev.GiveAllBack)
            for conn in give_back.conns:
                conn.close()
            returns = give_back.returns + self._dropped_late
        self._raylets.give_all_back(returns, give_back.waiting_at)
        for task in tasks:
            self._complete_error(task, exc, "FAILED")

    def pending_task(self, task_id: bytes) -> PendingTask | None:
        with self._lock:
            return self._tasks.get(task_id)

    def statistics(self) -> SubmitterStatistics:
        with self._lock:
            book = self._book.statistics()
            return SubmitterStatistics(
                queued=book.queued, inflight=book.inflight,
                leases=sum(book.leases_by_state.values()),
                pending_lease_requests=book.lease_requests,
                submitted_total=self._submitted, finished_total=self._finished,
                retried_total=self._retried,
                lease_requests_withdrawn_total=book.lease_requests_withdrawn_total,
                unneeded_grants_total=book.unneeded_grants_total,
                infeasible_warnings_total=self._infeasible.statistics().warnings,
                sent_total=self._sent, writes_total=self._writes)

    def __repr__(self) -> str:
        s = self.statistics()
        return f"<TaskSubmitter queued={s.queued} inflight={s.inflight} leases={s.leases}>"


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
