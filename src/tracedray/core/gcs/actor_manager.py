"""The GCS's actors: their records and names, and the I/O of their lifecycles.

What happens to an actor is decided by ``actor_lifecycle.handle`` (a state machine over
``ActorState``); this module feeds it the events (requests, the raylets' answers and
reports, a node's death, a job's end) and performs the actions it returns: the record is
written under the lock (so the table has the transitions in their order), the rest
(placements, RPCs to raylets, log lines) after the lock is released. A placement asks a
raylet for a dedicated worker and pushes the creation task to it (``actor_placement``).
A restarted GCS has the raylets drop what the GCS before it left for creations under way
before it places any actor (``actor_recovery`` says why).
"""

from __future__ import annotations

import builtins
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tracedray import logs
from tracedray._proto.v1 import common_pb2, gcs_pb2, raylet_pb2
from tracedray.core import trace_context
from tracedray.core.address import Address
from tracedray.core.gcs import actor_lifecycle as lc
from tracedray.core.gcs import actor_recovery as ar
from tracedray.core.gcs.actor_lifecycle import ActorState, Outcome
from tracedray.core.gcs.actor_placement import choose_node, run_creation_task
from tracedray.core.protocol.raylet_client import RayletClient
from tracedray.exceptions import RaySystemError
from tracedray.telemetry.cluster_events import GcsEvents

log = logs.get_logger(__name__)
_events = GcsEvents(log)
# How long the GCS waits for a raylet to withdraw a dead actor's creation: a job's end
# waits for it, and the driver gives FinishJob 10 s.
WITHDRAW_TIMEOUT_S = 5.0
# How long a wait for an actor id this GCS does not know lasts before it answers "not
# found": an actor is registered before its handle exists, so only a handle from another
# cluster (or an earlier one) waits that long.
UNKNOWN_ACTOR_GRACE_S = 2.0
INFEASIBLE_WARNING_INTERVAL_S = 60.0  # an actor that fits no node is warned of this often


@dataclass(frozen=True)
class ActorManagerStatistics:
    actors_by_state: dict[ActorState, int]
    restarts_total: int  # over the actors this GCS knows
    creations_under_way: int  # placements asking a raylet for a worker or running __init__
    # The actions performed since this GCS started, by kind (Place, KillWorker, Withdraw…).
    actions_total: dict[str, int]


class ActorManager:
    def __init__(self, *, nodes: Callable[[], list[gcs_pb2.NodeWithLoad]],
                 persist: Callable[[gcs_pb2.ActorInfo], None]) -> None:
        self._nodes = nodes
        self._persist = persist
        self._actors: dict[bytes, lc.Actor] = {}
        self._records: dict[bytes, gcs_pb2.ActorInfo] = {}
        self._names: dict[tuple[str, str], bytes] = {}
        self._actions: Counter[str] = Counter()
        self._cond = threading.Condition()
        self._pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="tracedray-actors")
        # Placements wait while a restarted GCS has the raylets release what the GCS
        # before it left: a request of ours reaching a raylet first would be dropped too.
        self._placements_open = threading.Event()
        self._placements_open.set()

    def restore(self, infos: list[gcs_pb2.ActorInfo]) -> None:
        """After a GCS restart: the actors' workers kept running, so their state stands.
        The creations the GCS before had under way go on, once the raylets it knew have
        dropped what it left for them and kept the workers it was creating actors on
        (``actor_recovery``): on such a worker, or placed again."""
        with self._cond:
            for info in infos:
                self._actors[info.actor_id] = lc.Actor.from_record(info)
                self._records[info.actor_id] = info
                if info.name and info.state != ActorState.DEAD.value:
                    self._names[(info.namespace, info.name)] = info.actor_id
            unsettled = [actor_id for actor_id, actor in self._actors.items()
                         if actor.state in lc.UNSETTLED]
        raylets = {node.info.node_id: Address.from_proto(node.info.raylet).target
                   for node in self._nodes() if node.info.state == "ALIVE"}
        if raylets:  # a GCS that recovered no node knows no raylet to ask
            self._placements_open.clear()
            threading.Thread(target=self._release_unused_workers, args=(raylets, unsettled),
                             daemon=True, name="tracedray-actor-recovery").start()
            return
        for actor_id in unsettled:
            self._handle(actor_id, lc.Recovered())

    # --- requests
    def create(self, spec: common_pb2.TaskSpec, get_if_exists: bool) -> gcs_pb2.ActorInfo:
        options = spec.actor_options
        with self._cond:
            known = self._records.get(spec.actor_id)
            if known is not None:
                # A retried CreateActor: the GCS before took it (the restarted one recovered
                # the actor and places it) but died before answering. Placed once.
                return known
            if options.name:
                key = (options.namespace, options.name)
                existing = self._names.get(key)
                if existing is not None and self._actors[existing].state is not lc.DEAD:
                    if get_if_exists:
                        return self._records[existing]
                    raise ValueError(f"an actor named {options.name!r} already exists in "
                                     f"namespace {options.namespace!r}; use get_if_exists=True "
                                     "or get_actor()")
                self._names[key] = spec.actor_id
            info = gcs_pb2.ActorInfo(actor_id=spec.actor_id, name=options.name,
                                     namespace=options.namespace,
                                     class_name=options.class_name, job_id=spec.job_id,
                                     creation_task=spec, start_time=time.time(),
                                     detached=options.detached)
            self._records[spec.actor_id] = info
            step = lc.register(spec.actor_id, options.max_restarts)
            self._actors[spec.actor_id] = step.actor
            rest = self._apply_under_lock(info, None, step)
        self._perform(spec.actor_id, rest)
        return info

    def get(self, request: gcs_pb2.GetActorRequest) -> gcs_pb2.ActorInfo | None:
        started = time.monotonic()
        deadline = started + request.timeout_s
        with self._cond:
            while True:
                actor_id = request.actor_id or self._names.get((request.namespace, request.name))
                info = self._records.get(actor_id) if actor_id else None
                if info is None and not request.wait_until_settled:
                    return None
                if (info is None and request.actor_id
                        and time.monotonic() - started >= UNKNOWN_ACTOR_GRACE_S):
                    return None  # never created here: a handle from another cluster
                settled = info is not None and lc.settled(self._actors[info.actor_id],
                                                          request.min_restarts)
                if not request.wait_until_settled or settled:
                    return info
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return info
                self._cond.wait(min(remaining, 1.0))

    def list(self) -> list[gcs_pb2.ActorInfo]:
        with self._cond:
            return list(self._records.values())

    def outliving(self) -> set[bytes]:
        """The actors that outlive their job: detached, and not dead."""
        with self._cond:
            return {actor_id for actor_id, info in self._records.items()
                    if info.detached and self._actors[actor_id].state is not lc.DEAD}

    def statistics(self) -> ActorManagerStatistics:
        with self._cond:
            actors = list(self._actors.values())
            actions = dict(self._actions)
        return ActorManagerStatistics(
            actors_by_state=dict(Counter(actor.state for actor in actors)),
            restarts_total=sum(actor.num_restarts for actor in actors),
            creations_under_way=sum(len(actor.placing) for actor in actors),
            actions_total=actions)

    def kill(self, actor_id: bytes, no_restart: bool,
             cause: str = "killed with tracedray.kill()") -> None:
        self._handle(actor_id, lc.Killed(no_restart, cause))

    def on_worker_death(self, death: gcs_pb2.WorkerDeath) -> None:
        self._handle(death.actor_id, lc.WorkerDied(death.worker_id, death.exit_code,
                                                   death.signal, death.meaning))

    def on_node_death(self, node_id: str) -> None:
        with self._cond:
            actor_ids = list(self._actors)
        for actor_id in actor_ids:
            self._handle(actor_id, lc.NodeDied(node_id))

    def on_job_finished(self, job_id: bytes, cause: str) -> None:
        """The job ended (finished or failed): its non-detached actors die, creations
        under way first (``actor_lifecycle.job_end_order``)."""
        with self._cond:
            doomed = [self._actors[actor_id] for actor_id, info in self._records.items()
                      if info.job_id == job_id and not info.detached
                      and self._actors[actor_id].state is not lc.DEAD]
        for actor in lc.job_end_order(doomed):
            self.kill(actor.actor_id, no_restart=True, cause=cause)

    # --- the shell: events in, actions out
    def _handle(self, actor_id: bytes, event: lc.Event) -> lc.Step:
        """Feed one event to the actor's lifecycle and perform its actions: the record
        under the lock, the rest after it. RequestWorker and RunCreation are left to the
        placement that sent the event (returned in the step)."""
        with self._cond:
            actor = self._actors.get(actor_id)
            if actor is None:
                return lc.Step(lc.Actor(actor_id, lc.DEAD, 0))  # not an actor of this GCS
            step = lc.handle(actor, event)
            self._actors[actor_id] = step.actor
            rest = self._apply_under_lock(self._records[actor_id], actor, step)
        self._perform(actor_id, rest)
        return step

    def _apply_under_lock(self, info: gcs_pb2.ActorInfo, before: lc.Actor | None,
                          step: lc.Step) -> builtins.list[lc.Action]:
        """Write the record where the step says so (converted to the wire's strings);
        returns the other actions. The caller holds the lock."""
        rest: builtins.list[lc.Action] = []
        for action in step.actions:
            self._actions[type(action).__name__] += 1
            if not isinstance(action, lc.Save):
                rest.append(action)
                continue
            after = step.actor
            info.state = after.state.value
            info.num_restarts = after.num_restarts
            info.death_cause = after.death_cause
            if after.state is lc.ALIVE and after.recorded is not None:
                info.address.CopyFrom(after.recorded.to_proto())
                info.node_id = after.recorded.node_id
                info.pid = after.recorded.pid
            if after.state is lc.DEAD and (before is None or before.state is not lc.DEAD):
                info.end_time = time.time()
                if info.name and self._names.get((info.namespace, info.name)) == info.actor_id:
                    del self._names[(info.namespace, info.name)]
            self._persist(info)
            self._cond.notify_all()
        return rest

    def _perform(self, actor_id: bytes, actions: builtins.list[lc.Action]) -> None:
        """Without the lock: RPCs and log lines."""
        for action in actions:
            if isinstance(action, lc.Place):
                self._pool.submit(self._place, actor_id)
            elif isinstance(action, lc.ResumeCreation):
                self._pool.submit(self._resume, actor_id, action.node_id, action.worker)
            elif isinstance(action, lc.KillWorker):
                self._kill_worker(actor_id, action.node_id, action.worker)
            elif isinstance(action, lc.Withdraw):
                self._withdraw_creation(actor_id, action.node_id, action.cause)
            elif isinstance(action, lc.Log):
                action.write(log)

    def _raylet_of(self, node_id: str) -> str | None:
        for node in self._nodes():
            if node.info.node_id == node_id and node.info.state == "ALIVE":
                return Address.from_proto(node.info.raylet).target
        return None

    def _place(self, actor_id: bytes) -> None:
        self._placements_open.wait()
        spec = self._creation(actor_id)
        with _events.actor_create(actor_id, spec.actor_options.class_name,
                                  spec.actor_options.name, trace_context.carrier(spec)) as created:
            node = self._wait_for_node(actor_id, dict(spec.resources))
            if node is None:
                return
            step = self._handle(actor_id, lc.NodeChosen(node.info.node_id))
            if not any(isinstance(a, lc.RequestWorker) for a in step.actions):
                return  # dead meanwhile
            lease = self._request_worker(actor_id, node, spec)
            if lease is None:
                return
            address = Address.from_proto(lease.worker)
            created.placed(address.node_id, address.pid)
            outcome, error = run_creation_task(address, spec)
        self._finish_creation(actor_id, node.info.node_id, address, outcome, error)

    def _resume(self, actor_id: bytes, node_id: str, address: Address) -> None:
        """Finish the creation the GCS before had under way on ``address``, adopted."""
        spec = self._creation(actor_id)
        with _events.actor_create(actor_id, spec.actor_options.class_name,
                                  spec.actor_options.name, trace_context.carrier(spec)) as created:
            created.placed(address.node_id, address.pid)
            outcome, error = run_creation_task(address, spec)
        self._finish_creation(actor_id, node_id, address, outcome, error)

    def _creation(self, actor_id: bytes) -> common_pb2.TaskSpec:
        """A copy of the actor's creation task."""
        with self._cond:
            spec = common_pb2.TaskSpec()
            spec.CopyFrom(self._records[actor_id].creation_task)
        return spec

    def _wait_for_node(self, actor_id: bytes, resources: dict[str, float]
                       ) -> gcs_pb2.NodeWithLoad | None:
        """A node that fits the actor (checked every second: a node that fits may join,
        said once a minute: a hundred waiting actors must not flood the GCS's log), or
        None once the actor is dead."""
        waiting_since = time.monotonic()
        warned_at: float | None = None
        while (node := choose_node(self._nodes(), resources)) is None:
            now = time.monotonic()
            if warned_at is None or now - warned_at >= INFEASIBLE_WARNING_INTERVAL_S:
                warned_at = now
                log.warning("actor.infeasible", actor_id=actor_id.hex(),
                            resources=resources, waiting_s=round(now - waiting_since, 1))
            time.sleep(1.0)
            with self._cond:
                if self._actors[actor_id].state is lc.DEAD:
                    return None
        return node

    def _request_worker(self, actor_id: bytes, node: gcs_pb2.NodeWithLoad,
                        spec: common_pb2.TaskSpec) -> raylet_pb2.LeaseReply | None:
        """Ask the node's raylet for the actor's worker (the request may wait there for
        resources). Returns the lease to run ``__init__`` on, or None: no worker (the
        failure is handled) or the actor died meanwhile (what it got is given back)."""
        raylet = RayletClient(Address.from_proto(node.info.raylet).target)
        lease: raylet_pb2.LeaseReply | None = None
        try:
            lease = raylet.start_actor_worker(raylet_pb2.StartActorWorkerRequest(
                actor_id=actor_id, resources=dict(spec.resources), job_id=spec.job_id))
        except RaySystemError as exc:
            failure = f"placement failed: {exc}"
        else:
            failure = f"no worker: {lease.reason}"
        granted = lease is not None and lease.status == raylet_pb2.LeaseReply.GRANTED
        worker = Address.from_proto(lease.worker) if granted and lease is not None else None
        step = self._handle(actor_id, lc.LeaseAnswered(node.info.node_id, worker, failure))
        return lease if any(isinstance(a, lc.RunCreation) for a in step.actions) else None

    def _finish_creation(self, actor_id: bytes, node_id: str, address: Address,
                         outcome: Outcome, error: str) -> None:
        self._handle(actor_id, lc.InitEnded(node_id, address, outcome, error))

    def _withdraw_creation(self, actor_id: bytes, node_id: str, cause: str) -> None:
        """Have the raylet drop what it holds for a dead actor's creation: the waiting
        request, or the worker it granted."""
        target = self._raylet_of(node_id)
        if target is None:
            return  # the node is gone, and its workers with it
        cause = lc.one_line_cause(cause)  # the whole of it is in actor.dead's line
        try:
            reply = RayletClient(target).withdraw_actor_creation(actor_id, cause,
                                                                 timeout=WITHDRAW_TIMEOUT_S)
        except RaySystemError as exc:
            log.warning("actor.creation_withdraw_failed", actor_id=actor_id.hex(),
                        node_id=node_id, cause=cause, error=str(exc))
            return
        killed = list(reply.killed_worker_pids)
        # Info when it undid something; a withdrawal that found nothing (done already, or
        # the request not arrived yet: the placement discards what it gets) is a detail.
        (log.info if reply.withdrawn or killed else log.debug)(
            "actor.creation_withdrawn", actor_id=actor_id.hex(), node_id=node_id,
            cause=cause, requests_withdrawn=reply.withdrawn, killed_worker_pids=killed)

    def _release_unused_workers(self, raylets: dict[str, str],
                                unsettled: builtins.list[bytes]) -> None:
        """A restarted GCS, before it places any actor: each raylet it knows answers the
        actor requests waiting there, keeps for the GCS one worker of each actor whose
        creation was under way (adopted: the creation goes on there), and kills the other
        actor workers it does not use (``actor_recovery``). A raylet that does not answer
        keeps what it has."""
        adopted: dict[bytes, Address] = {}
        try:
            with self._cond:
                in_use = ar.workers_in_use(list(self._records.values()), raylets)

            def release(node_id: str) -> raylet_pb2.WithdrawActorCreationReply | str:
                try:
                    return RayletClient(raylets[node_id]).release_unused_actor_workers(
                        in_use[node_id], ar.CAUSE, timeout=WITHDRAW_TIMEOUT_S,
                        adopt_actor_ids=unsettled)
                except RaySystemError as exc:
                    return str(exc)

            with _events.release_unused(len(raylets), len(unsettled)) as release_span, \
                    ThreadPoolExecutor(max_workers=min(8, len(raylets))) as calls:
                replies = dict(zip(raylets, calls.map(release, raylets), strict=True))
                answered = [r for r in replies.values() if not isinstance(r, str)]
                withdrawn = sum(r.withdrawn for r in answered)
                killed = [pid for r in answered for pid in r.killed_worker_pids]
                unanswered = {n: r for n, r in replies.items() if isinstance(r, str)}
                spare = ar.adopt(adopted, [kept for r in answered for kept in r.adopted])
                release_span.answered(withdrawn, killed, sorted(unanswered))
            _events.unused_released(len(raylets), len(unsettled), withdrawn, killed,
                                    sorted(a.pid for a in adopted.values()), unanswered)
            for actor_id, address in spare:  # a second one of an actor: nobody's
                self._kill_worker(actor_id, address.node_id, address)
        except Exception as exc:  # noqa: BLE001 - a thread of its own: say it, or nobody will
            log.error("actor.release_unused_failed", error=repr(exc))
        finally:
            try:
                for actor_id in unsettled:
                    self._handle(actor_id, lc.Recovered(adopted.get(actor_id)))
            finally:
                self._placements_open.set()

    def _kill_worker(self, actor_id: bytes, node_id: str, address: Address) -> None:
        target = self._raylet_of(node_id)
        if target is None:
            return  # the node is gone, and its workers with it
        try:
            RayletClient(target).kill_worker(address.worker_id, force=True)
        except RaySystemError as exc:
            log.warning("actor.kill_failed", actor_id=actor_id.hex(), error=str(exc))
