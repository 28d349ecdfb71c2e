"""The raylet's leasing decisions as a state machine: ``LeaseBook.handle(event)``
changes the book and returns the actions the raylet performs (``lease_service.py``),
outside its lock.

The book holds the node's resources, the requests waiting here (``LeaseState``), the
workers' states and leases (``worker_states.py``) and the view of the other nodes. A
request is granted here, spilled back to a node that can run it sooner, queued, or kept
as infeasible until a node that fits joins (``scheduler.decide``). Queued requests are
granted in arrival order as workers come free; one with no idle worker starts one,
unless a worker already starting will serve it. A task blocked in ``get`` lends its CPU
out until it resumes (as Ray does). A worker's exit releases what its lease held.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from tracedray.core.address import Address
from tracedray.core.protocol import resources as rs
from tracedray.core.raylet import lease_events as ev
from tracedray.core.raylet import scheduler
from tracedray.core.raylet import worker_states as ws
from tracedray.core.raylet.early_withdrawals import EarlyWithdrawals
from tracedray.core.raylet.scheduler import Placement
from tracedray.core.raylet.worker_states import WorkerSlot, WorkerState

WITHDRAWN_UNNEEDED = "withdrawn by the requester: no task of it needs a worker any more"
SHUTTING_DOWN = "the node is shutting down"


class LeaseState(enum.Enum):
    QUEUED = "queued"  # waits for resources this node has
    INFEASIBLE = "infeasible"  # no node known fits it; waits for one to join


@dataclass(eq=False)
class PendingLease:
    ticket: int
    ask: ev.LeaseAsk
    decision: scheduler.Decision
    state: LeaseState


@dataclass(frozen=True)
class HeldTaskLease:
    lease_id: str
    worker_id: str
    pid: int
    lessee: Address


# Stop reason and meaning of a worker whose lessee lost its connection to it.
KILLED_LESSEE_LOST_IT = ("killed by the raylet: the process holding its lease lost its "
                         "connection to it")
LESSEE_LOST_IT = (ws.STOP_LESSEE_LOST_IT, KILLED_LESSEE_LOST_IT)


@dataclass(frozen=True)
class LeaseBookStatistics:
    pending_leases: int
    infeasible_leases: int
    leases_granted: int
    leases_reclaimed: int
    workers_by_state: dict[WorkerState, int]
    resources_available: dict[str, float]


class LeaseBook:
    """Not thread-safe: the raylet calls it under its lock. ``new_lease_id`` and
    ``new_worker_id`` name new leases and workers (random in the raylet)."""

    def __init__(self, node_id: str, total: dict[str, float], *,
                 new_lease_id: Callable[[], str], new_worker_id: Callable[[], str]) -> None:
        self.node_id = node_id
        self.total = dict(total)
        self.available = dict(total)
        self.workers: dict[str, WorkerSlot] = {}
        self._new_lease_id = new_lease_id
        self._new_worker_id = new_worker_id
        self._pending: list[PendingLease] = []
        self._leases: dict[str, WorkerSlot] = {}
        self._peers: dict[str, ev.Peer] = {}
        self._early = EarlyWithdrawals()
        self._granted = 0
        self._reclaimed = 0
        self._stopping = False
        self._handlers: dict[type, Callable[[Any, list[ev.Action]], None]] = {
            ev.LeaseRequested: self._requested, ev.RequesterGone: self._requester_gone,
            ev.RequestsWithdrawn: self._requests_withdrawn,
            ev.ActorCreationWithdrawn: self._actor_creation_withdrawn,
            ev.UnusedActorWorkersReleased: self._unused_actor_workers,
            ev.AbandonedActorGrant: self._abandoned_actor_grant,
            ev.PeersSeen: self._peers_seen, ev.WorkersPrestarted: self._prestart,
            ev.WorkerSpawned: self._spawned, ev.WorkerSpawnFailed: self._spawn_failed,
            ev.WorkerRegistered: self._registered, ev.WorkerBlocked: self._blocked,
            ev.WorkerExited: self._exited, ev.LeaseReturned: self._returned,
            ev.LeaseReclaimed: self._reclaim, ev.KillRequested: self._kill_requested,
            ev.IdleWorkerReaped: self._reaped, ev.NodeStopping: self._node_stopping,
        }

    def handle(self, event: ev.Event) -> list[ev.Action]:
        actions: list[ev.Action] = []
        self._handlers[type(event)](event, actions)
        return actions

    # --- reading
    def queued(self) -> int:
        return sum(1 for p in self._pending if p.state is LeaseState.QUEUED)

    def infeasible(self) -> int:
        return sum(1 for p in self._pending if p.state is LeaseState.INFEASIBLE)

    def count(self, state: WorkerState) -> int:
        return sum(1 for w in self.workers.values() if w.state is state)

    def idle_task_workers(self) -> list[WorkerSlot]:
        return [w for w in self.workers.values() if w.state is WorkerState.IDLE
                and not w.actor_id]

    def live_task_workers(self) -> int:
        return sum(1 for w in self.workers.values()
                   if w.state in ws.LIVE_TASK_STATES and not w.actor_id)

    def starting_workers(self) -> list[WorkerSlot]:
        """The workers not registered yet and not being stopped."""
        return [w for w in self.workers.values() if w.state is WorkerState.STARTING
                and not w.killing]

    def held_task_leases(self) -> list[HeldTaskLease]:
        return [HeldTaskLease(w.lease_id, w.worker_id, w.pid, w.lessee)
                for w in self.workers.values()
                if w.lessee is not None and w.state in (WorkerState.LEASED, WorkerState.BLOCKED)
                and not w.killing]

    def statistics(self) -> LeaseBookStatistics:
        return LeaseBookStatistics(
            self.queued(), self.infeasible(), self._granted, self._reclaimed,
            {state: self.count(state) for state in WorkerState}, dict(self.available))

    # --- requests
    def _requested(self, event: ev.LeaseRequested, out: list[ev.Action]) -> None:
        ask = event.ask
        if ask.request_id and self._early.claim(ask.requester_worker_id, ask.request_id):
            out.append(ev.Answer(event.ticket, ev.Outcome.WITHDRAWN, WITHDRAWN_UNNEEDED))
            out.append(_withdrawn_log(ask, WITHDRAWN_UNNEEDED))
            return
        local, others = self._view(ask)
        decision = scheduler.decide(local, others, dict(ask.resources), may_spill=ask.may_spill)
        if decision.action is Placement.SPILLBACK:
            out.append(self._spillback(event.ticket, decision))
            return
        infeasible = decision.action is Placement.INFEASIBLE
        pending = PendingLease(event.ticket, ask, decision,
                               LeaseState.INFEASIBLE if infeasible else LeaseState.QUEUED)
        if infeasible:
            out.append(ev.Log("warning", "lease.infeasible", {
                "resources": dict(ask.resources), "reason": decision.reason,
                "task_id": ask.task_id.hex()}))
            out.append(ev.ReportInfeasible(ask, decision.reason))
        self._pending.append(pending)
        self._dispatch(out)

    def _requester_gone(self, event: ev.RequesterGone, out: list[ev.Action]) -> None:
        for pending in self._pending:
            if pending.ticket == event.ticket:  # else granted, spilled back or answered
                self._withdraw(pending, "the requester went away", out)
                return

    def _requests_withdrawn(self, event: ev.RequestsWithdrawn, out: list[ev.Action]) -> None:
        # Requests without a requester (an actor's, from the GCS) stay.
        if not event.requester_worker_id:
            return
        named = event.request_ids
        mine = [p for p in self._pending
                if p.ask.requester_worker_id == event.requester_worker_id
                and (not named or p.ask.request_id in named)]
        for pending in mine:
            self._withdraw(pending, WITHDRAWN_UNNEEDED if named
                           else "the requester is shutting down", out)
        if named:  # those not here yet are answered as they arrive
            self._early.add(event.requester_worker_id,
                            named - {p.ask.request_id for p in mine}, event.now)

    def _withdraw(self, pending: PendingLease, reason: str, out: list[ev.Action]) -> None:
        self._pending.remove(pending)
        out.append(ev.Answer(pending.ticket, ev.Outcome.WITHDRAWN, reason))
        out.append(_withdrawn_log(pending.ask, reason))

    def _spillback(self, ticket: int, decision: scheduler.Decision) -> ev.Answer:
        return ev.Answer(ticket, ev.Outcome.SPILLBACK, decision=decision,
                         spillback=self._peers[decision.node_id].raylet)

    def _view(self, ask: ev.LeaseAsk) -> tuple[scheduler.NodeView, list[scheduler.NodeView]]:
        local = scheduler.NodeView(self.node_id, True, self.total, self.available,
                                   self.queued(), ask.input_bytes_by_node.get(self.node_id, 0))
        others = [scheduler.NodeView(p.node_id, p.alive, dict(p.total), dict(p.available),
                                     p.pending_leases, ask.input_bytes_by_node.get(p.node_id, 0))
                  for p in self._peers.values() if p.node_id != self.node_id]
        return local, others

    def _peers_seen(self, event: ev.PeersSeen, out: list[ev.Action]) -> None:
        if event.peers is not None:
            self._peers = {p.node_id: p for p in event.peers}
        self._respill(out)
        self._dispatch(out)  # nodes may have joined: re-check infeasible requests

    def _respill(self, out: list[ev.Action]) -> None:
        """Decide again for requests queued here, with the fresh view of the peers: a
        request queued because no other node looked free (a stale view) moves to a node
        that is free now instead of waiting for this one. Requests spilled here earlier
        are re-decided too: the node that spilled them may have judged this one free
        from a stale heartbeat."""
        ahead = 0  # a request's queue is what is ahead of it, as when it first arrived
        for pending in list(self._pending):
            if pending.state is LeaseState.INFEASIBLE:
                continue
            ahead += 1
            if pending.ask.actor_id:
                continue
            local, others = self._view(pending.ask)
            local = dataclasses.replace(local, queue_length=ahead - 1)
            resources = dict(pending.ask.resources)
            if rs.fits(self.available, resources):
                continue  # _dispatch grants it here
            decision = scheduler.decide(local, others, resources, may_spill=True)
            if decision.action is not Placement.SPILLBACK or decision.node_id not in self._peers:
                continue
            self._pending.remove(pending)
            out.append(self._spillback(pending.ticket, decision))

    def _dispatch(self, out: list[ev.Action]) -> None:
        """Grant queued requests that fit, in arrival order; start workers as needed."""
        starting = self.count(WorkerState.STARTING)
        # Resources promised to requests that wait for a worker to start: without this,
        # every queued request that "fits" would start a worker of its own.
        unpromised = dict(self.available)
        for pending in list(self._pending):
            resources = dict(pending.ask.resources)
            if pending.state is LeaseState.INFEASIBLE:
                if not rs.feasible(self.total, resources):
                    local, others = self._view(pending.ask)
                    decision = scheduler.decide(local, others, resources, may_spill=True)
                    if decision.action is Placement.SPILLBACK:
                        self._pending.remove(pending)
                        out.append(self._spillback(pending.ticket, decision))
                    continue
                pending.state = LeaseState.QUEUED
            if not rs.fits(unpromised, resources):
                continue
            worker = self._idle_worker()
            if worker is None:
                rs.acquire(unpromised, resources)
                if starting > 0:
                    starting -= 1  # a worker already starting will serve this request
                else:
                    self._start_worker(out)
                continue
            self._pending.remove(pending)
            rs.acquire(self.available, resources)
            rs.acquire(unpromised, resources)
            self._grant(pending, worker, resources, out)

    def _grant(self, pending: PendingLease, worker: WorkerSlot, resources: dict[str, float],
               out: list[ev.Action]) -> None:
        lease_id = self._new_lease_id()
        actor_id = pending.ask.actor_id
        worker.state = WorkerState.ACTOR if actor_id else WorkerState.LEASED
        worker.lease_id = lease_id
        worker.lessee = None if actor_id else pending.ask.requester
        worker.resources = resources
        worker.actor_id = actor_id
        self._leases[lease_id] = worker
        self._granted += 1
        out.append(ev.Answer(pending.ticket, ev.Outcome.GRANTED, decision=pending.decision,
                             lease_id=lease_id, worker_id=worker.worker_id))

    def _idle_worker(self) -> WorkerSlot | None:
        """The most recently idle worker: reusing it keeps a warm one busy and lets the
        others age towards reaping."""
        idle = [w for w in self.workers.values() if w.state is WorkerState.IDLE]
        return max(idle, key=lambda w: w.idle_since) if idle else None

    # --- workers
    def _start_worker(self, out: list[ev.Action]) -> None:
        worker_id = self._new_worker_id()
        self.workers[worker_id] = WorkerSlot(worker_id)
        out.append(ev.StartWorker(worker_id))

    def _prestart(self, event: ev.WorkersPrestarted, out: list[ev.Action]) -> None:
        for _ in range(event.count):
            self._start_worker(out)

    def _spawned(self, event: ev.WorkerSpawned, out: list[ev.Action]) -> None:
        worker = self.workers.get(event.worker_id)
        if worker is not None:
            worker.pid = event.pid

    def _spawn_failed(self, event: ev.WorkerSpawnFailed, out: list[ev.Action]) -> None:
        self.workers.pop(event.worker_id, None)

    def _registered(self, event: ev.WorkerRegistered, out: list[ev.Action]) -> None:
        worker = self.workers.get(event.worker_id)
        if worker is None or worker.state is not WorkerState.STARTING or worker.killing:
            return
        self._mark_idle(worker, event.now)
        self._dispatch(out)

    def _mark_idle(self, worker: WorkerSlot, now: float) -> None:
        worker.state = WorkerState.IDLE
        worker.idle_since = now

    def _blocked(self, event: ev.WorkerBlocked, out: list[ev.Action]) -> None:
        worker = self.workers.get(event.worker_id)
        if worker is None or worker.state not in (WorkerState.LEASED, WorkerState.BLOCKED):
            return
        cpu = {"CPU": worker.resources.get("CPU", 0.0)}
        if event.blocked and worker.state is WorkerState.LEASED:
            worker.state = WorkerState.BLOCKED
            rs.release(self.available, cpu)
        elif not event.blocked and worker.state is WorkerState.BLOCKED:
            worker.state = WorkerState.LEASED
            rs.acquire(self.available, cpu)  # may go negative briefly, as in Ray
        self._dispatch(out)

    def _exited(self, event: ev.WorkerExited, out: list[ev.Action]) -> None:
        worker = self.workers.get(event.worker_id)
        if worker is None:
            return
        if worker.lease_id:
            self._leases.pop(worker.lease_id, None)
            rs.release(self.available, worker.held())
            worker.lease_id = ""
            worker.lessee = None
        worker.state = WorkerState.DEAD
        if not self._stopping:
            self._dispatch(out)

    def _returned(self, event: ev.LeaseReturned, out: list[ev.Action]) -> None:
        worker = self._leases.get(event.lease_id)
        if worker is None or worker.killing:
            # Being killed (a reclaimed lease): its exit releases the lease. Idle now, it
            # could be leased again in the moment before it dies.
            return
        if event.disconnect:
            self._stop_abandoned(worker, out)
            return
        if event.failed:  # dead or unreachable, its exit not seen yet: still leased
            out.append(ev.StopUnlessExited(worker.worker_id, *LESSEE_LOST_IT))
            return
        del self._leases[event.lease_id]
        if worker.state in (WorkerState.LEASED, WorkerState.BLOCKED):
            rs.release(self.available, worker.held())
        worker.lease_id = ""
        worker.lessee = None
        worker.resources = {}
        self._mark_idle(worker, event.now)
        self._dispatch(out)

    def _kill(self, worker: WorkerSlot, reason: str, meaning: str, out: list[ev.Action],
              *, force: bool = True) -> None:
        if worker.state is not WorkerState.DEAD:
            worker.killing = True
        out.append(ev.KillWorker(worker.worker_id, force, reason, meaning))

    def _kill_requested(self, event: ev.KillRequested, out: list[ev.Action]) -> None:
        worker = self.workers.get(event.worker_id)
        if worker is not None:
            self._kill(worker, event.reason, event.meaning, out, force=event.force)

    def _reaped(self, event: ev.IdleWorkerReaped, out: list[ev.Action]) -> None:
        worker = self.workers.get(event.worker_id)
        if worker is None or worker.state is not WorkerState.IDLE:
            return
        worker.state = WorkerState.STOPPING
        worker.killing = True
        out.append(ev.StopIdleWorker(worker.worker_id, event.meaning))

    def _node_stopping(self, event: ev.NodeStopping, out: list[ev.Action]) -> None:
        self._stopping = True
        for pending in self._pending:
            out.append(ev.Answer(pending.ticket, ev.Outcome.WITHDRAWN, SHUTTING_DOWN))
        self._pending.clear()
        for worker in self.workers.values():
            if worker.state is not WorkerState.DEAD:
                worker.killing = True

    # --- leases taken back
    def _reclaim(self, event: ev.LeaseReclaimed, out: list[ev.Action]) -> None:
        """Kill a leased worker whose lessee died, if the lease still belongs to it; its
        exit releases the lease's resources and grants waiting requests."""
        worker = self._leases.get(event.lease_id)
        if (self._stopping or worker is None or worker.killing
                or worker.worker_id != event.worker_id or worker.lessee != event.lessee):
            return
        lessee = event.lessee
        who = lessee_name(lessee)
        self._reclaimed += 1
        out.append(ev.Log("warning", "lease.reclaimed", {
            "lease_id": worker.lease_id, "worker_id": worker.worker_id, "worker_pid": worker.pid,
            "lessee_pid": lessee.pid, "lessee_ip": lessee.ip,
            "lessee_worker_id": lessee.worker_id, "lessee_node_id": lessee.node_id,
            "why": event.why, "reclaimed_total": self._reclaimed}))
        self._kill(worker, f"{ws.STOP_LESSEE_DIED}: {who}",
                   f"killed by the raylet: the process holding its lease died ({who}; "
                   f"{event.why})", out)

    def _stop_abandoned(self, worker: WorkerSlot, out: list[ev.Action]) -> None:
        """Kill a worker given back running tasks of a lessee that shuts down (nobody
        reads their results; the next lessee would wait behind them), as Ray does."""
        lessee = worker.lessee or Address("", "", 0)
        who = lessee_name(lessee)
        out.append(ev.Log("info", "lease.returned_running", {
            "lease_id": worker.lease_id, "worker_id": worker.worker_id, "worker_pid": worker.pid,
            "lessee_pid": lessee.pid, "lessee_worker_id": lessee.worker_id}))
        self._kill(worker, f"{ws.STOP_LESSEE_LEFT}: {who}",
                   f"killed by the raylet: the process holding its lease shut down while it "
                   f"still ran that process's tasks ({who})", out)

    # --- actors the GCS does not want
    def _actor_creation_withdrawn(self, event: ev.ActorCreationWithdrawn,
                                  out: list[ev.Action]) -> None:
        """Drop what this node holds for the creation of an actor the GCS declared dead:
        its waiting requests are answered, the workers granted to it killed."""
        if not event.actor_id:  # task leases have no actor id: none of them is concerned
            return
        for pending in [p for p in self._pending if p.ask.actor_id == event.actor_id]:
            self._withdraw(pending, f"the actor is dead: {event.cause}", out)
        for worker in [w for w in self.workers.values() if w.actor_id == event.actor_id
                       and w.state is not WorkerState.DEAD and not w.killing]:
            self._discard_actor_worker(
                worker, event.cause, ws.STOP_ACTOR_DEAD,
                f"killed by the raylet: the GCS declared its actor dead ({event.cause})", out)

    def _unused_actor_workers(self, event: ev.UnusedActorWorkersReleased,
                              out: list[ev.Action]) -> None:
        """A restarted GCS, before it places any actor (``UnusedActorWorkersReleased``)."""
        for pending in [p for p in self._pending if p.ask.actor_id]:
            self._withdraw(pending, f"the GCS does not want it any more: {event.cause}", out)
        kept, unused = adoptable(self.workers.values(), event.in_use, event.adopt)
        out.extend(ev.ActorWorkerAdopted(w.actor_id, w.worker_id) for w in kept)
        for worker in unused:
            self._discard_unused_actor_worker(worker, event.cause, out)

    def _abandoned_actor_grant(self, event: ev.AbandonedActorGrant, out: list[ev.Action]) -> None:
        """A worker granted to an actor just as its requester (the GCS) went away: nobody
        runs ``__init__`` on it, and a restarted GCS places the actor again."""
        worker = self._leases.get(event.lease_id)
        if worker is None or worker.state is not WorkerState.ACTOR or worker.killing:
            return
        self._discard_unused_actor_worker(worker, "the GCS that asked for it went away", out)

    def _discard_unused_actor_worker(self, worker: WorkerSlot, cause: str,
                                     out: list[ev.Action]) -> None:
        self._discard_actor_worker(
            worker, cause, ws.STOP_ACTOR_UNUSED,
            f"killed by the raylet: the GCS does not use it for its actor ({cause})", out)

    def _discard_actor_worker(self, worker: WorkerSlot, cause: str, stop: str, meaning: str,
                              out: list[ev.Action]) -> None:
        """Kill a worker granted to an actor the GCS does not want on it: it may be
        running ``__init__``, or idle in state ACTOR for good, holding the actor's
        resources. ``stop`` is one of ``STOPS_FOR_THE_GCS``: the GCS is not told of the
        exit."""
        out.append(ev.Log("info", "actor.worker_discarded", {
            "actor_id": worker.actor_id.hex(), "worker_id": worker.worker_id,
            "worker_pid": worker.pid, "lease_id": worker.lease_id, "cause": cause}))
        self._kill(worker, f"{stop}: {cause}", meaning, out)


def unused_actor_workers(workers: Iterable[WorkerSlot],
                         in_use: frozenset[str] | set[str]) -> list[WorkerSlot]:
    """The live workers granted to an actor that the GCS does not use (``in_use``: the
    ids of its ALIVE actors' workers), leaving those being killed already."""
    return [w for w in workers if w.state is WorkerState.ACTOR and w.actor_id
            and not w.killing and w.worker_id not in in_use]


def adoptable(workers: Iterable[WorkerSlot], in_use: frozenset[str], adopt: frozenset[bytes]
              ) -> tuple[list[WorkerSlot], list[WorkerSlot]]:
    """The live actor workers the GCS does not use (``unused_actor_workers``), split into
    those it adopts (the first of each actor in ``adopt``: a restarted GCS finishes that
    actor's creation there) and the others."""
    kept: dict[bytes, WorkerSlot] = {}
    unused = []
    for worker in unused_actor_workers(workers, in_use):
        if worker.actor_id in adopt and worker.actor_id not in kept:
            kept[worker.actor_id] = worker
        else:
            unused.append(worker)
    return list(kept.values()), unused


def lessee_name(lessee: Address) -> str:
    return f"pid {lessee.pid} at {lessee.ip}:{lessee.port}, worker id {lessee.worker_id}"


def _withdrawn_log(ask: ev.LeaseAsk, reason: str) -> ev.Log:
    return ev.Log("debug", "lease.withdrawn", {"requester_pid": ask.requester_pid,
                                               "task_id": ask.task_id.hex(), "reason": reason})
