"""The raylet's leasing, as I/O around the lease book (``leasing.py``).

Each call hands the book one event under the lock and performs the actions it returns
after releasing it: replies to waiting requests, spawning workers (a fork: never under
the lock), signals, reports to the GCS and log lines. Also here, as they act on leases
and workers: taking back the leases of dead lessees, killing workers stuck at their
start, and stopping idle workers beyond the soft limit (``idle_reaping.py`` decides).
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
import time
from collections.abc import Callable, Collection, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field

import grpc

from tracedray import logs
from tracedray._proto.v1 import core_worker_pb2, core_worker_pb2_grpc, gcs_pb2, raylet_pb2
from tracedray.core import ids, rpc
from tracedray.core.address import Address
from tracedray.core.gcs.client import GcsClient
from tracedray.core.raylet import idle_reaping as ir
from tracedray.core.raylet import lease_events as ev
from tracedray.core.raylet import lease_reclaim as lr
from tracedray.core.raylet import worker_pool as wp
from tracedray.core.raylet import worker_states as ws
from tracedray.core.raylet.leasing import LeaseBook
from tracedray.core.raylet.scheduler import Decision
from tracedray.core.raylet.worker_states import WorkerState
from tracedray.exceptions import RaySystemError
from tracedray.telemetry.cluster_events import RayletEvents

log = logs.get_logger(__name__)
_events = RayletEvents(log)

# How long a worker whose lessee lost its connection to it has to be seen exiting before
# the raylet kills it (a worker that died on its own is seen within milliseconds).
LOST_WORKER_GRACE_S = 1.0


@dataclass(eq=False)
class _Waiter:
    """A lease request's RPC, waiting for its answer."""

    done: threading.Event = field(default_factory=threading.Event)
    reply: raylet_pb2.LeaseReply | None = None


class LeaseService:
    def __init__(self, *, node_id: str, total: dict[str, float], pool: wp.WorkerPool,
                 gcs: GcsClient, background: Executor, stopped: threading.Event,
                 lock: threading.RLock) -> None:
        self.node_id = node_id
        self.lock = lock
        self.book = LeaseBook(node_id, total, new_lease_id=lambda: os.urandom(8).hex(),
                              new_worker_id=ids.new_worker_id)
        self.pool = pool
        self._gcs = gcs
        self._bg = background
        self._stopped = stopped
        self._tickets = itertools.count(1)
        self._waiters: dict[int, _Waiter] = {}
        self._exits: dict[str, threading.Event] = {}
        # Idle spells (worker id, idle since) whose worker said it holds something, and
        # when to ask again: an owner may stay idle for long, and asking flushes its
        # background work.
        self._ask_again_at: dict[tuple[str, float], float] = {}

    def _handle(self, event: ev.Event) -> list[ev.Action]:
        with self.lock:
            return self.book.handle(event)

    # --- requests
    def request_lease(self, request: raylet_pb2.LeaseRequest, actor_id: bytes = b"", *,
                      on_requester_gone: Callable[[Callable[[], None]], None] | None = None
                      ) -> raylet_pb2.LeaseReply:
        """Decide, and wait for the grant if queued. ``on_requester_gone`` registers a
        function to call when the requester goes away (its RPC ends): the request is
        then withdrawn, so no worker is started or granted for nobody."""
        requester = (Address.from_proto(request.requester) if request.HasField("requester")
                     else None)
        ask = ev.LeaseAsk(
            resources=dict(request.resources), requester=None if actor_id else requester,
            requester_worker_id=request.requester.worker_id, requester_pid=request.requester.pid,
            request_id=request.request_id, task_id=request.task_id,
            input_bytes_by_node=dict(request.input_bytes_by_node),
            may_spill=not request.grant_or_reject and not actor_id, actor_id=actor_id,
            job_id=request.job_id, is_actor=request.is_actor)
        waiter = _Waiter()
        with self.lock:
            ticket = next(self._tickets)
            self._waiters[ticket] = waiter
            actions = self.book.handle(ev.LeaseRequested(ticket, ask))
        self._perform(actions)
        if on_requester_gone is not None:
            on_requester_gone(functools.partial(self._requester_gone, ticket))
        waiter.done.wait()
        assert waiter.reply is not None
        return waiter.reply

    def _requester_gone(self, ticket: int) -> None:
        self._perform(self._handle(ev.RequesterGone(ticket)))

    def withdraw_requests_of(self, worker_id: str, request_ids: Collection[bytes] = ()) -> int:
        """Drop the requests of process ``worker_id`` named in ``request_ids`` (no task
        needs them any more), or all of them when none is named (it is shutting down).
        Named requests not waiting here are answered as they arrive; one granted already
        is the requester's to give back. Returns how many were waiting here."""
        actions = self._handle(ev.RequestsWithdrawn(worker_id, frozenset(request_ids),
                                                    time.monotonic()))
        self._perform(actions)
        return _answered(actions)

    def withdraw_actor_creation(self, actor_id: bytes, cause: str) -> tuple[int, list[int]]:
        """Drop what this node holds for the creation of an actor the GCS declared dead
        (``cause`` says why); returns how many requests were withdrawn and the pids of
        the killed workers."""
        actions = self._handle(ev.ActorCreationWithdrawn(actor_id, cause))
        killed = self._killed_pids(actions)
        self._perform(actions)
        return _answered(actions), killed

    def release_unused_actor_workers(self, in_use: set[str], cause: str,
                                     adopt: Collection[bytes] = ()
                                     ) -> tuple[int, list[int], list[tuple[bytes, Address]]]:
        """A restarted GCS, before it places any actor (``gcs/actor_recovery.py``): answers
        the actor requests waiting here, keeps one worker of each actor in ``adopt``, kills
        the other actor workers not in ``in_use`` (their exits release the resources);
        returns how many requests were answered, the pids of the killed workers and the
        adopted workers (actor id, address)."""
        actions = self._handle(ev.UnusedActorWorkersReleased(frozenset(in_use), cause,
                                                             frozenset(adopt)))
        killed = self._killed_pids(actions)
        with self.lock:
            adopted = [(a.actor_id, self.pool.address_of(self.pool.workers[a.worker_id]))
                       for a in actions if isinstance(a, ev.ActorWorkerAdopted)]
        self._perform(actions)
        waiting = _answered(actions)
        (log.info if waiting or killed or adopted else log.debug)(
            "actor.release_unused", requests_withdrawn=waiting, killed_worker_pids=killed,
            adopted_worker_pids=[address.pid for _, address in adopted],
            kept_workers=len(in_use), cause=cause)
        return waiting, killed, adopted

    def discard_abandoned_actor_grant(self, lease_id: str) -> None:
        self._perform(self._handle(ev.AbandonedActorGrant(lease_id)))

    def return_worker(self, lease_id: str, failed: bool, disconnect: bool = False) -> None:
        self._perform(self._handle(ev.LeaseReturned(lease_id, disconnect, time.monotonic(),
                                                     failed=failed)))

    def notify_blocked(self, worker_id: str, blocked: bool) -> None:
        self._perform(self._handle(ev.WorkerBlocked(worker_id, blocked)))

    def peers_seen(self, nodes: Iterable[gcs_pb2.NodeWithLoad] | None) -> None:
        peers = None if nodes is None else tuple(
            ev.Peer(n.info.node_id, n.info.state == "ALIVE", dict(n.info.resources_total),
                    dict(n.resources_available), n.pending_leases,
                    Address.from_proto(n.info.raylet)) for n in nodes)
        self._perform(self._handle(ev.PeersSeen(peers)))

    # --- workers
    def prestart(self, count: int) -> None:
        self._perform(self._handle(ev.WorkersPrestarted(count)))

    def register_worker(self, worker_id: str, port: int, task_port: int) -> None:
        worker = self.pool.registered(worker_id, port, task_port)
        actions = self._handle(ev.WorkerRegistered(worker_id, time.monotonic()))
        _events.worker_started(worker_id, worker.pid, self.node_id, port)
        self._perform(actions)

    def worker_exited(self, worker_id: str) -> None:
        """Mark a worker DEAD, releasing what its lease held, first in its exit's handling:
        no new lease may go to it."""
        with self.lock:
            actions = self.book.handle(ev.WorkerExited(worker_id))
            self._exits.setdefault(worker_id, threading.Event()).set()
        self._perform(actions)

    def worker_exit_info(self, worker_id: str, timeout_s: float) -> raylet_pb2.WorkerExitInfo:
        with self.lock:
            event = self._exits.setdefault(worker_id, threading.Event())
        if not event.wait(timeout_s):
            return raylet_pb2.WorkerExitInfo(exited=False)
        worker = self.pool.workers.get(worker_id)
        if worker is None:
            return raylet_pb2.WorkerExitInfo(exited=False)
        return raylet_pb2.WorkerExitInfo(exited=True, exit_code=worker.exit_code,
                                         signal=worker.exit_signal, meaning=worker.exit_meaning,
                                         node_memory_percent=worker.node_memory_percent or 0.0,
                                         pid=worker.pid, running_task_id=worker.running_task_id,
                                         running_attempt=worker.running_attempt)

    def kill_worker(self, worker_id: str, force: bool, *, reason: str = "",
                    meaning: str = "") -> None:
        """Stop a worker on purpose, recording ``reason`` and ``meaning`` for its exit."""
        self._perform(self._handle(ev.KillRequested(worker_id, force, reason, meaning)))

    def state_of(self, worker_id: str) -> WorkerState:
        slot = self.book.workers.get(worker_id)
        return slot.state if slot is not None else WorkerState.STARTING

    def actor_of(self, worker_id: str) -> bytes:
        slot = self.book.workers.get(worker_id)
        return slot.actor_id if slot is not None else b""

    def shutdown(self) -> None:
        self._perform(self._handle(ev.NodeStopping()))
        self.pool.kill_all()

    def worker_statistics(self) -> wp.WorkerPoolStatistics:
        """Under the lock."""
        count = self.book.count
        return wp.WorkerPoolStatistics(
            count(WorkerState.STARTING), count(WorkerState.IDLE), count(WorkerState.LEASED),
            count(WorkerState.BLOCKED), count(WorkerState.ACTOR), count(WorkerState.STOPPING),
            count(WorkerState.DEAD), self.pool.started_total, self.pool.reaped_total)

    # --- leases of dead lessees, workers stuck at start, idle workers
    def reclaim_orphaned_leases(self, dead_nodes: set[str]) -> list[str]:
        """Kill the workers of task leases whose lessee died; returns those lease ids.

        No RPC runs under the lock: (1) under it, the task leases and their lessees; (2)
        without it, one probe per distinct lessee (``lease_reclaim.probe_lessee``); (3)
        the book reclaims each lease the decision calls orphaned only if it still belongs
        to the same lessee (it may have been returned, and its worker leased again).
        """
        with self.lock:
            if self._stopped.is_set():
                return []
            held = [lr.HeldLease(h.lease_id, h.worker_id, h.pid, h.lessee)
                    for h in self.book.held_task_leases()]
        if not held:
            return []
        lessees = lr.distinct_lessees(held)
        probe = functools.partial(lr.probe_lessee, local_node_id=self.node_id,
                                  dead_nodes=dead_nodes)
        verdicts = dict(zip(lessees, self._bg.map(probe, lessees), strict=True))
        reclaimed = []
        for lease, verdict in lr.orphaned_leases(held, verdicts):
            actions = self._handle(ev.LeaseReclaimed(lease.lease_id, lease.worker_id,
                                                     lease.lessee, verdict.why))
            self._perform(actions)
            if actions:
                reclaimed.append(lease.lease_id)
        return reclaimed

    def kill_unregistered_workers(self, timeout_s: float) -> list[int]:
        """Kill the workers stuck at start: not registered ``timeout_s`` after they were
        started. Requests counted on them get other workers: each exit re-dispatches,
        which starts new ones. Returns their pids."""
        kills: list[tuple[str, list[ev.Action]]] = []
        with self.lock:
            if self._stopped.is_set():
                return []
            spawned = [(w.worker_id, self.pool.workers[w.worker_id].started_monotonic)
                       for w in self.book.starting_workers() if w.worker_id in self.pool.workers]
            for worker_id in ir.not_registered_in_time(spawned, time.monotonic(), timeout_s):
                kills.append((worker_id, self.book.handle(ev.KillRequested(
                    worker_id, True, ws.STOP_NOT_REGISTERED,
                    f"killed by the raylet: it did not register within {timeout_s:g}s of its "
                    "start (TRACEDRAY_WORKER_REGISTER_TIMEOUT_S)"))))
        for worker_id, actions in kills:
            log.warning("worker.register_timeout", worker_id=worker_id,
                        worker_pid=self.pool.workers[worker_id].pid, timeout_s=timeout_s,
                        hint="its output (a traceback, a hung import) is in this "
                             "raylet's stderr file under logs/")
            self._perform(actions)
        return [self.pool.workers[w].pid for w, _ in kills]

    def reap_idle_workers(self, threshold: float, soft_limit: int) -> list[str]:
        """Stop the idle task workers ``idle_reaping.workers_to_reap`` picks; returns their
        ids.

        Three steps, so that no RPC runs under the lock: (1) under the lock, the idle
        workers that could go; (2) without it, ask each what it still holds that others
        need (objects, submitted tasks: see worker/exit_blockers.py); (3) under the lock
        again, decide with fresh state and mark the chosen ones STOPPING, then stop them.
        A worker leased (and maybe idle again) since step 1 has another ``idle_since``
        and counts as busy, so an answer about an earlier idle spell is never used.
        """
        with self.lock:
            if self._stopped.is_set():
                return []
            idle = self._idle_task_workers()
            now = time.monotonic()
            spells = {(w.worker_id, w.idle_since) for w in idle}
            self._ask_again_at = {k: t for k, t in self._ask_again_at.items() if k in spells}
            if self.book.live_task_workers() <= soft_limit:
                return []
            probes = [(w, self.pool.address_of(self.pool.workers[w.worker_id]))
                      for w in ir.idle_longer_than(idle, now, threshold)
                      if self._ask_again_at.get((w.worker_id, w.idle_since), 0.0) <= now]
        if not probes:
            return []
        answers = dict(zip([w for w, _ in probes],
                           self._bg.map(_exit_blockers, [a for _, a in probes]), strict=True))
        stops: list[tuple[str, float, int, list[ev.Action]]] = []
        with self.lock:
            if self._stopped.is_set():
                return []
            now = time.monotonic()
            idle = ir.with_answers(self._idle_task_workers(), answers)
            live = self.book.live_task_workers()
            chosen = ir.workers_to_reap(idle, live, soft_limit, now, threshold)
            for worker_id in chosen:
                idle_s = now - self.book.workers[worker_id].idle_since
                stops.append((worker_id, idle_s, live, self.book.handle(ev.IdleWorkerReaped(
                    worker_id, f"reaped as idle by the raylet: idle {idle_s:.1f}s with {live} "
                               f"task workers, soft limit {soft_limit}"))))
                live -= 1
            kept = {w: r for w, r in answers.items() if r != []}
            for w in kept:
                self._ask_again_at[(w.worker_id, w.idle_since)] = now + max(threshold, 1.0)
        for worker_id, idle_s, live, actions in stops:
            self._perform(actions)
            log.info("worker.reap", worker_id=worker_id,
                     worker_pid=self.pool.workers[worker_id].pid, idle_s=round(idle_s, 3),
                     live_workers=live, soft_limit=soft_limit,
                     reaped_total=self.pool.reaped_total)
        for w, reasons in kept.items():
            log.debug("worker.reap_skipped", worker_id=w.worker_id,
                      reasons=reasons if reasons is not None else ["did not answer"])
        return chosen

    def _idle_task_workers(self) -> list[ir.IdleWorker]:
        return [ir.IdleWorker(w.worker_id, w.idle_since) for w in self.book.idle_task_workers()]

    # --- performing actions (never under the lock)
    def _perform(self, actions: list[ev.Action]) -> None:
        for action in actions:
            if isinstance(action, ev.Answer):
                self._answer(action)
            elif isinstance(action, ev.StartWorker):
                self._start_worker(action.worker_id)
            elif isinstance(action, ev.KillWorker):
                self.pool.kill(action.worker_id, action.force, reason=action.reason,
                               meaning=action.meaning)
            elif isinstance(action, ev.StopIdleWorker):
                self.pool.stop_idle(action.worker_id, action.meaning)
            elif isinstance(action, ev.StopUnlessExited):
                timer = threading.Timer(LOST_WORKER_GRACE_S, self._stop_unless_exited, (action,))
                timer.daemon = True
                timer.start()
            elif isinstance(action, ev.ReportInfeasible):
                self._bg.submit(self._report_infeasible, action.ask, action.reason)
            elif isinstance(action, ev.ActorWorkerAdopted):
                log.info("actor.worker_adopted", actor_id=action.actor_id.hex(),
                         worker_id=action.worker_id)
            else:
                action.write(log)

    def _stop_unless_exited(self, action: ev.StopUnlessExited) -> None:
        with self.lock:
            slot = self.book.workers.get(action.worker_id)
            exited = slot is None or slot.state is WorkerState.DEAD
        if not exited:
            self.kill_worker(action.worker_id, True, reason=action.reason, meaning=action.meaning)

    def _answer(self, answer: ev.Answer) -> None:
        with self.lock:
            waiter = self._waiters.pop(answer.ticket, None)
            worker = self.pool.workers.get(answer.worker_id)
        if waiter is None:
            return
        if answer.outcome is ev.Outcome.WITHDRAWN:
            reply = raylet_pb2.LeaseReply(status=raylet_pb2.LeaseReply.TIMEOUT,
                                          reason=answer.reason)
        elif answer.outcome is ev.Outcome.SPILLBACK:
            assert answer.decision is not None and answer.spillback is not None
            reply = self._reply(answer.decision, raylet_pb2.LeaseReply.SPILLBACK)
            reply.spillback_raylet.CopyFrom(answer.spillback.to_proto())
        else:
            assert answer.decision is not None and worker is not None
            reply = self._reply(answer.decision, raylet_pb2.LeaseReply.GRANTED)
            reply.lease_id = answer.lease_id
            reply.worker.CopyFrom(self.pool.address_of(worker).to_proto())
        waiter.reply = reply
        waiter.done.set()

    def _reply(self, decision: Decision, status: int) -> raylet_pb2.LeaseReply:
        return raylet_pb2.LeaseReply(status=status, reason=decision.reason,  # type: ignore[arg-type]
                                     candidates=decision.candidates,
                                     local_bytes=decision.local_bytes,
                                     queue_lengths=decision.queue_lengths,
                                     chosen_node=decision.node_id or self.node_id)

    def _start_worker(self, worker_id: str) -> None:
        try:
            process = self.pool.start_worker(worker_id)
        except OSError as exc:
            log.error("worker.start_failed", worker_id=worker_id, error=str(exc))
            self._perform(self._handle(ev.WorkerSpawnFailed(worker_id)))
            return
        self._perform(self._handle(ev.WorkerSpawned(worker_id, process.pid)))

    def _killed_pids(self, actions: list[ev.Action]) -> list[int]:
        with self.lock:
            return [self.pool.workers[a.worker_id].pid for a in actions
                    if isinstance(a, ev.KillWorker)]

    def _report_infeasible(self, ask: ev.LeaseAsk, reason: str) -> None:
        """Put the waiting task in the task table as INFEASIBLE, so `tracedray list tasks`
        shows it (and why) instead of a task that seems merely slow."""
        if not ask.task_id:
            return
        event = gcs_pb2.TaskEvent(task_id=ask.task_id, job_id=ask.job_id,
                                  state="INFEASIBLE", time=time.time(), error_message=reason,
                                  kind="ACTOR_CREATION_TASK" if ask.is_actor
                                  else "NORMAL_TASK", resources=ask.resources)
        try:
            self._gcs.add_task_events([event])
        except RaySystemError as exc:
            log.warning("task_events.infeasible_report_failed", error=str(exc))


def _answered(actions: list[ev.Action]) -> int:
    return sum(1 for a in actions if isinstance(a, ev.Answer))


def _exit_blockers(address: Address) -> list[str] | None:
    """What an idle worker still holds that others need (empty: nothing); None when it
    does not answer, which keeps it (it may be busy in a way we cannot see)."""
    try:
        stub = core_worker_pb2_grpc.CoreWorkerServiceStub(rpc.channel(address.target))
        reply = stub.GetExitBlockers(core_worker_pb2.GetExitBlockersRequest(), timeout=2)
        return list(reply.reasons)
    except grpc.RpcError:
        return None
