"""The raylet: one per node. Leases workers, runs the node's object store,
heartbeats to the GCS, reaps idle workers beyond its soft limit, and records every
worker exit."""

from __future__ import annotations

import dataclasses
import functools
import os
import subprocess
import threading
import time
from collections.abc import Callable, Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from tracedray import config, logs, telemetry
from tracedray.core import rpc, trace_context
from tracedray.core.address import Address
from tracedray.core.gcs import node_health
from tracedray.core.gcs.client import GcsClient
from tracedray.core.object_store.store import FREE_RELEASED, ObjectStore
from tracedray.core.protocol import resources as rs
from tracedray.core.protocol.flight_recorder import read_slot
from tracedray.core.protocol.raylet_client import RayletClient
from tracedray.core.raylet import driver_watch as dw
from tracedray.core.raylet import lease_reclaim as lr
from tracedray.core.raylet import object_data, scheduler
from tracedray.core.raylet import owner_death as od
from tracedray.core.raylet import stack_dumps as sd
from tracedray.core.raylet import worker_pool as wp
from tracedray.core.raylet.early_withdrawals import EarlyWithdrawals
from tracedray.core.raylet.heartbeats import Heartbeats, HeartbeatStatistics
from tracedray.core.raylet.object_data import ObjectDataServer
from tracedray.core.raylet.object_frees import ObjectFrees, ObjectFreeStatistics
from tracedray.core.raylet.seal_channel import SealChannelServer, socket_name
from tracedray.core.raylet.telemetry_agent import start_agent, stop_agent
from tracedray.core.raylet.transfers import TransferTable
from tracedray.exceptions import (
    ConfigError,
    ObjectStoreFullError,
    RaySystemError,
    SessionFileCorruptError,
)
from tracedray.telemetry import attributes as A
from tracedray.telemetry.append_file import read_data
from tracedray.telemetry.line_file import line_files
from tracedray.telemetry.line_spool import sync_lines_dir
from tracedray.telemetry.spool_convert import sync_traces_dir
from tracedray.telemetry.trace_index import matching_lines
from tracedray.v1 import (
    common_pb2,
    core_worker_pb2,
    core_worker_pb2_grpc,
    debug_pb2,
    gcs_pb2,
    raylet_pb2,
    raylet_pb2_grpc,
)

log = logs.get_logger(__name__)


@dataclass(frozen=True)
class _Receipt:
    """Whose a pulled copy is (it goes with its owner, as the primary does)."""

    owner: str  # worker id
    owner_address: Address | None
    call_site: str


WITHDRAWN_UNNEEDED = "withdrawn by the requester: no task of it needs a worker any more"


@dataclass(eq=False)  # one waiting request: compared by identity (list.remove, in)
class PendingLease:
    request: raylet_pb2.LeaseRequest
    decision: scheduler.Decision
    done: threading.Event = field(default_factory=threading.Event)
    reply: raylet_pb2.LeaseReply | None = None
    actor_id: bytes = b""
    infeasible: bool = False


@dataclass(frozen=True)
class RayletStatistics:
    pending_leases: int
    infeasible_leases: int
    leases_granted: int
    leases_reclaimed: int  # task leases taken back because their lessee died
    workers: wp.WorkerPoolStatistics
    resources_available: dict[str, float]
    heartbeats: HeartbeatStatistics
    frees: ObjectFreeStatistics
    freed_by_reason: dict[str, int]  # the store's: "released", "owner exited", "owner died"


class Raylet:
    def __init__(self, *, node_id: str, ip: str, gcs_address: str, session_dir: Path,
                 resources: dict[str, float], object_store_memory: int, object_spilling: bool,
                 is_head: bool, port: int = 0, listen_host: str = "127.0.0.1",
                 metrics_export_port: int = 0) -> None:
        self.node_id = node_id
        # Where this node's /metrics is served (metrics/), registered with the GCS for
        # prometheus_sd.json; 0: not served.
        self.metrics_export_port = metrics_export_port
        self.ip = ip
        self.session_dir = session_dir
        self.is_head = is_head
        self.total = dict(resources)
        self.available = dict(resources)
        self._lock = threading.RLock()
        self._pending: list[PendingLease] = []
        self._withdrawn_early = EarlyWithdrawals()
        self._leases: dict[str, wp.WorkerProcess] = {}
        self._granted = 0
        self._reclaimed = 0
        self._exits: dict[str, threading.Event] = {}
        self._stopped = threading.Event()
        self.gcs = GcsClient(gcs_address)
        prefix = f"tracedray-{session_dir.name[-24:]}-{node_id[:8]}"
        self.store = ObjectStore(node_id=node_id, capacity_bytes=object_store_memory,
                                 name_prefix=prefix, spill_dir=session_dir / "spill" / node_id[:12],
                                 spilling_enabled=object_spilling,
                                 # A lookup waits for the seals already sent (seal_channel.py).
                                 settle=lambda: self.seal_channel.settle())
        self.object_path_prefix = str(self.store.object_path("00"))[:-2]
        self._server = rpc.make_server(max_workers=256)
        raylet_pb2_grpc.add_RayletServiceServicer_to_server(_Servicer(self), self._server)
        self.port = rpc.bind(self._server, listen_host, port)
        self.pool = wp.WorkerPool(node_id=node_id, ip=ip, raylet_port=self.port,
                                  gcs_address=gcs_address, session_dir=session_dir,
                                  object_path_prefix=self.object_path_prefix,
                                  on_exit=self._on_worker_exit)
        self._drivers: dict[str, Address] = {}
        # Drivers with a job, watched until they die (driver_watch.py), by worker id;
        # and how many times in a row each one's port refused, for those watched by port.
        self._watched: dict[str, dw.WatchedDriver] = {}
        self._refusals: dict[str, int] = {}
        self._peers: dict[str, gcs_pb2.NodeWithLoad] = {}
        self._bg = ThreadPoolExecutor(max_workers=8, thread_name_prefix="tracedray-raylet-bg")
        self.heartbeats = Heartbeats(
            gcs=self.gcs, node_id=node_id, interval_s=config.HEARTBEAT_INTERVAL_S.get(),
            request=self._heartbeat_request, stopped=self._stopped,
            reregister=lambda: self.gcs.register_node(self._node_info()),
            fence=self._fence, clock_skew_s=_clock_skew())
        self.transfers = TransferTable()
        # Object bytes between nodes travel outside gRPC (object_data.py).
        self.object_data = ObjectDataServer(listen_host, self.store.open_for_transfer)
        # Local writers seal over a Unix socket, not gRPC (seal_channel.py).
        self.seal_channel = SealChannelServer(socket_name(self.object_path_prefix), self.seal)
        self.frees = ObjectFrees(store=self.store, transfers=self.transfers, node_id=node_id,
                                 background=self._bg, local_alive=self._local_processes,
                                 dead_nodes=self._dead_nodes)
        self._agent: subprocess.Popen[bytes] | None = None
        # Read here so that a malformed value fails the node's start, naming the variable.
        self.idle_worker_timeout_s = config.IDLE_WORKER_TIMEOUT_S.get()
        self.register_timeout_s = config.WORKER_REGISTER_TIMEOUT_S.get()
        self.worker_soft_limit = wp.soft_limit(self.total.get("CPU", 0.0),
                                               config.IDLE_WORKER_SOFT_LIMIT.get())
        # Idle spells (worker id, idle since) whose worker said it holds something, and
        # when to ask again: an owner may stay idle for long, and asking flushes its
        # background work.
        self._ask_again_at: dict[tuple[str, float], float] = {}

    @property
    def address(self) -> Address:
        return Address(self.node_id, self.ip, self.port)

    # --- lifecycle
    def start(self, prestart_workers: int) -> None:
        self._server.start()
        self._agent = start_agent(self.session_dir, self.node_id, ip=self.ip)
        with telemetry.span("node.start", {A.NODE_ID: self.node_id, A.NODE_IP: self.ip}) as span:
            info = self._node_info()
            self.gcs.register_node(info)
            differences = self._version_drift(info)
            if differences:
                span.set_attribute(A.NODE_VERSION_DRIFT, differences)
        log.info("node.start", node_id=self.node_id, address=self.address.target,
                 resources=self.total, store_capacity=self.store.statistics().capacity)
        if differences:
            log.warning("node.version_drift", node_id=self.node_id, differences=differences,
                        hint="this node's interpreter or packages differ from the head's")
        with self._lock:
            for _ in range(prestart_workers):
                self.pool.start_worker()
        threading.Thread(target=self.heartbeats.run, daemon=True,
                         name="tracedray-heartbeat").start()
        threading.Thread(target=self._peer_view_loop, daemon=True,
                         name="tracedray-peer-view").start()
        threading.Thread(target=self._idle_reaper_loop, daemon=True,
                         name="tracedray-idle-reaper").start()

    def _node_info(self) -> gcs_pb2.NodeInfo:
        from tracedray.core.environment import environment_fingerprint

        # The pid lets `tracedray list nodes` name the raylet even after the node died.
        raylet = self.address._replace(pid=os.getpid()).to_proto()
        return gcs_pb2.NodeInfo(node_id=self.node_id, raylet=raylet,
                                resources_total=self.total, state="ALIVE", start_time=time.time(),
                                environment=environment_fingerprint(), is_head=self.is_head,
                                object_store_capacity=self.store.statistics().capacity,
                                hostname=os.uname().nodename,
                                metrics_export_port=self.metrics_export_port)

    def _version_drift(self, info: gcs_pb2.NodeInfo) -> list[str]:
        """How this node's versions differ from the head's (the GCS flags it too)."""
        from tracedray.core.environment import drift

        if info.is_head:
            return []
        try:
            heads = [n.info for n in self.gcs.get_nodes() if n.info.is_head]
        except RaySystemError as exc:
            log.warning("node.version_check_failed", error=str(exc))
            return []
        return drift(dict(heads[0].environment), dict(info.environment)) if heads else []

    def _heartbeat_request(self) -> gcs_pb2.HeartbeatRequest:
        with self._lock:
            return gcs_pb2.HeartbeatRequest(
                node_id=self.node_id, resources_available=self.available,
                store_used=self.store.statistics().used,
                pending_leases=self._queued(), infeasible_leases=self._infeasible())

    def _peer_view_loop(self) -> None:
        """Refresh the view of the other nodes every heartbeat interval, off the
        heartbeats' thread (heartbeats.py): a slow GetNodes never delays a heartbeat."""
        interval = config.HEARTBEAT_INTERVAL_S.get()
        while not self._stopped.wait(interval):
            try:
                self._peers = {n.info.node_id: n for n in self.gcs.get_nodes()}
            except RaySystemError as exc:
                log.warning("peer_view.failed", error=str(exc))
            with self._lock:
                self._respill()
                self._dispatch()  # nodes may have joined: re-check infeasible requests

    def _respill(self) -> None:
        """Decide again for requests queued here, with the fresh view of the peers: a
        request queued because no other node looked free (a stale view) moves to a node
        that is free now instead of waiting for this one."""
        ahead = 0  # a request's queue is what is ahead of it, as when it first arrived
        for pending in list(self._pending):
            request = pending.request
            if pending.infeasible:
                continue
            ahead += 1
            # Requests spilled here earlier are re-decided too: the node that spilled them
            # may have judged this one free from a stale heartbeat.
            if pending.actor_id:
                continue
            local, others = self._view(request)
            local = dataclasses.replace(local, queue_length=ahead - 1)
            resources = dict(request.resources)
            if rs.fits(self.available, resources):
                continue  # _dispatch grants it here
            decision = scheduler.decide(local, others, resources, may_spill=True)
            if decision.action != "spillback" or decision.node_id not in self._peers:
                continue
            self._pending.remove(pending)
            peer = self._peers[decision.node_id]
            pending.reply = self._reply(decision, status=raylet_pb2.LeaseReply.SPILLBACK,
                                        spillback=Address.from_proto(peer.info.raylet))
            pending.done.set()

    def _fence(self, death_reason: str) -> None:
        """The GCS declared this node dead while it ran (a stall or a partition longer
        than the death timeout): stop, killing the workers, so that nothing runs under the
        dead node's identity; its work was already failed or retried elsewhere."""
        if self._stopped.is_set():
            return
        log.error("node.fenced", node_id=self.node_id, death_reason=death_reason,
                  action="the raylet stops and kills its workers; start the node again to "
                         "rejoin the cluster as a new node")
        threading.Thread(target=_shutdown_and_exit, args=(self, 1), daemon=True,
                         name="tracedray-fence").start()

    def shutdown(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        log.info("node.stop", node_id=self.node_id)
        with self._lock:
            for pending in self._pending:
                pending.reply = raylet_pb2.LeaseReply(status=raylet_pb2.LeaseReply.TIMEOUT,
                                                      reason="the node is shutting down")
                pending.done.set()
            self._pending.clear()
        self.pool.kill_all()
        self.object_data.close()
        self.seal_channel.close()
        self.store.shutdown()
        self._server.stop(grace=0.5)
        if self._agent is not None:
            stop_agent(self._agent)  # after the workers: it converts what they left

    def statistics(self) -> RayletStatistics:
        with self._lock:
            return RayletStatistics(
                pending_leases=self._queued(), infeasible_leases=self._infeasible(),
                leases_granted=self._granted, leases_reclaimed=self._reclaimed,
                workers=self.pool.statistics(), resources_available=dict(self.available),
                heartbeats=self.heartbeats.statistics(), frees=self.frees.statistics(),
                freed_by_reason=self.store.statistics().freed_by_reason)

    # --- leasing
    def _queued(self) -> int:
        """Lease requests waiting for resources this node has (the caller holds the lock)."""
        return sum(1 for p in self._pending if not p.infeasible)

    def _infeasible(self) -> int:
        return sum(1 for p in self._pending if p.infeasible)

    def _view(self, request: raylet_pb2.LeaseRequest) -> tuple[scheduler.NodeView,
                                                                list[scheduler.NodeView]]:
        local = scheduler.NodeView(self.node_id, True, self.total, self.available,
                                   self._queued(),
                                   request.input_bytes_by_node.get(self.node_id, 0))
        others = [scheduler.NodeView(n.info.node_id, n.info.state == "ALIVE",
                                     dict(n.info.resources_total), dict(n.resources_available),
                                     n.pending_leases,
                                     request.input_bytes_by_node.get(n.info.node_id, 0))
                  for n in self._peers.values() if n.info.node_id != self.node_id]
        return local, others

    def request_lease(self, request: raylet_pb2.LeaseRequest, actor_id: bytes = b"", *,
                      on_requester_gone: Callable[[Callable[[], None]], None] | None = None
                      ) -> raylet_pb2.LeaseReply:
        """Decide, and wait for the grant if queued. ``on_requester_gone`` registers a
        function to call when the requester goes away (its RPC ends): the request is
        then withdrawn, so no worker is started or granted for nobody."""
        with self._lock:
            if request.request_id and self._withdrawn_early.claim(
                    request.requester.worker_id, request.request_id):
                log.debug("lease.withdrawn", requester_pid=request.requester.pid,
                          task_id=request.task_id.hex(), reason=WITHDRAWN_UNNEEDED)
                return raylet_pb2.LeaseReply(status=raylet_pb2.LeaseReply.TIMEOUT,
                                             reason=WITHDRAWN_UNNEEDED)
            local, others = self._view(request)
            decision = scheduler.decide(local, others, dict(request.resources),
                                        may_spill=not request.grant_or_reject and not actor_id)
            if decision.action == "spillback":
                peer = self._peers[decision.node_id]
                return self._reply(decision, status=raylet_pb2.LeaseReply.SPILLBACK,
                                   spillback=Address.from_proto(peer.info.raylet))
            pending = PendingLease(request, decision, actor_id=actor_id,
                                   infeasible=decision.action == "infeasible")
            if pending.infeasible:
                log.warning("lease.infeasible", resources=dict(request.resources),
                            reason=decision.reason, task_id=request.task_id.hex())
                self._bg.submit(self._report_infeasible, request, decision.reason)
            self._pending.append(pending)
            self._dispatch()
        if on_requester_gone is not None:
            on_requester_gone(functools.partial(self._withdraw, pending))
        pending.done.wait()
        assert pending.reply is not None
        return pending.reply

    def _withdraw(self, pending: PendingLease) -> None:
        """Drop a request whose requester went away, if it still waits."""
        with self._lock:
            if pending in self._pending:  # else granted, spilled back or answered
                self._answer_withdrawn(pending, "the requester went away")

    def withdraw_requests_of(self, worker_id: str, request_ids: Collection[bytes] = ()) -> int:
        """Drop the requests of process ``worker_id`` named in ``request_ids`` (no task
        needs them any more), or all of them when none is named (it is shutting down).
        Named requests not waiting here are answered as they arrive (``EarlyWithdrawals``);
        one granted already is the requester's to give back. Returns how many were
        waiting here."""
        if not worker_id:  # requests without a requester (an actor's, from the GCS) stay
            return 0
        named = set(request_ids)
        with self._lock:
            mine = [p for p in self._pending if p.request.requester.worker_id == worker_id
                    and (not named or p.request.request_id in named)]
            for pending in mine:
                self._answer_withdrawn(pending, WITHDRAWN_UNNEEDED if named
                                       else "the requester is shutting down")
            if named:
                self._withdrawn_early.add(
                    worker_id, named - {p.request.request_id for p in mine}, time.monotonic())
            return len(mine)

    def withdraw_actor_creation(self, actor_id: bytes, cause: str) -> tuple[int, list[int]]:
        """Drop what this node holds for the creation of an actor the GCS declared dead
        (``cause`` says why): its waiting requests are answered instead of granted, and
        the workers granted to it are killed, their exits releasing the resources.
        Returns how many requests were withdrawn and the pids of the killed workers."""
        if not actor_id:  # task leases have no actor id: none of them is concerned
            return 0, []
        with self._lock:
            waiting = [p for p in self._pending if p.actor_id == actor_id]
            for pending in waiting:
                self._answer_withdrawn(pending, f"the actor is dead: {cause}")
            granted = [w for w in self.pool.workers.values() if w.actor_id == actor_id
                       and w.state != wp.DEAD and not w.kill_intended]
            for worker in granted:
                self._discard_actor_worker(
                    worker, cause, stop=wp.STOP_ACTOR_DEAD,
                    meaning=f"killed by the raylet: the GCS declared its actor dead ({cause})")
        return len(waiting), [w.pid for w in granted]

    def release_unused_actor_workers(self, in_use: set[str], cause: str) -> tuple[int, list[int]]:
        """A restarted GCS, before it places any actor (``gcs/actor_recovery.py``): the
        actor requests waiting here are all the GCS before's, and of the workers granted
        to actors it uses only those in ``in_use`` (its ALIVE actors' workers). Answers
        the requests, kills the other actor workers (their exits release the resources);
        returns how many requests were answered and the pids of the killed workers."""
        with self._lock:
            waiting = [p for p in self._pending if p.actor_id]
            for pending in waiting:
                self._answer_withdrawn(pending, f"the GCS does not want it any more: {cause}")
            unused = wp.unused_actor_workers(self.pool.workers.values(), in_use)
            for worker in unused:
                self._discard_unused_actor_worker(worker, cause)
        killed = [w.pid for w in unused]
        (log.info if waiting or killed else log.debug)(
            "actor.release_unused", requests_withdrawn=len(waiting), killed_worker_pids=killed,
            kept_workers=len(in_use), cause=cause)
        return len(waiting), killed

    def discard_abandoned_actor_grant(self, lease_id: str) -> None:
        """A worker granted to an actor just as its requester (the GCS) went away: nobody
        runs ``__init__`` on it or knows of it, and a restarted GCS places the actor again."""
        with self._lock:
            worker = self._leases.get(lease_id)
            if worker is None or worker.state != wp.ACTOR or worker.kill_intended:
                return
            self._discard_unused_actor_worker(worker, "the GCS that asked for it went away")

    def _discard_unused_actor_worker(self, worker: wp.WorkerProcess, cause: str) -> None:
        self._discard_actor_worker(
            worker, cause, stop=wp.STOP_ACTOR_UNUSED,
            meaning=f"killed by the raylet: the GCS does not use it for its actor ({cause})")

    def _discard_actor_worker(self, worker: wp.WorkerProcess, cause: str, *, stop: str,
                              meaning: str) -> None:
        """Kill a worker granted to an actor that the GCS does not want on it (the
        caller holds the lock): it may be running ``__init__``, or idle in state ACTOR
        for good, holding the actor's resources. ``stop`` is one of
        ``wp.STOPS_FOR_THE_GCS``: the GCS is not told of the exit."""
        log.info("actor.worker_discarded", actor_id=worker.actor_id.hex(),
                 worker_id=worker.worker_id, worker_pid=worker.pid, lease_id=worker.lease_id,
                 cause=cause)
        self.kill_worker(worker.worker_id, force=True, reason=f"{stop}: {cause}",
                         meaning=meaning)

    def _answer_withdrawn(self, pending: PendingLease, reason: str) -> None:
        self._pending.remove(pending)
        pending.reply = raylet_pb2.LeaseReply(status=raylet_pb2.LeaseReply.TIMEOUT,
                                              reason=reason)
        pending.done.set()
        log.debug("lease.withdrawn", requester_pid=pending.request.requester.pid,
                  task_id=pending.request.task_id.hex(), reason=reason)

    def _report_infeasible(self, request: raylet_pb2.LeaseRequest, reason: str) -> None:
        """Put the waiting task in the task table as INFEASIBLE, so `tracedray list tasks`
        shows it (and why) instead of a task that seems merely slow."""
        if not request.task_id:
            return
        event = gcs_pb2.TaskEvent(task_id=request.task_id, job_id=request.job_id,
                                  state="INFEASIBLE", time=time.time(), error_message=reason,
                                  kind="ACTOR_CREATION_TASK" if request.is_actor
                                  else "NORMAL_TASK", resources=request.resources)
        try:
            self.gcs.add_task_events([event])
        except RaySystemError as exc:
            log.warning("task_events.infeasible_report_failed", error=str(exc))

    def _reply(self, decision: scheduler.Decision, *, status: int,
               spillback: Address | None = None) -> raylet_pb2.LeaseReply:
        reply = raylet_pb2.LeaseReply(status=status, reason=decision.reason,  # type: ignore[arg-type]
                                      candidates=decision.candidates,
                                      local_bytes=decision.local_bytes,
                                      queue_lengths=decision.queue_lengths,
                                      chosen_node=decision.node_id or self.node_id)
        if spillback is not None:
            reply.spillback_raylet.CopyFrom(spillback.to_proto())
        return reply

    def _dispatch(self) -> None:
        """Grant queued requests that fit, in arrival order; start workers as needed."""
        starting = self.pool.count(wp.STARTING)
        # Resources promised to requests that wait for a worker to start: without this,
        # every queued request that "fits" would start a worker of its own.
        unpromised = dict(self.available)
        for pending in list(self._pending):
            request = pending.request
            resources = dict(request.resources)
            if pending.infeasible:
                if not rs.feasible(self.total, resources):
                    local, others = self._view(request)
                    decision = scheduler.decide(local, others, resources, may_spill=True)
                    if decision.action == "spillback":
                        self._pending.remove(pending)
                        peer = self._peers[decision.node_id]
                        pending.reply = self._reply(decision,
                                                    status=raylet_pb2.LeaseReply.SPILLBACK,
                                                    spillback=Address.from_proto(peer.info.raylet))
                        pending.done.set()
                    continue
                pending.infeasible = False
            if not rs.fits(unpromised, resources):
                continue
            worker = self.pool.idle_worker()
            if worker is None:
                rs.acquire(unpromised, resources)
                if starting > 0:
                    starting -= 1  # a worker already starting will serve this request
                else:
                    self.pool.start_worker()
                continue
            self._pending.remove(pending)
            rs.acquire(self.available, resources)
            rs.acquire(unpromised, resources)
            lease_id = os.urandom(8).hex()
            worker.state = wp.ACTOR if pending.actor_id else wp.LEASED
            worker.lease_id = lease_id
            worker.lessee = None if pending.actor_id else _lessee_of(request)
            worker.resources = resources
            worker.actor_id = pending.actor_id
            self._leases[lease_id] = worker
            self._granted += 1
            reply = self._reply(pending.decision, status=raylet_pb2.LeaseReply.GRANTED)
            reply.lease_id = lease_id
            reply.worker.CopyFrom(self.pool.address_of(worker).to_proto())
            pending.reply = reply
            pending.done.set()

    def return_worker(self, lease_id: str, failed: bool, disconnect: bool = False) -> None:
        with self._lock:
            worker = self._leases.get(lease_id)
            if worker is None or worker.kill_intended:
                # Being killed (a reclaimed lease): its exit releases the lease. Idle
                # now, it could be leased again in the moment before it dies.
                return
            if disconnect and worker.state != wp.DEAD:
                self._stop_abandoned(worker)
                return
            del self._leases[lease_id]
            if worker.state == wp.LEASED:
                rs.release(self.available, worker.resources)
            elif worker.state == wp.BLOCKED:
                rs.release(self.available, _without_cpu(worker.resources))
            worker.lease_id = ""
            worker.lessee = None
            worker.resources = {}
            if worker.state != wp.DEAD:
                self.pool.mark_idle(worker)
            self._dispatch()

    def register_worker(self, worker_id: str, port: int, task_port: int) -> None:
        with self._lock:
            worker = self.pool.workers.get(worker_id)
            if worker is None:
                raise RaySystemError(f"unknown worker {worker_id}")
            worker.port, worker.task_port = port, task_port
            self.pool.mark_idle(worker)
            worker.registered.set()
            if telemetry.enabled():
                telemetry.start_span("worker.start", {A.WORKER_ID: worker_id,
                                                      A.WORKER_PID: worker.pid,
                                                      A.NODE_ID: self.node_id}).end()
            log.info("worker.start", worker_id=worker_id, worker_pid=worker.pid, port=port)
            self._dispatch()

    def notify_blocked(self, worker_id: str, blocked: bool) -> None:
        with self._lock:
            worker = self.pool.workers.get(worker_id)
            if worker is None or worker.state not in (wp.LEASED, wp.BLOCKED):
                return
            cpu = {"CPU": worker.resources.get("CPU", 0.0)}
            if blocked and worker.state == wp.LEASED:
                worker.state = wp.BLOCKED
                rs.release(self.available, cpu)
            elif not blocked and worker.state == wp.BLOCKED:
                worker.state = wp.LEASED
                rs.acquire(self.available, cpu)  # may go negative briefly, as in Ray
            self._dispatch()

    # --- drivers
    def register_driver(self, worker_id: str, port: int, pid: int, job_id: bytes) -> None:
        """A driver connects (twice: before its server listens, then with its port and
        job). One with a job is watched: if it dies, the GCS is told."""
        address = Address(self.node_id, self.ip, port, worker_id, pid)
        started = dw.identify_local_process(pid, port) if job_id else None
        with self._lock:
            self._drivers[worker_id] = address
            if job_id:
                self._watched[worker_id] = dw.WatchedDriver(worker_id, job_id, address, started)

    def check_drivers(self) -> list[str]:
        """Report the watched drivers that surely died to the GCS; returns their worker
        ids. The probes run without the lock, one per driver (``driver_watch``)."""
        with self._lock:
            if self._stopped.is_set():
                return []
            drivers = list(self._watched.values())
        if not drivers:
            return []
        verdicts = dict(zip([d.worker_id for d in drivers], self._bg.map(dw.probe_driver, drivers),
                            strict=True))
        judgement = dw.judge(drivers, verdicts, self._refusals)
        with self._lock:
            self._refusals = judgement.refusals
            for driver, _ in judgement.dead:
                self._watched.pop(driver.worker_id, None)
                self._drivers.pop(driver.worker_id, None)  # nothing to ask it any more
        for driver, why in judgement.dead:
            self._bg.submit(self._report_driver_death, driver, why)
            self.frees.owner_gone(od.died(driver.address, f"its driver process died: {why}"))
        return [driver.worker_id for driver, _ in judgement.dead]

    def _report_driver_death(self, driver: dw.WatchedDriver, why: str) -> None:
        address = driver.address
        try:
            reply = self.gcs.report_driver_death(gcs_pb2.DriverDeath(
                job_id=driver.job_id, node_id=self.node_id, worker_id=driver.worker_id,
                pid=address.pid, why=why))
        except RaySystemError as exc:
            log.error("driver.death_report_failed", job_id=driver.job_id.hex(),
                      driver_pid=address.pid, error=str(exc))
            with self._lock:  # the next round finds it dead again and tells again
                if not self._stopped.is_set():
                    self._watched.setdefault(driver.worker_id, driver)
            return
        # A warning when its job ended with it; a driver that finished its job first
        # exited as it should.
        (log.warning if reply.job_ended else log.info)(
            "driver.exit", job_id=driver.job_id.hex(), driver_pid=address.pid,
            driver_worker_id=driver.worker_id, why=why, job_ended=reply.job_ended,
            job_state=reply.job_state)

    # --- idle workers beyond the soft limit, and leases whose lessee died
    def _idle_reaper_loop(self) -> None:
        # Several checks per timeout, so a worker goes soon after its time is up;
        # at most 1 s apart, at least 50 ms (each check is a pass over the pool).
        interval = min(1.0, max(0.05, self.idle_worker_timeout_s / 4))
        reclaim_at = 0.0
        while not self._stopped.wait(interval):
            _survive(self.reap_idle_workers, "worker.reap_failed")
            _survive(self.kill_unregistered_workers, "worker.register_check_failed")
            if time.monotonic() < reclaim_at:
                continue
            reclaim_at = time.monotonic() + lr.RECLAIM_INTERVAL_S
            _survive(self.reclaim_orphaned_leases, "lease.reclaim_failed")
            _survive(self.check_drivers, "driver.check_failed")
            _survive(self.frees.check_owners, "objects.owner_check_failed")

    def kill_unregistered_workers(self) -> list[int]:
        """Kill the workers stuck at start: not registered ``register_timeout_s`` after
        they were started. Requests counted on them get other workers: each exit
        re-dispatches (``_mark_dead``), which starts new ones. Returns their pids."""
        timeout = self.register_timeout_s
        with self._lock:
            if self._stopped.is_set():
                return []
            stuck = wp.not_registered_in_time(self.pool.workers.values(), time.monotonic(),
                                              timeout)
            for worker in stuck:
                log.warning("worker.register_timeout", worker_id=worker.worker_id,
                            worker_pid=worker.pid, timeout_s=timeout,
                            hint="its output (a traceback, a hung import) is in this "
                                 "raylet's stderr file under logs/")
                self.kill_worker(worker.worker_id, force=True, reason=wp.STOP_NOT_REGISTERED,
                                 meaning=f"killed by the raylet: it did not register within "
                                         f"{timeout:g}s of its start "
                                         "(TRACEDRAY_WORKER_REGISTER_TIMEOUT_S)")
        return [w.pid for w in stuck]

    def reclaim_orphaned_leases(self) -> list[str]:
        """Kill the workers of task leases whose lessee died; returns those lease ids.

        As in ``reap_idle_workers``, no RPC runs under the lock: (1) under it, the task
        leases and their lessees; (2) without it, one probe per distinct lessee
        (``lease_reclaim.probe_lessee``); (3) under it again, each lease the decision
        calls orphaned is reclaimed only if it still belongs to the same lessee (it may
        have been returned, and its worker leased again, meanwhile).
        """
        with self._lock:
            if self._stopped.is_set():
                return []
            held = [lr.HeldLease(w.lease_id, w.worker_id, w.pid, w.lessee)
                    for w in self.pool.workers.values()
                    if w.lessee is not None and w.state in (wp.LEASED, wp.BLOCKED)
                    and not w.kill_intended]
        if not held:
            return []
        lessees = lr.distinct_lessees(held)
        probe = functools.partial(lr.probe_lessee, local_node_id=self.node_id,
                                  dead_nodes=self._dead_nodes())
        verdicts = dict(zip(lessees, self._bg.map(probe, lessees), strict=True))
        orphaned = lr.orphaned_leases(held, verdicts)
        reclaimed = []
        with self._lock:
            for lease, verdict in orphaned:
                worker = self._leases.get(lease.lease_id)
                if (self._stopped.is_set() or worker is None or worker.kill_intended
                        or worker.worker_id != lease.worker_id or worker.lessee != lease.lessee):
                    continue
                self._reclaim(worker, lease.lessee, verdict)
                reclaimed.append(lease.lease_id)
        return reclaimed

    def _dead_nodes(self) -> set[str]:
        """The nodes the GCS declared dead, as this raylet last heard."""
        return {node_id for node_id, peer in self._peers.items() if peer.info.state == "DEAD"}

    def _local_processes(self) -> set[str]:
        """The worker ids of this node's processes not known to have exited: its
        workers, and the drivers registered here (whose deaths the driver watch tells)."""
        with self._lock:
            return ({w.worker_id for w in self.pool.workers.values() if w.state != wp.DEAD}
                    | set(self._drivers))

    def _reclaim(self, worker: wp.WorkerProcess, lessee: Address, verdict: lr.Verdict) -> None:
        """Kill a leased worker whose lessee died (the caller holds the lock); its exit
        releases the lease's resources (``_mark_dead``) and grants waiting requests."""
        who = _lessee_name(lessee)
        self._reclaimed += 1
        log.warning("lease.reclaimed", lease_id=worker.lease_id, worker_id=worker.worker_id,
                    worker_pid=worker.pid, lessee_pid=lessee.pid, lessee_ip=lessee.ip,
                    lessee_worker_id=lessee.worker_id, lessee_node_id=lessee.node_id,
                    why=verdict.why, reclaimed_total=self._reclaimed)
        self.kill_worker(worker.worker_id, force=True, reason=f"{wp.STOP_LESSEE_DIED}: {who}",
                         meaning=f"killed by the raylet: the process holding its lease died "
                                 f"({who}; {verdict.why})")

    def _stop_abandoned(self, worker: wp.WorkerProcess) -> None:
        """Kill a worker given back while it still runs tasks of its lessee, which is
        shutting down (the caller holds the lock). Nobody will read their results, and
        the next lessee would wait behind them: as Ray kills the workers of a finished
        job. Its exit releases the lease, as for a reclaimed one."""
        lessee = worker.lessee or Address("", "", 0)
        who = _lessee_name(lessee)
        log.info("lease.returned_running", lease_id=worker.lease_id, worker_id=worker.worker_id,
                 worker_pid=worker.pid, lessee_pid=lessee.pid,
                 lessee_worker_id=lessee.worker_id)
        self.kill_worker(worker.worker_id, force=True, reason=f"{wp.STOP_LESSEE_LEFT}: {who}",
                         meaning=f"killed by the raylet: the process holding its lease shut "
                                 f"down while it still ran that process's tasks ({who})")

    def reap_idle_workers(self) -> list[str]:
        """Stop the idle task workers ``wp.workers_to_reap`` picks; returns their ids.

        Three steps, so that no RPC runs under the lock: (1) under the lock, the idle
        workers that could go; (2) without it, ask each what it still holds that others
        need (objects, submitted tasks: see worker/exit_blockers.py); (3) under the lock
        again, decide with fresh state and stop the chosen ones before releasing it.
        A worker leased (and maybe idle again) since step 1 has another ``idle_since``
        and counts as busy, so an answer about an earlier idle spell is never used.
        """
        threshold = self.idle_worker_timeout_s
        with self._lock:
            if self._stopped.is_set():
                return []
            idle = self.pool.idle_task_workers()
            now = time.monotonic()
            spells = {(w.worker_id, w.idle_since) for w in idle}
            self._ask_again_at = {k: t for k, t in self._ask_again_at.items() if k in spells}
            if self.pool.live_task_workers() <= self.worker_soft_limit:
                return []
            probes = [(w, self.pool.address_of(self.pool.workers[w.worker_id]))
                      for w in wp.idle_longer_than(idle, now, threshold)
                      if self._ask_again_at.get((w.worker_id, w.idle_since), 0.0) <= now]
        if not probes:
            return []
        answers = dict(zip([w for w, _ in probes],
                           self._bg.map(_exit_blockers, [a for _, a in probes]), strict=True))
        with self._lock:
            if self._stopped.is_set():
                return []
            now = time.monotonic()
            idle = wp.with_answers(self.pool.idle_task_workers(), answers)
            live = self.pool.live_task_workers()
            chosen = wp.workers_to_reap(idle, live, self.worker_soft_limit, now, threshold)
            for worker_id in chosen:
                worker = self.pool.workers[worker_id]
                idle_s = now - worker.idle_since
                self.pool.stop_idle(worker, f"reaped as idle by the raylet: idle {idle_s:.1f}s "
                                    f"with {live} task workers, soft limit "
                                    f"{self.worker_soft_limit}")
                log.info("worker.reap", worker_id=worker_id, worker_pid=worker.pid,
                         idle_s=round(idle_s, 3), live_workers=live,
                         soft_limit=self.worker_soft_limit,
                         reaped_total=self.pool.statistics().reaped_total)
                live -= 1
            kept = {w: r for w, r in answers.items() if r != []}
            for w in kept:
                self._ask_again_at[(w.worker_id, w.idle_since)] = now + max(threshold, 1.0)
        for w, reasons in kept.items():
            log.debug("worker.reap_skipped", worker_id=w.worker_id,
                      reasons=reasons if reasons is not None else ["did not answer"])
        return chosen

    # --- worker exits
    def _on_worker_exit(self, worker: wp.WorkerProcess) -> None:
        self._mark_dead(worker)  # first: no new lease may go to a dead worker
        slot = read_slot(self.session_dir / "workers" / f"{worker.worker_id}.slot")
        attributes: dict[str, Any] = {
            A.WORKER_ID: worker.worker_id, A.WORKER_PID: worker.pid, A.NODE_ID: self.node_id,
            A.EXIT_CODE: worker.exit_code, A.EXIT_SIGNAL: worker.exit_signal,
            A.EXIT_MEANING: worker.exit_meaning, **wp.exit_memory_attributes(worker)}
        if slot.get("task_id"):
            attributes[A.TASK_ID] = slot["task_id"]
            attributes[A.TASK_ATTEMPT] = int(slot.get("attempt", 0))
            attributes[A.TASK_FUNCTION] = slot.get("function", "")
            attributes.update(wp.attempt_start_attributes(slot))
        if worker.actor_id:
            attributes[A.ACTOR_ID] = worker.actor_id.hex()
        reason = worker.stop_reason or (wp.STOP_SHUTDOWN if self._stopped.is_set() else "")
        if reason:
            attributes[A.EXIT_REASON] = reason
        unexpected = not worker.kill_intended and not self._stopped.is_set()
        if telemetry.enabled():
            span = telemetry.start_span("worker.exit", attributes,
                                        parent=trace_context.parent_from_slot(slot.get("trace")))
            if unexpected and (worker.exit_signal or worker.exit_code):
                telemetry.record_error(span, RaySystemError(
                    f"worker pid {worker.pid} died: {worker.exit_signal or worker.exit_code}: "
                    f"{worker.exit_meaning}"))
            span.end()
        level = log.warning if unexpected else log.info
        level("worker.exit", worker_id=worker.worker_id, worker_pid=worker.pid,
              exit_code=worker.exit_code, signal=worker.exit_signal, meaning=worker.exit_meaning,
              reason=reason or "unexpected", running_task=slot.get("task_id", ""),
              **wp.exit_memory_fields(worker))
        if worker.port:
            rpc.drop_channel(self.pool.address_of(worker).target)  # the reaper's probe channel
        if wp.exit_concerns_the_gcs(worker) and not self._stopped.is_set():
            self._bg.submit(self._report_actor_death, worker)
        if not self._stopped.is_set():
            self.frees.owner_gone(od.after_worker_exit(
                self.pool.address_of(worker), worker.exit_code, worker.exit_meaning))

    def _mark_dead(self, worker: wp.WorkerProcess) -> None:
        with self._lock:
            if worker.lease_id:
                self._leases.pop(worker.lease_id, None)
                held = worker.resources if worker.state != wp.BLOCKED else _without_cpu(
                    worker.resources)
                rs.release(self.available, held)
                worker.lease_id = ""
                worker.lessee = None
            worker.state = wp.DEAD
            self._exits.setdefault(worker.worker_id, threading.Event()).set()
            if not self._stopped.is_set():
                self._dispatch()

    def _report_actor_death(self, worker: wp.WorkerProcess) -> None:
        try:
            self.gcs.report_worker_death(gcs_pb2.WorkerDeath(
                node_id=self.node_id, worker_id=worker.worker_id, actor_id=worker.actor_id,
                exit_code=worker.exit_code, signal=worker.exit_signal,
                meaning=worker.exit_meaning, intended=worker.kill_intended))
        except RaySystemError as exc:
            log.error("actor.death_report_failed", error=str(exc))

    def worker_exit_info(self, worker_id: str, timeout_s: float) -> raylet_pb2.WorkerExitInfo:
        with self._lock:
            event = self._exits.setdefault(worker_id, threading.Event())
        if not event.wait(timeout_s):
            return raylet_pb2.WorkerExitInfo(exited=False)
        worker = self.pool.workers.get(worker_id)
        if worker is None:
            return raylet_pb2.WorkerExitInfo(exited=False)
        return raylet_pb2.WorkerExitInfo(exited=True, exit_code=worker.exit_code,
                                         signal=worker.exit_signal, meaning=worker.exit_meaning,
                                         node_memory_percent=worker.node_memory_percent or 0.0,
                                         pid=worker.pid)

    def kill_worker(self, worker_id: str, force: bool, *, reason: str = "",
                    meaning: str = "") -> None:
        """Stop a worker on purpose. ``reason`` (its exit's stop reason) and ``meaning``
        (what its exit meant) are set before the signal, so that the exit handler, which
        may run at once, records why the raylet killed it."""
        worker = self.pool.workers.get(worker_id)
        if worker is None:
            return
        if reason:
            worker.stop_reason = reason
        if meaning:
            worker.exit_meaning = meaning
        if worker.process.poll() is not None:
            return
        worker.kill_intended = True
        worker.stop_reason = worker.stop_reason or wp.STOP_KILLED
        if force:
            worker.process.kill()
        else:
            worker.process.terminate()

    # --- objects
    def locate(self, request: raylet_pb2.LocateObjectRequest) -> raylet_pb2.LocateObjectReply:
        object_hex = request.object_id.hex()
        if not self.store.contains(object_hex) and request.HasField("from_raylet"):
            source = Address.from_proto(request.from_raylet)
            try:
                if self.transfers.run(object_hex, lambda: self._pull(request.object_id, source)):
                    log.info("object.transfer_shared", object_id=object_hex,
                             from_node=source.node_id)
            except RaySystemError as exc:
                # The holder is gone or lost the object: the owner decides whether it can
                # be rebuilt (lineage), so say exactly what failed.
                return raylet_pb2.LocateObjectReply(
                    found=False, error=f"the pull from node {source.node_id[:12]} "
                    f"({source.target}) failed: {exc}")
        if not self.store.contains(object_hex):
            refused = self.store.refusal(object_hex)
            return raylet_pb2.LocateObjectReply(
                found=False, error=f"its seal was refused: {refused}" if refused
                else f"not in the store of node {self.node_id[:12]}")
        location = self.store.ensure_local(object_hex)
        return raylet_pb2.LocateObjectReply(found=True, path=str(location.path),
                                            spilled=location.kind == "spilled", size=location.size)

    def seal(self, request: raylet_pb2.SealObjectRequest) -> raylet_pb2.SealObjectReply:
        """Take over a file a local writer made (gRPC's SealObject and the seal channel)."""
        owner = (Address.from_proto(request.owner_address)
                 if request.HasField("owner_address") else None)
        try:
            self.store.seal(request.object_id.hex(), request.size, owner=request.owner,
                            call_site=request.call_site, owner_address=owner)
        except ObjectStoreFullError as exc:
            used, capacity = self.store.usage()
            return raylet_pb2.SealObjectReply(ok=False, error=str(exc), store_used=used,
                                              store_capacity=capacity)
        used, capacity = self.store.usage()
        return raylet_pb2.SealObjectReply(ok=True, store_used=used, store_capacity=capacity)

    def _pull(self, object_id: bytes, source: Address) -> None:
        """Copy an object from another node's store into this one (``transfers`` makes
        concurrent pulls of one object share this call). The bytes come over the
        holder's data path when it offers one, else in the gRPC stream."""
        started = time.monotonic()
        with telemetry.span("object.transfer", {A.OBJECT_ID: object_id.hex(),
                                                A.TRANSFER_FROM_NODE: source.node_id,
                                                A.TRANSFER_TO_NODE: self.node_id}) as span:
            client = RayletClient(source.target)
            chunks = client.pull_object(object_id, self.node_id, self.address.to_proto(),
                                        data_path=True)
            first = next(chunks)
            for _ in chunks:  # a data-path offer is the stream's only message
                pass
            total = first.total_size
            # The copy goes with its owner, as the primary does.
            owner = Address.from_proto(first.owner) if first.HasField("owner") else None
            receipt = _Receipt(owner.worker_id if owner is not None else "", owner,
                               first.call_site)
            streams = 0
            if first.data_port:
                streams = self._pull_data_path(object_id, source, first.data_port, total,
                                               receipt)
            if not streams:
                chunks = client.pull_object(object_id, self.node_id, self.address.to_proto())
                first = next(chunks)

                def data() -> Any:
                    yield first.data
                    for chunk in chunks:
                        yield chunk.data

                self.store.receive(object_id.hex(), total, data(), owner=receipt.owner,
                                   owner_address=receipt.owner_address,
                                   call_site=receipt.call_site)
            span.set_attribute(A.TRANSFER_BYTES, total)
            span.set_attribute(A.TRANSFER_STREAMS, streams)
        self.frees.after_pull(object_id.hex())
        log.info("object.transfer", object_id=object_id.hex(), bytes=total,
                 from_node=source.node_id, streams=streams,
                 duration_s=round(time.monotonic() - started, 6))

    def _pull_data_path(self, object_id: bytes, source: Address, port: int, total: int,
                        receipt: _Receipt) -> int:
        """Receive the object over the holder's data path; returns the connections used,
        0 when the port cannot be reached (the caller falls back to the gRPC stream)."""
        try:
            first = object_data.connect(source.ip, port)
        except OSError as exc:
            log.warning("object.data_path_unreachable", object_id=object_id.hex(),
                        from_node=source.node_id, address=f"{source.ip}:{port}", error=str(exc))
            return 0
        used = [0]

        def fill(fd: int) -> None:
            used[0] = object_data.fetch(first, source.ip, port, object_id, total, fd)

        try:
            self.store.receive_into(object_id.hex(), total, fill, owner=receipt.owner,
                                    owner_address=receipt.owner_address,
                                    call_site=receipt.call_site)
        finally:
            first.close()  # fetch closed it unless it never ran (already stored)
        return used[0] or 1

    def node_stats(self, request: raylet_pb2.GetNodeStatsRequest) -> raylet_pb2.NodeStats:
        stats = self.store.statistics()
        host_use = _host_use()  # /proc reads, outside the lock
        with self._lock:
            reply = raylet_pb2.NodeStats(
                node_id=self.node_id, ip=self.ip, pid=os.getpid(), resources_total=self.total,
                resources_available=self.available, store_used=stats.used,
                store_capacity=stats.capacity, num_objects=stats.num_objects,
                spilled_bytes=stats.spilled_bytes, spilled_count=stats.spilled_count,
                restored_bytes=stats.restored_bytes, restored_count=stats.restored_count,
                pending_leases=self._queued(), infeasible_leases=self._infeasible(),
                leases_reclaimed=self._reclaimed, session_dir=str(self.session_dir),
                freed_count=stats.freed_count, freed_bytes=stats.freed_bytes,
                freed_by_reason=stats.freed_by_reason, store_pool_bytes=stats.pool.bytes,
                store_pool_files=stats.pool.files, store_pool_reused=stats.pool.reused_total)
            reply.host_cpu_percent, reply.host_memory_percent = host_use
            for worker in self.pool.workers.values():
                reply.workers.add(worker_id=worker.worker_id, pid=worker.pid, state=worker.state,
                                  actor_id=worker.actor_id.hex(), exit_code=worker.exit_code,
                                  exit_signal=worker.exit_signal, exit_meaning=worker.exit_meaning,
                                  started_at=worker.started_at, ended_at=worker.ended_at)
            targets = [self.pool.address_of(w) for w in self.pool.workers.values()
                       if w.state not in (wp.DEAD, wp.STARTING, wp.STOPPING)]
            targets += self._drivers.values()
        if request.include_objects:
            for info in self.store.objects():
                reply.objects.add(object_id=bytes.fromhex(info.object_id), size=info.size,
                                  owner=info.owner, call_site=info.call_site,
                                  spilled=info.spilled, pinned=info.pinned, primary=info.primary)
        if request.include_references:
            for table in self._bg.map(_reference_table, targets):
                if table is not None:
                    reply.reference_tables.append(table)
        return reply


    def dump_stacks(self, request: debug_pb2.DumpStacksRequest) -> debug_pb2.NodeStackDumps:
        """The stacks of this node's workers (and drivers, if asked), asked outside the lock."""
        with self._lock:
            targets = [sd.Target(w.worker_id, w.pid, "worker", w.state,
                                 self.pool.address_of(w) if w.port else None, w.actor_id.hex())
                       for w in self.pool.workers.values() if w.state not in (wp.DEAD,)]
            if request.include_drivers:
                targets += [sd.Target(a.worker_id, a.pid, "driver", "DRIVER", a)
                            for a in self._drivers.values() if a.port]
        return sd.dump_node(self.node_id, self.ip, targets, request)


def _host_use() -> tuple[float, float]:
    """The machine's CPU use since the previous call and its memory use, in percent."""
    import psutil

    try:
        return psutil.cpu_percent(interval=None), psutil.virtual_memory().percent
    except (OSError, RuntimeError):
        return 0.0, 0.0


def _reference_table(address: Address) -> bytes | None:
    try:
        stub = core_worker_pb2_grpc.CoreWorkerServiceStub(rpc.channel(address.target))
        table = stub.GetReferenceTable(core_worker_pb2.GetReferenceTableRequest(), timeout=5)
        return bytes(table.SerializeToString())
    except grpc.RpcError:
        return None


def _exit_blockers(address: Address) -> list[str] | None:
    """What an idle worker still holds that others need (empty: nothing); None when it
    does not answer, which keeps it (it may be busy in a way we cannot see)."""
    try:
        stub = core_worker_pb2_grpc.CoreWorkerServiceStub(rpc.channel(address.target))
        reply = stub.GetExitBlockers(core_worker_pb2.GetExitBlockersRequest(), timeout=2)
        return list(reply.reasons)
    except grpc.RpcError:
        return None


def _without_cpu(resources: dict[str, float]) -> dict[str, float]:
    return {k: v for k, v in resources.items() if k != "CPU"}


def _survive(check: Callable[[], object], failure_event: str) -> None:
    """Run one of the reaper thread's checks; an error is logged, and the thread goes on
    (it must survive anything: it is the one that frees stuck workers and leases)."""
    try:
        check()
    except Exception as exc:  # noqa: BLE001 - see above
        log.error(failure_event, error=repr(exc))


def _clock_skew() -> float:
    """The testing clock skew (node_health.TESTING_CLOCK_SKEW_S); a typo in this test
    hook is logged and ignored, never a reason for the heartbeats to stop."""
    try:
        return node_health.TESTING_CLOCK_SKEW_S.get()
    except ConfigError as exc:
        log.error("node.clock_skew_invalid", error=str(exc))
        return 0.0


def _lessee_name(lessee: Address) -> str:
    return f"pid {lessee.pid} at {lessee.ip}:{lessee.port}, worker id {lessee.worker_id}"


def _lessee_of(request: raylet_pb2.LeaseRequest) -> Address | None:
    return Address.from_proto(request.requester) if request.HasField("requester") else None


class _Servicer(raylet_pb2_grpc.RayletServiceServicer):
    def __init__(self, raylet: Raylet) -> None:
        self._r = raylet

    def RequestWorkerLease(self, request: Any, context: Any) -> Any:
        reply = self._r.request_lease(request,
                                      on_requester_gone=functools.partial(_when_gone, context))
        if reply.status == raylet_pb2.LeaseReply.GRANTED and not context.is_active():
            # The requester went away while it waited (it exited, or gave up): nobody
            # will use this worker nor return it. It ran nothing for it: back to idle.
            log.info("lease.abandoned", lease_id=reply.lease_id,
                     requester_pid=request.requester.pid, worker_pid=reply.worker.pid)
            self._r.return_worker(reply.lease_id, failed=False)
        return reply

    def ReturnWorker(self, request: Any, context: Any) -> Any:
        self._r.return_worker(request.lease_id, request.worker_failed, request.disconnect)
        return common_pb2.Empty()

    def WithdrawLeaseRequests(self, request: Any, context: Any) -> Any:
        withdrawn = self._r.withdraw_requests_of(request.requester_worker_id,
                                                 request.request_ids)
        return raylet_pb2.WithdrawLeaseRequestsReply(withdrawn=withdrawn)

    def RegisterWorker(self, request: Any, context: Any) -> Any:
        raylet = self._r
        if request.is_driver:
            raylet.register_driver(request.worker_id, request.port, request.pid, request.job_id)
        else:
            try:
                raylet.register_worker(request.worker_id, request.port, request.task_port)
            except RaySystemError as exc:
                context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        return raylet_pb2.RegisterWorkerReply(node_id=raylet.node_id,
                                              session_dir=str(raylet.session_dir),
                                              object_path_prefix=raylet.object_path_prefix,
                                              ip=raylet.ip)

    def NotifyBlocked(self, request: Any, context: Any) -> Any:
        self._r.notify_blocked(request.worker_id, request.blocked)
        return common_pb2.Empty()

    def SealObject(self, request: Any, context: Any) -> Any:
        return self._r.seal(request)

    def LocateObject(self, request: Any, context: Any) -> Any:
        return self._r.locate(request)

    def FreeObjects(self, request: Any, context: Any) -> Any:
        self._r.frees.free([oid.hex() for oid in request.object_ids],
                           request.reason or FREE_RELEASED)
        return common_pb2.Empty()

    def OwnerExiting(self, request: Any, context: Any) -> Any:
        self._r.frees.owner_gone(od.exited(Address.from_proto(request.owner), "it shut down"))
        return common_pb2.Empty()

    def PullObject(self, request: Any, context: Any) -> Any:
        store = self._r.store
        object_hex = request.object_id.hex()
        info = store.describe(object_hex)
        if info is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"object {object_hex} is not on this node")
            return
        if request.HasField("to_raylet"):  # a free of the object here is passed on to it
            self._r.frees.copy_holders.add(object_hex, Address.from_proto(request.to_raylet))
        first = raylet_pb2.ObjectChunk(total_size=info.size, call_site=info.call_site)
        if info.owner_address is not None:
            first.owner.CopyFrom(info.owner_address.to_proto())
        if request.data_path and info.size > 0:  # the puller reads the bytes there
            first.data_port = self._r.object_data.port
            yield first
            return
        for index, chunk in enumerate(store.read_chunks(object_hex)):
            if index == 0:
                first.data = bytes(chunk)
                yield first
            else:
                yield raylet_pb2.ObjectChunk(total_size=info.size, data=bytes(chunk))

    def GetWorkerExit(self, request: Any, context: Any) -> Any:
        return self._r.worker_exit_info(request.worker_id, request.timeout_s)

    def GetNodeStats(self, request: Any, context: Any) -> Any:
        return self._r.node_stats(request)

    def KillWorker(self, request: Any, context: Any) -> Any:
        self._r.kill_worker(request.worker_id, request.force)
        return common_pb2.Empty()

    def StartActorWorker(self, request: Any, context: Any) -> Any:
        lease = raylet_pb2.LeaseRequest(resources=request.resources, job_id=request.job_id,
                                        grant_or_reject=True, is_actor=True)
        # The GCS that asks may die while its request waits (it is restarted): the request
        # is withdrawn then, as a task lease's, or its worker would go to nobody.
        reply = self._r.request_lease(lease, actor_id=request.actor_id,
                                      on_requester_gone=functools.partial(_when_gone, context))
        if reply.status == raylet_pb2.LeaseReply.GRANTED and not context.is_active():
            self._r.discard_abandoned_actor_grant(reply.lease_id)
        return reply

    def WithdrawActorCreation(self, request: Any, context: Any) -> Any:
        withdrawn, killed = self._r.withdraw_actor_creation(request.actor_id, request.cause)
        return raylet_pb2.WithdrawActorCreationReply(withdrawn=withdrawn,
                                                     killed_worker_pids=killed)

    def ReleaseUnusedActorWorkers(self, request: Any, context: Any) -> Any:
        withdrawn, killed = self._r.release_unused_actor_workers(set(request.keep_worker_ids),
                                                                 request.cause)
        return raylet_pb2.WithdrawActorCreationReply(withdrawn=withdrawn,
                                                     killed_worker_pids=killed)

    def ShutdownNode(self, request: Any, context: Any) -> Any:
        threading.Thread(target=_shutdown_and_exit, args=(self._r,), daemon=True).start()
        return common_pb2.Empty()

    def ReadSessionFiles(self, request: Any, context: Any) -> Any:
        folder = self._r.session_dir / request.subdir
        if request.subdir not in ("logs", "traces") or not folder.is_dir():
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"no such folder {request.subdir!r}")
        if request.subdir == "traces":
            sync_traces_dir(folder)  # every span that had ended, not only what the agent did
        if request.keys:  # the matching lines alone, found through the node's index
            if request.subdir == "logs":
                sync_lines_dir(folder)  # every line that was logged
            by_file: dict[str, list[bytes]] = {}
            for name, line in matching_lines(self._r.session_dir, request.subdir,
                                             request.keys):
                by_file.setdefault(name, []).append(line)
            for name, lines in by_file.items():
                yield raylet_pb2.FileChunk(name=name, data=b"\n".join(lines) + b"\n")
            return
        # Rotated parts too, uncompressed (telemetry/line_file.py), oldest first; a
        # damaged part is left out and the caller told which.
        for path in line_files(folder):
            try:
                # Without the NUL tail a live writer reserves (telemetry/append_file.py).
                data = read_data(path)
            except FileNotFoundError:
                continue  # dropped by retention since it was listed
            except SessionFileCorruptError as exc:
                context.abort(grpc.StatusCode.DATA_LOSS, str(exc))
            yield raylet_pb2.FileChunk(name=path.name, data=data)


    def DumpNodeStacks(self, request: Any, context: Any) -> Any:
        return self._r.dump_stacks(request)


def _when_gone(context: Any, withdraw: Callable[[], None]) -> None:
    """Call ``withdraw`` when the RPC of ``context`` ends (its requester went away)."""
    if not context.add_callback(withdraw):
        withdraw()  # the RPC is over already


def _shutdown_and_exit(raylet: Raylet, code: int = 0) -> None:
    time.sleep(0.05)
    raylet.shutdown()
    logs.record_process_exit(code)
    telemetry.shutdown()
    os._exit(code)
