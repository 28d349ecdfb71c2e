"""The raylet: one per node. Assembles the node's parts and runs its loops: leasing
(``lease_service.py`` around the ``leasing.py`` state machine), the object store and
the object RPCs (``objects.py``), the driver watch (``drivers.py``), worker exits
(``worker_exits.py``), the node's reports (``node_stats.py``), heartbeats to the GCS, the
view of the other nodes, and the reaper thread (idle workers, stuck starts, leases of
dead lessees, dead drivers, owners' objects). The RPCs are split by concern into
``lease_rpcs.py``, ``object_rpcs.py`` and ``node_rpcs.py``."""

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

from tracedray import config, logs, telemetry
from tracedray._proto.v1 import gcs_pb2, raylet_pb2_grpc
from tracedray.core import allocator, rpc
from tracedray.core.address import Address
from tracedray.core.gcs import node_health
from tracedray.core.gcs.client import GcsClient
from tracedray.core.object_store.files import store_name_prefix
from tracedray.core.object_store.store import FREE_RELEASED, ObjectStore
from tracedray.core.raylet import idle_reaping as ir
from tracedray.core.raylet import lease_reclaim as lr
from tracedray.core.raylet import worker_pool as wp
from tracedray.core.raylet.agent_process import start_agent, stop_agent
from tracedray.core.raylet.drivers import Drivers
from tracedray.core.raylet.heartbeats import Heartbeats, HeartbeatStatistics
from tracedray.core.raylet.lease_rpcs import LeaseRpcs
from tracedray.core.raylet.lease_service import LeaseService
from tracedray.core.raylet.node_rpcs import NodeRpcs
from tracedray.core.raylet.node_stats import NodeReports
from tracedray.core.raylet.object_data import ObjectDataServer
from tracedray.core.raylet.object_frees import ObjectFrees, ObjectFreeStatistics
from tracedray.core.raylet.object_rpcs import ObjectRpcs
from tracedray.core.raylet.objects import NodeObjects
from tracedray.core.raylet.seal_channel import SealChannelServer, socket_name
from tracedray.core.raylet.transfers import TransferTable
from tracedray.core.raylet.worker_exits import WorkerExits
from tracedray.core.raylet.worker_states import WorkerState
from tracedray.exceptions import ConfigError, RaySystemError
from tracedray.telemetry.cluster_events import RayletEvents

log = logs.get_logger(__name__)
_events = RayletEvents(log)
# How often the idle reaper asks the C allocator to return free memory (a trim of the
# raylet's heap takes well under a millisecond).
TRIM_INTERVAL_S = 5.0


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
        self._stopped = threading.Event()
        self.gcs = GcsClient(gcs_address)
        self.store = ObjectStore(node_id=node_id, capacity_bytes=object_store_memory,
                                 name_prefix=store_name_prefix(session_dir, node_id),
                                 spill_dir=session_dir / "spill" / node_id[:12],
                                 spilling_enabled=object_spilling,
                                 # A lookup waits for the seals already sent (seal_channel.py).
                                 settle=lambda: self.seal_channel.settle())
        self.object_path_prefix = str(self.store.object_path("00"))[:-2]
        self._server = rpc.make_server(max_workers=256)
        raylet_pb2_grpc.add_RayletServiceServicer_to_server(_Servicer(self), self._server)
        self.port = rpc.bind(self._server, listen_host, port)
        self._bg = ThreadPoolExecutor(max_workers=8, thread_name_prefix="tracedray-raylet-bg")
        self.pool = wp.WorkerPool(node_id=node_id, ip=ip, raylet_port=self.port,
                                  gcs_address=gcs_address, session_dir=session_dir,
                                  object_path_prefix=self.object_path_prefix,
                                  on_exit=lambda worker: self.exits.on_exit(worker))
        self.leasing = LeaseService(node_id=node_id, total=self.total, pool=self.pool,
                                    gcs=self.gcs, background=self._bg, stopped=self._stopped,
                                    lock=threading.RLock())
        self._peers: dict[str, gcs_pb2.NodeWithLoad] = {}
        self.heartbeats = Heartbeats(
            gcs=self.gcs, node_id=node_id, interval_s=config.HEARTBEAT_INTERVAL_S.get(),
            request=self._heartbeat_request, stopped=self._stopped,
            reregister=lambda: self.gcs.register_node(self._node_info()),
            fence=self._fence, clock_skew_s=_clock_skew())
        self.transfers = TransferTable()
        # Object bytes between nodes travel outside gRPC (object_data.py).
        self.object_data = ObjectDataServer(listen_host, self.store.open_for_transfer)
        self.frees = ObjectFrees(store=self.store, transfers=self.transfers, node_id=node_id,
                                 background=self._bg, local_alive=self._local_processes,
                                 dead_nodes=self._dead_nodes)
        self.objects = NodeObjects(node_id=node_id, address=lambda: self.address,
                                   store=self.store, transfers=self.transfers, frees=self.frees,
                                   data_port=lambda: self.object_data.port)
        # Local writers seal over a Unix socket, not gRPC (seal_channel.py).
        self.seal_channel = SealChannelServer(
            socket_name(self.object_path_prefix), self.objects.seal,
            free=lambda r: self.frees.free([oid.hex() for oid in r.object_ids],
                                           r.reason or FREE_RELEASED))
        self.drivers = Drivers(node_id=node_id, ip=ip, gcs=self.gcs, background=self._bg,
                               frees=self.frees, stopped=self._stopped)
        self.exits = WorkerExits(node_id=node_id, session_dir=session_dir, leasing=self.leasing,
                                 gcs=self.gcs, background=self._bg, frees=self.frees,
                                 stopped=self._stopped)
        self.reports = NodeReports(node_id=node_id, ip=ip, session_dir=session_dir,
                                   total=self.total, store=self.store, leasing=self.leasing,
                                   drivers=self.drivers, background=self._bg)
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
        with _events.node_start(self.node_id, self.ip) as start:
            info = self._node_info()
            self.gcs.register_node(info)
            differences = self._version_drift(info)
            if differences:
                start.version_drift(differences)
        _events.node_started(self.node_id, self.address.target, self.total,
                             self.store.statistics().capacity, differences)
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
        with self.leasing.lock:
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
        self.exit_soon(1, thread_name="tracedray-fence")

    def shutdown(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        log.info("node.stop", node_id=self.node_id)
        try:
            self.leasing.shutdown()
            self.object_data.close()
            self.seal_channel.close()
        finally:  # whatever failed above, the store's files go
            self.store.shutdown()
        self._server.stop(grace=0.5)
        if self._agent is not None:
            stop_agent(self._agent)  # after the workers: it converts what they left

    def exit_soon(self, code: int, thread_name: str | None = None) -> None:
        """Shut the node down and end the process, on a thread of its own (so that the
        RPC that asked for it is answered first)."""
        threading.Thread(target=_shutdown_and_exit, args=(self, code), daemon=True,
                         name=thread_name).start()

    def statistics(self) -> RayletStatistics:
        with self.leasing.lock:
            book = self.leasing.book.statistics()
            return RayletStatistics(
                pending_leases=book.pending_leases, infeasible_leases=book.infeasible_leases,
                leases_granted=book.leases_granted, leases_reclaimed=book.leases_reclaimed,
                workers=self.leasing.worker_statistics(),
                resources_available=book.resources_available,
                heartbeats=self.heartbeats.statistics(), frees=self.frees.statistics(),
                freed_by_reason=self.store.statistics().freed_by_reason)

    # --- idle workers beyond the soft limit, and leases whose lessee died
    def _idle_reaper_loop(self) -> None:
        # Several checks per timeout, so a worker goes soon after its time is up;
        # at most 1 s apart, at least 50 ms (each check is a pass over the pool).
        interval = min(1.0, max(0.05, self.idle_worker_timeout_s / 4))
        reclaim_at = trim_at = 0.0
        while not self._stopped.wait(interval):
            if time.monotonic() >= trim_at:  # what a burst freed goes back to the system
                trim_at = time.monotonic() + TRIM_INTERVAL_S
                allocator.release_free_memory()
            # Pool files unused for TRACEDRAY_OBJECT_POOL_IDLE_S: an idle node's
            # shared memory goes back to the system (object_store/pool.py).
            _survive(self.store.release_idle_pool, "objects.pool_release_failed")
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
            _survive(self.drivers.check, "driver.check_failed")
            _survive(self.frees.check_owners, "objects.owner_check_failed")

    def _dead_nodes(self) -> set[str]:
        """The nodes the GCS declared dead, as this raylet last heard."""
        return {node_id for node_id, peer in self._peers.items() if peer.info.state == "DEAD"}

    def _local_processes(self) -> set[str]:
        """The worker ids of this node's processes not known to have exited: its
        workers, and the drivers registered here (whose deaths the driver watch tells)."""
        with self.leasing.lock:
            workers = {w.worker_id for w in self.leasing.book.workers.values()
                       if w.state is not WorkerState.DEAD}
        return workers | self.drivers.worker_ids()


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


class _Servicer(LeaseRpcs, ObjectRpcs, NodeRpcs, raylet_pb2_grpc.RayletServiceServicer):
    def __init__(self, raylet: Raylet) -> None:
        self._r = raylet


def _shutdown_and_exit(raylet: Raylet, code: int = 0) -> None:
    time.sleep(0.05)
    raylet.shutdown()
    logs.record_process_exit(code)
    telemetry.shutdown()
    os._exit(code)
