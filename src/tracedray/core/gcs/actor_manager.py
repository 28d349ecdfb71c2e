"""Actor lifecycle in the GCS: create, place, restart, kill, look up by name.

States: PENDING_CREATION → ALIVE → (RESTARTING → ALIVE)* → DEAD.
The placement step asks a raylet for a dedicated worker, pushes the creation task
to it over the same task stream callers use, and marks the actor ALIVE when
``__init__`` returned (or DEAD with the error as cause if it raised; restarted, as after
any death of its worker, if that died in it: ``actor_failure`` counts each death once).
An actor declared DEAD while its creation is under way has it withdrawn from the raylet,
so that no worker stays behind for it (``actor_creation`` says when and why). A restarted
GCS has the raylets drop what the GCS before it left for creations under way before it
places any actor (``actor_recovery`` says why).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from tracedray import logs, telemetry
from tracedray._proto.v1 import common_pb2, gcs_pb2, raylet_pb2
from tracedray.core import trace_context
from tracedray.core.address import Address
from tracedray.core.gcs import actor_creation as ac
from tracedray.core.gcs import actor_failure as af
from tracedray.core.gcs import actor_recovery as ar
from tracedray.core.protocol.connection import WorkerConnection
from tracedray.core.protocol.raylet_client import RayletClient
from tracedray.core.protocol.resources import feasible, fits
from tracedray.core.serialization import deserialize
from tracedray.exceptions import RaySystemError
from tracedray.telemetry import attributes as A

log = logs.get_logger(__name__)
SETTLED = ("ALIVE", "DEAD")
# How long the GCS waits for a raylet to withdraw a dead actor's creation: a job's end
# waits for it, and the driver gives FinishJob 10 s.
WITHDRAW_TIMEOUT_S = 5.0
# How long a wait for an actor id this GCS does not know lasts before it answers "not
# found": an actor is registered before its handle exists, so only a handle from another
# cluster (or an earlier one) waits that long.
UNKNOWN_ACTOR_GRACE_S = 2.0
INFEASIBLE_WARNING_INTERVAL_S = 60.0  # an actor that fits no node is warned of this often


class ActorManager:
    def __init__(self, *, nodes: Callable[[], list[gcs_pb2.NodeWithLoad]],
                 persist: Callable[[gcs_pb2.ActorInfo], None]) -> None:
        self._nodes = nodes
        self._persist = persist
        self._actors: dict[bytes, gcs_pb2.ActorInfo] = {}
        self._names: dict[tuple[str, str], bytes] = {}
        # The nodes where each actor's creation is under way (asked for a worker, or
        # running __init__ there): one entry per placement, as a restart may overlap one.
        self._placing: dict[bytes, list[str]] = {}
        # The worker of each actor's current incarnation (granted for its creation, or
        # ALIVE on it): only its death counts, once (``actor_failure``).
        self._workers: dict[bytes, Address] = {}
        self._cond = threading.Condition()
        self._pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="tracedray-actors")
        # Placements wait while a restarted GCS has the raylets release what the GCS
        # before it left: a request of ours reaching a raylet first would be dropped too.
        self._placements_open = threading.Event()
        self._placements_open.set()

    def restore(self, infos: list[gcs_pb2.ActorInfo]) -> None:
        """After a GCS restart: the actors' workers kept running, so their state stands.
        The creations the GCS before had under way start again, once the raylets it knew
        have dropped what it left for them."""
        with self._cond:
            for info in infos:
                self._actors[info.actor_id] = info
                if info.state == "ALIVE" and info.HasField("address"):
                    self._workers[info.actor_id] = Address.from_proto(info.address)
                if info.name and info.state != "DEAD":
                    self._names[(info.namespace, info.name)] = info.actor_id
        pending = ar.to_place(infos)
        raylets = {node.info.node_id: Address.from_proto(node.info.raylet).target
                   for node in self._nodes() if node.info.state == "ALIVE"}
        if raylets:  # a GCS that recovered no node knows no raylet to ask
            self._placements_open.clear()
            threading.Thread(target=self._release_unused_workers, args=(raylets, len(pending)),
                             daemon=True, name="tracedray-actor-recovery").start()
        for actor_id in pending:
            self._pool.submit(self._place, actor_id)

    # --- requests
    def create(self, spec: common_pb2.TaskSpec, get_if_exists: bool) -> gcs_pb2.ActorInfo:
        options = spec.actor_options
        with self._cond:
            known = self._actors.get(spec.actor_id)
            if known is not None:
                # A retried CreateActor: the GCS before took it (the restarted one recovered
                # the actor and places it) but died before answering. Placed once.
                return known
            if options.name:
                key = (options.namespace, options.name)
                existing = self._names.get(key)
                if existing is not None and self._actors[existing].state != "DEAD":
                    if get_if_exists:
                        return self._actors[existing]
                    raise ValueError(f"an actor named {options.name!r} already exists in "
                                     f"namespace {options.namespace!r}; use get_if_exists=True "
                                     "or get_actor()")
                self._names[key] = spec.actor_id
            info = gcs_pb2.ActorInfo(actor_id=spec.actor_id, state="PENDING_CREATION",
                                     name=options.name, namespace=options.namespace,
                                     class_name=options.class_name, job_id=spec.job_id,
                                     creation_task=spec, start_time=time.time(),
                                     detached=options.detached)
            self._actors[spec.actor_id] = info
            self._save(info)
        self._pool.submit(self._place, spec.actor_id)
        return info

    def get(self, request: gcs_pb2.GetActorRequest) -> gcs_pb2.ActorInfo | None:
        started = time.monotonic()
        deadline = started + request.timeout_s
        with self._cond:
            while True:
                actor_id = request.actor_id or self._names.get((request.namespace, request.name))
                info = self._actors.get(actor_id) if actor_id else None
                if info is None and not request.wait_until_settled:
                    return None
                if (info is None and request.actor_id
                        and time.monotonic() - started >= UNKNOWN_ACTOR_GRACE_S):
                    return None  # never created here: a handle from another cluster
                settled = info is not None and (
                    info.state == "DEAD" or (info.state == "ALIVE"
                                             and info.num_restarts >= request.min_restarts))
                if not request.wait_until_settled or settled:
                    return info
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return info
                self._cond.wait(min(remaining, 1.0))

    def list(self) -> list[gcs_pb2.ActorInfo]:
        with self._cond:
            return list(self._actors.values())

    def outliving(self) -> set[bytes]:
        """The actors that outlive their job: detached, and not dead."""
        with self._cond:
            return {a.actor_id for a in self._actors.values()
                    if a.detached and a.state != "DEAD"}

    def kill(self, actor_id: bytes, no_restart: bool,
             cause: str = "killed with tracedray.kill()") -> None:
        with self._cond:
            info = self._actors.get(actor_id)
            if info is None or info.state == "DEAD":
                return
            if no_restart:
                self._set_dead(info, cause)
            address = Address.from_proto(info.address) if info.HasField("address") else None
            node = self._raylet_of(info.node_id)
            # Its creation under way: the request waits in a raylet, or has a worker the
            # GCS does not know of yet (the address above is set once ALIVE).
            creating = sorted(set(self._placing.get(actor_id, ()))) if no_restart else []
        if address is not None and node is not None:
            self._kill_worker(actor_id, node, address)
        for node_id in creating:
            self._withdraw_creation(actor_id, node_id, cause)

    def on_worker_death(self, death: gcs_pb2.WorkerDeath) -> None:
        with self._cond:
            info = self._actors.get(death.actor_id)
            if info is None:
                return
            current = self._workers.get(death.actor_id)
            during = "" if info.state == "ALIVE" else " during __init__"
            cause = (f"the actor's worker (pid {current.pid if current else 0}) died{during}: "
                     f"{death.signal or f'exit {death.exit_code}'}: {death.meaning}")
            self._after_failure(info, death.worker_id, cause)

    def on_node_death(self, node_id: str) -> None:
        with self._cond:
            for info in list(self._actors.values()):
                if info.node_id == node_id and info.state in ("ALIVE", "PENDING_CREATION"):
                    self._after_failure(info, self._current_worker_id(info.actor_id),
                                        f"its node {node_id[:12]} died")

    def on_job_finished(self, job_id: bytes, cause: str) -> None:
        """The job ended (finished or failed): its non-detached actors die. Creations
        still under way go first, each withdrawn before the next actor: killing a live
        actor frees resources at once, which the raylet would otherwise grant to a
        creation of the same job waiting for them, only to have that worker killed."""
        doomed = [info for info in self.list()
                  if info.job_id == job_id and not info.detached and info.state != "DEAD"]
        for info in sorted(doomed, key=lambda info: info.state == "ALIVE"):
            self.kill(info.actor_id, no_restart=True, cause=cause)

    # --- internals
    def _current_worker_id(self, actor_id: bytes) -> str:
        """The caller holds the lock."""
        current = self._workers.get(actor_id)
        return current.worker_id if current is not None else ""

    def _after_failure(self, info: gcs_pb2.ActorInfo, failed_worker: str, cause: str, *,
                       restartable: bool = True) -> str:
        """One failure of the actor's worker ``failed_worker`` ("" when none was granted):
        restart the actor, declare it dead, or nothing when that death was counted already
        (``actor_failure``). The caller holds the lock; returns the decision."""
        max_restarts = info.creation_task.actor_options.max_restarts
        decision = af.after_failure(info.state, self._current_worker_id(info.actor_id),
                                    failed_worker, restartable=restartable,
                                    num_restarts=info.num_restarts, max_restarts=max_restarts)
        if decision == af.RESTART:
            self._workers.pop(info.actor_id, None)
            info.state = "RESTARTING"
            info.num_restarts += 1
            info.death_cause = cause
            self._save(info)
            log.warning("actor.restarting", actor_id=info.actor_id.hex(), cause=cause,
                        restart=info.num_restarts, worker_id=failed_worker)
            self._pool.submit(self._place, info.actor_id)
        elif decision == af.DIE:
            self._set_dead(info, cause + (f" (no restarts left of max_restarts={max_restarts})"
                                          if restartable and max_restarts else ""))
        return decision

    def _set_dead(self, info: gcs_pb2.ActorInfo, cause: str) -> None:
        self._workers.pop(info.actor_id, None)
        info.state = "DEAD"
        info.death_cause = cause
        info.end_time = time.time()
        if info.name and self._names.get((info.namespace, info.name)) == info.actor_id:
            del self._names[(info.namespace, info.name)]
        self._save(info)
        log.info("actor.dead", actor_id=info.actor_id.hex(), cause=cause)

    def _save(self, info: gcs_pb2.ActorInfo) -> None:
        self._persist(info)
        self._cond.notify_all()

    def _raylet_of(self, node_id: str) -> str | None:
        for node in self._nodes():
            if node.info.node_id == node_id and node.info.state == "ALIVE":
                return Address.from_proto(node.info.raylet).target
        return None

    def _choose_node(self, resources: dict[str, float]) -> gcs_pb2.NodeWithLoad | None:
        alive = [n for n in self._nodes() if n.info.state == "ALIVE"
                 and feasible(dict(n.info.resources_total), resources)]
        if not alive:
            return None
        free = [n for n in alive if fits(dict(n.resources_available), resources)]
        # Spread actors: most free CPU first; otherwise queue on the least loaded node.
        pool = free or alive
        return max(pool, key=lambda n: (n.resources_available.get("CPU", 0.0),
                                        -n.pending_leases))

    def _place(self, actor_id: bytes) -> None:
        self._placements_open.wait()
        with self._cond:
            info = self._actors[actor_id]
            spec = common_pb2.TaskSpec()
            spec.CopyFrom(info.creation_task)
        resources = dict(spec.resources)
        attributes = {A.ACTOR_ID: actor_id.hex(), A.ACTOR_CLASS: spec.actor_options.class_name,
                      A.ACTOR_NAME: spec.actor_options.name}
        parent = telemetry.context_from_carrier(trace_context.carrier(spec))
        with telemetry.span("actor.create", attributes, context=parent) as span:
            node = None
            waiting_since = time.monotonic()
            warned_at: float | None = None
            while node is None:
                node = self._choose_node(resources)
                if node is None:
                    # Checked every second (a node that fits may join), said once a minute:
                    # a hundred waiting actors must not flood the GCS's log.
                    now = time.monotonic()
                    if warned_at is None or now - warned_at >= INFEASIBLE_WARNING_INTERVAL_S:
                        warned_at = now
                        log.warning("actor.infeasible", actor_id=actor_id.hex(),
                                    resources=resources, waiting_s=round(now - waiting_since, 1))
                    time.sleep(1.0)
                    with self._cond:
                        if self._actors[actor_id].state == "DEAD":
                            return
            node_id = node.info.node_id
            with self._cond:
                if self._actors[actor_id].state == "DEAD":
                    return
                self._placing.setdefault(actor_id, []).append(node_id)
            lease = self._request_worker(actor_id, node, spec)
            if lease is None:
                return
            address = Address.from_proto(lease.worker)
            span.set_attribute(A.NODE_ID, address.node_id)
            span.set_attribute(A.WORKER_PID, address.pid)
            outcome, error = self._run_creation_task(address, spec)
        self._finish_creation(actor_id, node_id, address, outcome, error)

    def _request_worker(self, actor_id: bytes, node: gcs_pb2.NodeWithLoad,
                        spec: common_pb2.TaskSpec) -> raylet_pb2.LeaseReply | None:
        """Ask the node's raylet for the actor's worker (the request may wait there for
        resources). Returns the lease to run ``__init__`` on, or None: no worker (the
        failure is handled) or the actor died meanwhile (what it got is given back)."""
        node_id = node.info.node_id
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
        with self._cond:
            info = self._actors[actor_id]
            step = ac.after_lease(info.state, granted)
            if step == ac.CREATE and lease is not None:
                self._workers[actor_id] = Address.from_proto(lease.worker)
            else:
                self._placement_ended(actor_id, node_id)
            if step == ac.FAIL:
                self._after_failure(info, "", failure)
            cause = info.death_cause
        if step == ac.DISCARD:  # granted a moment before the withdrawal came, or after it
            self._withdraw_creation(actor_id, node_id, cause)
        elif step == ac.WITHDRAWN:
            log.debug("actor.placement_withdrawn", actor_id=actor_id.hex(), node_id=node_id,
                      reply=failure)
        return lease if step == ac.CREATE else None

    def _finish_creation(self, actor_id: bytes, node_id: str, address: Address,
                         outcome: str, error: str) -> None:
        failure = af.IGNORE
        with self._cond:
            self._placement_ended(actor_id, node_id)
            info = self._actors[actor_id]
            current = self._current_worker_id(actor_id) == address.worker_id
            step = ac.after_init(info.state, current, outcome)
            if step == ac.FAIL:
                failure = self._after_failure(info, address.worker_id, error,
                                              restartable=outcome == ac.WORKER_DIED)
            elif step == ac.ALIVE:
                info.state = "ALIVE"
                info.address.CopyFrom(address.to_proto())
                info.node_id = address.node_id
                info.pid = address.pid
                self._save(info)
            cause, restarts = info.death_cause, info.num_restarts
        if step == ac.ALIVE:
            log.info("actor.alive", actor_id=actor_id.hex(), node_id=address.node_id,
                     pid=address.pid, restarts=restarts)
        elif step == ac.DISCARD or failure == af.DIE:
            # dead: its worker must not stay behind, holding the actor's resources
            self._withdraw_creation(actor_id, node_id, cause)
        elif failure == af.RESTART:
            # Not a withdrawal: that would take the next incarnation's creation too. The
            # stream ends when the worker exits, but one that merely broke would leave a
            # live worker behind.
            target = self._raylet_of(node_id)
            if target is not None:
                self._kill_worker(actor_id, target, address)

    def _placement_ended(self, actor_id: bytes, node_id: str) -> None:
        """The caller holds the lock."""
        nodes = self._placing.get(actor_id, [])
        if node_id in nodes:
            nodes.remove(node_id)
        if not nodes:
            self._placing.pop(actor_id, None)

    def _withdraw_creation(self, actor_id: bytes, node_id: str, cause: str) -> None:
        """Have the raylet drop what it holds for a dead actor's creation: the waiting
        request, or the worker it granted. Without the lock: this is an RPC."""
        target = self._raylet_of(node_id)
        if target is None:
            return  # the node is gone, and its workers with it
        cause = ac.one_line_cause(cause)  # the whole of it is in actor.dead's line
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

    def _release_unused_workers(self, raylets: dict[str, str], to_place: int) -> None:
        """A restarted GCS, before it places any actor: each raylet it knows answers the
        actor requests waiting there and kills the actor workers it does not use
        (``actor_recovery``). A raylet that does not answer keeps what it has."""
        try:
            with self._cond:
                in_use = ar.workers_in_use(list(self._actors.values()), raylets)

            def release(node_id: str) -> raylet_pb2.WithdrawActorCreationReply | str:
                try:
                    return RayletClient(raylets[node_id]).release_unused_actor_workers(
                        in_use[node_id], ar.CAUSE, timeout=WITHDRAW_TIMEOUT_S)
                except RaySystemError as exc:
                    return str(exc)

            attributes = {A.GCS_NODES: len(raylets), A.ACTOR_RECREATED: to_place}
            with telemetry.span("actor.release_unused", attributes) as span, \
                    ThreadPoolExecutor(max_workers=min(8, len(raylets))) as calls:
                replies = dict(zip(raylets, calls.map(release, raylets), strict=True))
                withdrawn = sum(r.withdrawn for r in replies.values() if not isinstance(r, str))
                killed = [pid for r in replies.values() if not isinstance(r, str)
                          for pid in r.killed_worker_pids]
                unanswered = {n: r for n, r in replies.items() if isinstance(r, str)}
                span.set_attribute(A.ACTOR_REQUESTS_WITHDRAWN, withdrawn)
                span.set_attribute(A.ACTOR_WORKERS_KILLED, killed)
                span.set_attribute(A.GCS_NODES_UNANSWERED, sorted(unanswered))
            (log.warning if unanswered else log.info)(
                "actor.release_unused", nodes=len(raylets), actors_to_place=to_place,
                requests_withdrawn=withdrawn, killed_worker_pids=killed, unanswered=unanswered)
        except Exception as exc:  # noqa: BLE001 - a thread of its own: say it, or nobody will
            log.error("actor.release_unused_failed", error=repr(exc))
        finally:
            self._placements_open.set()

    def _kill_worker(self, actor_id: bytes, raylet: str, address: Address) -> None:
        """Without the lock: this is an RPC."""
        try:
            RayletClient(raylet).kill_worker(address.worker_id, force=True)
        except RaySystemError as exc:
            log.warning("actor.kill_failed", actor_id=actor_id.hex(), error=str(exc))

    def _run_creation_task(self, address: Address,
                           spec: common_pb2.TaskSpec) -> tuple[str, str]:
        """Push the creation task; returns how it ended (``actor_creation.RETURNED``,
        ``RAISED``, ``WORKER_DIED``) and, for a failure, the cause of death."""
        done = threading.Event()
        outcome: dict[str, Any] = {}

        def on_results(conn: WorkerConnection, results: list[common_pb2.TaskResult]) -> None:
            outcome["result"] = results[0]
            done.set()

        def on_broken(conn: WorkerConnection, error: BaseException | None) -> None:
            outcome.setdefault("broken", str(error))
            done.set()

        conn = WorkerConnection(address, on_results, on_broken)
        conn.send(spec)
        done.wait()
        conn.close()
        result = outcome.get("result")
        if result is None:
            broken = outcome.get("broken")
            return ac.WORKER_DIED, f"the actor's worker died during __init__ ({broken})"
        if result.is_application_error:
            try:
                value = result.returns[0].inline_value
                error = deserialize(value.inband, list(value.buffers))
                return ac.RAISED, f"the actor's __init__ raised:\n{error}"
            except Exception as exc:  # noqa: BLE001 - best-effort description
                return ac.RAISED, f"the actor's __init__ raised (undecodable error: {exc})"
        return ac.RETURNED, ""
