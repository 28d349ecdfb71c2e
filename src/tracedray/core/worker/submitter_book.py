"""A task submitter's leasing decisions as a state machine: ``SubmitterBook.handle(event)``
changes the book and returns the actions the submitter (``task_submitter.py``) performs.

The book holds, per scheduling key (resource shape + preferred node), the tasks queued
for a worker, the leases held (``leases.py``) and the lease requests out
(``lease_requests.py``). Pumping a key pipelines its queued tasks onto the least loaded
of its leases (up to ``PIPELINE_DEPTH`` each), has an idle lease steal back a task
waiting behind another, and keeps one lease request out per task without a worker of its
own. A request granted becomes a lease; one granted after its withdrawal (or the close)
goes straight back. A lease idle for a linger is given back, after the key's surplus
requests were withdrawn; one whose connection broke is given back as failed, its tasks
retried or failed by the submitter.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracedray._proto.v1 import raylet_pb2
from tracedray.core.address import Address
from tracedray.core.protocol.connection import WorkerConnection
from tracedray.core.protocol.raylet_client import RayletClient
from tracedray.core.worker import submitter_events as ev
from tracedray.core.worker.infeasible_watch import WARN_AFTER_S, Waiting, shape_of
from tracedray.core.worker.lease_requests import (
    LeaseAsk,
    lease_requests_wanted,
    requests_to_withdraw,
)
from tracedray.core.worker.leases import (
    Lease,
    LeaseReturn,
    LeaseState,
    least_loaded,
    steal_plan,
    waiting_behind,
)
from tracedray.core.worker.pending_task import PendingTask
from tracedray.telemetry import attributes as A

Connect = Callable[[Address], WorkerConnection]


@dataclass(frozen=True)
class SubmitterBookStatistics:
    queued: int  # tasks waiting for a lease
    inflight: int  # tasks sent to leased workers, results not in yet
    leases_by_state: dict[LeaseState, int]  # the leases held (IDLE, BUSY)
    lease_requests: int  # not answered yet, withdrawn ones too
    lease_requests_withdrawn_total: int
    unneeded_grants_total: int  # granted to a withdrawn request, given straight back


class SubmitterBook:
    """Not thread-safe: the submitter calls it under its lock. ``connect`` opens the task
    stream to a granted worker (it does no I/O on the calling thread)."""

    def __init__(self, linger_s: float, connect: Connect) -> None:
        self.linger_s = linger_s
        self.closed = False
        self._connect = connect
        self._queues: dict[str, collections.deque[PendingTask]] = {}
        self._leases: dict[str, list[Lease]] = {}
        self._by_conn: dict[WorkerConnection, Lease] = {}
        # Lease requests not answered yet, oldest first, per key; how many of them are
        # not withdrawn (what _pump compares with what a key wants).
        self._asks: dict[str, list[LeaseAsk]] = {}
        self._requested: dict[str, int] = {}
        self._ask_ids = itertools.count(1)
        # When each key with requests out last needed all of them (lease_requests.py).
        self._needed_at: dict[str, float] = {}
        self.withdrawn_total = self.unneeded_grants = 0
        self._handlers: dict[type, Callable[[Any, list[ev.Action]], None]] = {
            ev.TasksReady: self._tasks_ready, ev.TasksRetried: self._tasks_retried,
            ev.ResultsArrived: self._results_arrived, ev.ConnectionBroke: self._broke,
            ev.Pump: self._pump_keys, ev.AskAnswered: self._answered,
            ev.QueuedTaskCancelled: self._cancelled, ev.LingerTick: self._linger_tick,
            ev.IdleLeasesDue: self._idle_leases_due, ev.Closing: self._closing,
        }

    def handle(self, event: ev.Event) -> list[ev.Action]:
        actions: list[ev.Action] = []
        self._handlers[type(event)](event, actions)
        return actions

    # --- reading
    def queued(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def leases(self) -> list[Lease]:
        return [lease for leases in self._leases.values() for lease in leases]

    def asks(self) -> list[LeaseAsk]:
        return [ask for asks in self._asks.values() for ask in asks]

    def statistics(self) -> SubmitterBookStatistics:
        leases = self.leases()
        by_state = {state: 0 for state in (LeaseState.IDLE, LeaseState.BUSY)}
        for lease in leases:
            by_state[lease.state] += 1
        return SubmitterBookStatistics(
            queued=self.queued(), inflight=sum(len(le.inflight) for le in leases),
            leases_by_state=by_state, lease_requests=len(self.asks()),
            lease_requests_withdrawn_total=self.withdrawn_total,
            unneeded_grants_total=self.unneeded_grants)

    def waiting_long(self, now: float) -> list[Waiting]:
        """Queued work whose oldest lease request has waited long enough to ask whether
        any node can run it."""
        out = []
        for key, asks in self._asks.items():
            queue = self._queues.get(key)
            if queue and asks and now - asks[0].since >= WARN_AFTER_S:
                spec = queue[0].spec
                out.append(Waiting(shape_of(spec.resources), asks[0].since,
                                   f"task {spec.function_name}"))
        return out

    # --- tasks
    def _queue(self, key: str) -> collections.deque[PendingTask]:
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = collections.deque()
        return queue

    def _tasks_ready(self, event: ev.TasksReady, out: list[ev.Action]) -> None:
        keys: dict[str, None] = {}
        for task in event.tasks:
            if not task.cancelled:
                self._queue(task.scheduling_key).append(task)
                keys[task.scheduling_key] = None
        for key in keys:
            self._pump(key, event.now, out)

    def _tasks_retried(self, event: ev.TasksRetried, out: list[ev.Action]) -> None:
        keys: dict[str, None] = {}
        for task in event.tasks:
            task.lease = None
            self._queue(task.scheduling_key).append(task)
            keys[task.scheduling_key] = None
        for key in keys:
            self._pump(key, event.now, out)

    def _pump_keys(self, event: ev.Pump, out: list[ev.Action]) -> None:
        for key in event.keys:
            self._pump(key, event.now, out)

    def _cancelled(self, event: ev.QueuedTaskCancelled, out: list[ev.Action]) -> None:
        queue = self._queues.get(event.task.scheduling_key)
        if queue and event.task in queue:
            queue.remove(event.task)

    def _results_arrived(self, event: ev.ResultsArrived, out: list[ev.Action]) -> None:
        keys: dict[str, None] = {}
        now = event.now
        for task, verdict in event.results:
            lease = task.lease
            del lease.inflight[task.spec.task_id]
            if not lease.inflight:
                lease.idle_since = now
                if lease.state is LeaseState.BUSY:
                    lease.state = LeaseState.IDLE
            if verdict is ev.Verdict.DONE:
                keys[task.scheduling_key] = None
                continue
            task.lease = None
            if verdict is ev.Verdict.REQUEUED:
                task.steal_requested = False
                self._queue(lease.key).appendleft(task)
            elif verdict is ev.Verdict.RETRY:
                self._queue(task.scheduling_key).append(task)
                keys[task.scheduling_key] = None
            else:
                out.append(ev.RetryAfterLoss(task, True))
        lease_of_conn = self._by_conn.get(event.conn)
        if lease_of_conn is not None:
            keys[lease_of_conn.key] = None
        for key in keys:
            self._pump(key, now, out)

    def _pump(self, key: str, now: float, out: list[ev.Action]) -> None:
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = collections.deque()
        leases = [le for le in self._leases.get(key, ()) if not le.conn.broken]
        while queue:
            lease = least_loaded(leases)
            if lease is None:
                break
            task = queue.popleft()
            task.lease = lease
            lease.inflight[task.spec.task_id] = task
            lease.state = LeaseState.BUSY
            lease.dispatched += 1
            # A scheduling decision is made once per lease (by the raylet that granted
            # it); later tasks of the same shape reuse the worker without a new one.
            out.append(ev.Dispatch(task, lease, lease.dispatched == 1))
        behind = [task for le in leases for task in waiting_behind(le)]
        if not queue:
            for task in steal_plan(leases):
                task.steal_requested = True
                out.append(ev.StealBack(task.task_id, task.lease.worker))
        # Queued and pipelined tasks both want a worker of their own.
        wanted = lease_requests_wanted(len(queue), len(behind))
        example = queue[0] if queue else (behind[0] if behind else None)
        requested = self._requested.get(key, 0)
        while example is not None and requested < wanted:
            requested = self._requested[key] = requested + 1
            ask = LeaseAsk(next(self._ask_ids).to_bytes(8, "big"), key, since=now)
            self._asks.setdefault(key, []).append(ask)
            out.append(ev.RequestLease(ask, example))
        if requested and wanted >= requested:
            self._needed_at[key] = now

    # --- lease requests
    def _answered(self, event: ev.AskAnswered, out: list[ev.Action]) -> None:
        ask = event.ask
        asks = self._asks[ask.key]
        asks.remove(ask)
        if not asks:
            del self._asks[ask.key]
            self._needed_at.pop(ask.key, None)
        if not ask.withdrawn:
            self._requested[ask.key] -= 1
        if event.outcome is ev.AskOutcome.FAILED:
            if not ask.withdrawn:
                out.append(ev.RetryRequestLater(ask.key))
            return
        if event.outcome is not ev.AskOutcome.GRANTED:
            return
        raylet, reply = event.raylet, event.reply
        assert raylet is not None and reply is not None
        if not self.closed and not ask.withdrawn:
            self._add_lease(ask.key, raylet, reply, event.now, out)
            return
        # Granted just before its withdrawal (or the close) reached the raylet: a task
        # queued since has a request of its own, so the worker goes straight back.
        if not self.closed:
            self.unneeded_grants += 1
        out.append(ev.ReturnGrant(LeaseReturn(raylet, reply.lease_id, False), self.closed,
                                  ask.key, reply.worker.pid))

    def _add_lease(self, key: str, raylet: RayletClient, reply: raylet_pb2.LeaseReply,
                   now: float, out: list[ev.Action]) -> None:
        decision: dict[str, object] = {
            A.SCHEDULING_CANDIDATES: list(reply.candidates),
            A.SCHEDULING_LOCAL_BYTES: list(reply.local_bytes),
            A.SCHEDULING_QUEUE_LENGTHS: list(reply.queue_lengths),
            A.SCHEDULING_REASON: reply.reason,
            A.SCHEDULING_CHOSEN_NODE: reply.chosen_node,
        }
        address = Address.from_proto(reply.worker)
        lease = Lease(reply.lease_id, key, raylet, address, self._connect(address), decision,
                      idle_since=now)
        self._leases.setdefault(key, []).append(lease)
        self._by_conn[lease.conn] = lease
        self._pump(key, now, out)

    def _linger_tick(self, event: ev.LingerTick, out: list[ev.Action]) -> None:
        """Withdraw the requests no task needs; only those waiting at a raylet are named
        to it (the others are not sent, or not sent on after a spillback).

        Patience is half a linger: the requests of a key whose work has ended go before
        its idle leases are given back, else the raylet would grant a worker given back
        to one of them instead of to the next caller in its queue."""
        batches: dict[tuple[str, str], ev.Withdraw] = {}
        patience_s = self.linger_s / 2
        for key, asks in self._asks.items():
            unneeded_for_s = event.now - self._needed_at.get(key, 0.0)
            if unneeded_for_s < patience_s:
                continue  # as in every tick of a burst: nothing to withdraw, nothing to count
            queue = self._queues.get(key)
            behind = sum(len(waiting_behind(lease)) for lease in self._leases.get(key, ())
                         if not lease.conn.broken)
            for ask in requests_to_withdraw(asks, len(queue) if queue else 0, behind,
                                            unneeded_for_s=unneeded_for_s,
                                            patience_s=patience_s):
                ask.withdrawn = True
                self._requested[key] -= 1
                self.withdrawn_total += 1
                if ask.raylet is not None:
                    batch = batches.get((ask.raylet.address, key))
                    if batch is None:
                        batch = batches[(ask.raylet.address, key)] = ev.Withdraw(
                            ask.raylet, key, [])
                    batch.request_ids.append(ask.request_id)
        out.extend(batches.values())

    # --- leases
    def _drop(self, lease: Lease, state: LeaseState, out: list[ev.Action]) -> None:
        leases = self._leases.get(lease.key, [])
        if lease in leases:
            leases.remove(lease)
            del self._by_conn[lease.conn]
            lease.state = state
            out.append(ev.ReturnLease(lease, failed=state is LeaseState.LOST))

    def _idle_leases_due(self, event: ev.IdleLeasesDue, out: list[ev.Action]) -> None:
        for key, leases in list(self._leases.items()):
            if self._queues.get(key):
                continue
            for lease in list(leases):
                if not lease.inflight and event.now - lease.idle_since >= self.linger_s:
                    self._drop(lease, LeaseState.RETURNED, out)

    def _broke(self, event: ev.ConnectionBroke, out: list[ev.Action]) -> None:
        lease = self._by_conn.get(event.conn)
        if lease is None:
            return
        orphans = list(lease.inflight.values())
        lease.inflight.clear()
        self._drop(lease, LeaseState.LOST, out)
        if orphans:
            out.append(ev.WorkerLost(lease, orphans))
        else:
            self._pump(lease.key, event.now, out)

    def _closing(self, event: ev.Closing, out: list[ev.Action]) -> None:
        self.closed = True
        held = self.leases()
        returns = [LeaseReturn(le.raylet, le.lease_id, False, bool(le.inflight)) for le in held]
        for lease in held:
            lease.state = LeaseState.RETURNED
        self._leases.clear()
        self._by_conn.clear()
        self._queues.clear()
        waiting_at = {ask.raylet.address: ask.raylet for ask in self.asks()
                      if ask.raylet is not None}
        out.append(ev.GiveAllBack([le.conn for le in held], returns, list(waiting_at.values())))
