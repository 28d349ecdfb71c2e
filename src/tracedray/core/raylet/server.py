"""The raylet: one per node. Leases workers, runs the node's object store,
heartbeats to the GCS, reaps idle workers beyond its soft limit, and records every
worker exit."""

from __future__ import annotations

import functools
import os
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from tracedray import config, logs, telemetry
from tracedray.core import rpc, trace_context
from tracedray.core.address import Address
from tracedray.core.gcs import node_health
from tracedray.core.gcs.client import GcsClient
from tracedray.core.object_store.store import FREE_RELEASED, ObjectStore
from tracedray.core.protocol.flight_recorder import read_slot
from tracedray.core.protocol.raylet_client import RayletClient
from tracedray.core.raylet import driver_watch as dw
from tracedray.core.raylet import idle_reaping as ir
from tracedray.core.raylet import lease_reclaim as lr
from tracedray.core.raylet import object_data
from tracedray.core.raylet import owner_death as od
from tracedray.core.raylet import stack_dumps as sd
from tracedray.core.raylet import worker_pool as wp
from tracedray.core.raylet import worker_states as ws
from tracedray.core.raylet.heartbeats import Heartbeats, HeartbeatStatistics
from tracedray.core.raylet.lease_service import LeaseService
from tracedray.core.raylet.object_data import ObjectDataServer
from tracedray.core.raylet.object_frees import ObjectFrees, ObjectFreeStatistics
from tracedray.core.raylet.seal_channel import SealChannelServer, socket_name
from tracedray.core.raylet.telemetry_agent import start_agent, stop_agent
from tracedray.core.raylet.transfers import TransferTable
from tracedray.core.raylet.worker_states import WorkerState
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
        self._lock = threading.RLock()
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
        self._bg = ThreadPoolExecutor(max_workers=8, thread_name_prefix="tracedray-raylet-bg")
        self.leasing = LeaseService(node_id=node_id, total=self.total, pool=self.pool,
                                    gcs=self.gcs, background=self._bg, stopped=self._stopped,
                                    lock=self._lock)
        self._drivers: dict[str, Address] = {}
        # Drivers with a job, watched until they die (driver_watch.py), by worker id;
        # and how many times in a row each one's port refused, for those watched by port.
        self._watched: dict[str, dw.WatchedDriver] = {}
        self._refusals: dict[str, int] = {}
        self._peers: dict[str, gcs_pb2.NodeWithLoad] = {}
        self.heartbeats = Heartbeats(
            gcs=self.gcs, node_id=node_id, interval_s=config.HEARTBEAT_INTERVAL_S.get(),
            request=self._heartbeat_request, stopped=self._stopped,
            reregister=lambda: self.gcs.register_node(self._node_info()),
            fence=self._fence, clock_skew_s=_clock_skew())
        self.transfers = TransferTable()
        # Object bytes between nodes travel outside gRPC (object_data.py).
        self.object_data = ObjectDataServer(listen_host, self.store.open_for_transfer)
        # Local writers seal over a Unix socket, not gRPC (seal_channel.py).
        self.seal_channel = SealChannelServer(
            socket_name(self.object_path_prefix), self.seal,
            free=lambda r: self.frees.free([oid.hex() for oid in r.object_ids],
                                           r.reason or FREE_RELEASED))
        self.frees = ObjectFrees(store=self.store, transfers=self.transfers, node_id=node_id,
                                 background=self._bg, local_alive=self._local_processes,
                                 dead_nodes=self._dead_nodes)
        self._agent: subprocess.Popen[bytes] | None = None
        # Read here so that a malformed value fails the node's start, naming the variable.
        self.idle_worker_timeout_s = config.IDLE_WORKER_TIMEOUT_S.get()
        self.register_timeout_s = config.WORKER_REGISTER_TIMEOUT_S.get()
        self.worker_soft_limit = ir.soft_limit(self.total.get("CPU", 0.0),
                                               config.IDLE_WORKER_SOFT_LIMIT.get())

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
        self.leasing.prestart(prestart_workers)
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
            book = self.leasing.book
            return gcs_pb2.HeartbeatRequest(
                node_id=self.node_id, resources_available=book.available,
                store_used=self.store.statistics().used,
                pending_leases=book.queued(), infeasible_leases=book.infeasible())

    def _peer_view_loop(self) -> None:
        """Refresh the view of the other nodes every heartbeat interval, off the
        heartbeats' thread (heartbeats.py): a slow GetNodes never delays a heartbeat."""
        interval = config.HEARTBEAT_INTERVAL_S.get()
        while not self._stopped.wait(interval):
            nodes: list[gcs_pb2.NodeWithLoad] | None = None
            try:
                nodes = self.gcs.get_nodes()
                self._peers = {n.info.node_id: n for n in nodes}
            except RaySystemError as exc:
                log.warning("peer_view.failed", error=str(exc))
            self.leasing.peers_seen(nodes)

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
        self.leasing.shutdown()
        self.object_data.close()
        self.seal_channel.close()
        self.store.shutdown()
        self._server.stop(grace=0.5)
        if self._agent is not None:
            stop_agent(self._agent)  # after the workers: it converts what they left

    def statistics(self) -> RayletStatistics:
        with self._lock:
            book = self.leasing.book.statistics()
            return RayletStatistics(
                pending_leases=book.pending_leases, infeasible_leases=book.infeasible_leases,
                leases_granted=book.leases_granted, leases_reclaimed=book.leases_reclaimed,
                workers=self.leasing.worker_statistics(),
                resources_available=book.resources_available,
                heartbeats=self.heartbeats.statistics(), frees=self.frees.statistics(),
                freed_by_reason=self.store.statistics().freed_by_reason)

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
            _survive(functools.partial(self.leasing.reap_idle_workers,
                                       self.idle_worker_timeout_s, self.worker_soft_limit),
                     "worker.reap_failed")
            _survive(functools.partial(self.leasing.kill_unregistered_workers,
                                       self.register_timeout_s), "worker.register_check_failed")
            if time.monotonic() < reclaim_at:
                continue
            reclaim_at = time.monotonic() + lr.RECLAIM_INTERVAL_S
            _survive(lambda: self.leasing.reclaim_orphaned_leases(self._dead_nodes()),
                     "lease.reclaim_failed")
            _survive(self.check_drivers, "driver.check_failed")
            _survive(self.frees.check_owners, "objects.owner_check_failed")

    def _dead_nodes(self) -> set[str]:
        """The nodes the GCS declared dead, as this raylet last heard."""
        return {node_id for node_id, peer in self._peers.items() if peer.info.state == "DEAD"}

    def _local_processes(self) -> set[str]:
        """The worker ids of this node's processes not known to have exited: its
        workers, and the drivers registered here (whose deaths the driver watch tells)."""
        with self._lock:
            return ({w.worker_id for w in self.leasing.book.workers.values()
                     if w.state is not WorkerState.DEAD} | set(self._drivers))

    # --- worker exits
    def _on_worker_exit(self, worker: wp.WorkerProcess) -> None:
        self.leasing.worker_exited(worker.worker_id)  # first: no new lease may go to it
        actor_id = self.leasing.actor_of(worker.worker_id)
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
        if actor_id:
            attributes[A.ACTOR_ID] = actor_id.hex()
        reason = worker.stop_reason or (ws.STOP_SHUTDOWN if self._stopped.is_set() else "")
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
        if ws.exit_concerns_the_gcs(actor_id, worker.stop_reason) and not self._stopped.is_set():
            self._bg.submit(self._report_actor_death, worker, actor_id)
        if not self._stopped.is_set():
            self.frees.owner_gone(od.after_worker_exit(
                self.pool.address_of(worker), worker.exit_code, worker.exit_meaning))

    def _report_actor_death(self, worker: wp.WorkerProcess, actor_id: bytes) -> None:
        try:
            self.gcs.report_worker_death(gcs_pb2.WorkerDeath(
                node_id=self.node_id, worker_id=worker.worker_id, actor_id=actor_id,
                exit_code=worker.exit_code, signal=worker.exit_signal,
                meaning=worker.exit_meaning, intended=worker.kill_intended))
        except RaySystemError as exc:
            log.error("actor.death_report_failed", error=str(exc))

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
            book = self.leasing.book.statistics()
            reply = raylet_pb2.NodeStats(
                node_id=self.node_id, ip=self.ip, pid=os.getpid(), resources_total=self.total,
                resources_available=book.resources_available, store_used=stats.used,
                store_capacity=stats.capacity, num_objects=stats.num_objects,
                spilled_bytes=stats.spilled_bytes, spilled_count=stats.spilled_count,
                restored_bytes=stats.restored_bytes, restored_count=stats.restored_count,
                pending_leases=book.pending_leases, infeasible_leases=book.infeasible_leases,
                leases_reclaimed=book.leases_reclaimed, session_dir=str(self.session_dir),
                freed_count=stats.freed_count, freed_bytes=stats.freed_bytes,
                freed_by_reason=stats.freed_by_reason, store_pool_bytes=stats.pool.bytes,
                store_pool_files=stats.pool.files, store_pool_reused=stats.pool.reused_total)
            reply.host_cpu_percent, reply.host_memory_percent = host_use
            state_of, actor_of = self.leasing.state_of, self.leasing.actor_of
            for worker in self.pool.workers.values():
                reply.workers.add(worker_id=worker.worker_id, pid=worker.pid,
                                  state=state_of(worker.worker_id).value,
                                  actor_id=actor_of(worker.worker_id).hex(),
                                  exit_code=worker.exit_code,
                                  exit_signal=worker.exit_signal, exit_meaning=worker.exit_meaning,
                                  started_at=worker.started_at, ended_at=worker.ended_at)
            targets = [self.pool.address_of(w) for w in self.pool.workers.values()
                       if state_of(w.worker_id) not in (WorkerState.DEAD, WorkerState.STARTING,
                                                        WorkerState.STOPPING)]
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
            state_of, actor_of = self.leasing.state_of, self.leasing.actor_of
            targets = [sd.Target(w.worker_id, w.pid, "worker", state_of(w.worker_id).value,
                                 self.pool.address_of(w) if w.port else None,
                                 actor_of(w.worker_id).hex())
                       for w in self.pool.workers.values()
                       if state_of(w.worker_id) is not WorkerState.DEAD]
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


class _Servicer(raylet_pb2_grpc.RayletServiceServicer):
    def __init__(self, raylet: Raylet) -> None:
        self._r = raylet

    def RequestWorkerLease(self, request: Any, context: Any) -> Any:
        reply = self._r.leasing.request_lease(request,
                                      on_requester_gone=functools.partial(_when_gone, context))
        if reply.status == raylet_pb2.LeaseReply.GRANTED and not context.is_active():
            # The requester went away while it waited (it exited, or gave up): nobody
            # will use this worker nor return it. It ran nothing for it: back to idle.
            log.info("lease.abandoned", lease_id=reply.lease_id,
                     requester_pid=request.requester.pid, worker_pid=reply.worker.pid)
            self._r.leasing.return_worker(reply.lease_id, failed=False)
        return reply

    def ReturnWorker(self, request: Any, context: Any) -> Any:
        self._r.leasing.return_worker(request.lease_id, request.worker_failed, request.disconnect)
        return common_pb2.Empty()

    def WithdrawLeaseRequests(self, request: Any, context: Any) -> Any:
        withdrawn = self._r.leasing.withdraw_requests_of(request.requester_worker_id,
                                                 request.request_ids)
        return raylet_pb2.WithdrawLeaseRequestsReply(withdrawn=withdrawn)

    def RegisterWorker(self, request: Any, context: Any) -> Any:
        raylet = self._r
        if request.is_driver:
            raylet.register_driver(request.worker_id, request.port, request.pid, request.job_id)
        else:
            try:
                raylet.leasing.register_worker(request.worker_id, request.port, request.task_port)
            except RaySystemError as exc:
                context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
        return raylet_pb2.RegisterWorkerReply(node_id=raylet.node_id,
                                              session_dir=str(raylet.session_dir),
                                              object_path_prefix=raylet.object_path_prefix,
                                              ip=raylet.ip)

    def NotifyBlocked(self, request: Any, context: Any) -> Any:
        self._r.leasing.notify_blocked(request.worker_id, request.blocked)
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
        return self._r.leasing.worker_exit_info(request.worker_id, request.timeout_s)

    def GetNodeStats(self, request: Any, context: Any) -> Any:
        return self._r.node_stats(request)

    def KillWorker(self, request: Any, context: Any) -> Any:
        self._r.leasing.kill_worker(request.worker_id, request.force)
        return common_pb2.Empty()

    def StartActorWorker(self, request: Any, context: Any) -> Any:
        lease = raylet_pb2.LeaseRequest(resources=request.resources, job_id=request.job_id,
                                        grant_or_reject=True, is_actor=True)
        # The GCS that asks may die while its request waits (it is restarted): the request
        # is withdrawn then, as a task lease's, or its worker would go to nobody.
        reply = self._r.leasing.request_lease(lease, actor_id=request.actor_id,
                                      on_requester_gone=functools.partial(_when_gone, context))
        if reply.status == raylet_pb2.LeaseReply.GRANTED and not context.is_active():
            self._r.leasing.discard_abandoned_actor_grant(reply.lease_id)
        return reply

    def WithdrawActorCreation(self, request: Any, context: Any) -> Any:
        withdrawn, killed = self._r.leasing.withdraw_actor_creation(request.actor_id, request.cause)
        return raylet_pb2.WithdrawActorCreationReply(withdrawn=withdrawn,
                                                     killed_worker_pids=killed)

    def ReleaseUnusedActorWorkers(self, request: Any, context: Any) -> Any:
        withdrawn, killed = self._r.leasing.release_unused_actor_workers(
            set(request.keep_worker_ids), request.cause)
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
