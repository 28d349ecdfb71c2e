"""What the node reports about itself when asked (``tracedray status``, ``list``,
``memory``, ``stack``, the node's metrics): its resources, store, workers and drivers,
and on request their reference tables or stacks, asked outside the lock."""

from __future__ import annotations

import os
from concurrent.futures import Executor
from pathlib import Path

import grpc

from tracedray._proto.v1 import core_worker_pb2, core_worker_pb2_grpc, debug_pb2, raylet_pb2
from tracedray.core import rpc
from tracedray.core.address import Address
from tracedray.core.object_store.store import ObjectStore
from tracedray.core.raylet import stack_dumps as sd
from tracedray.core.raylet.drivers import Drivers
from tracedray.core.raylet.lease_service import LeaseService
from tracedray.core.raylet.worker_states import WorkerState


class NodeReports:
    def __init__(self, *, node_id: str, ip: str, session_dir: Path, total: dict[str, float],
                 store: ObjectStore, leasing: LeaseService, drivers: Drivers,
                 background: Executor) -> None:
        self.node_id = node_id
        self.ip = ip
        self.session_dir = session_dir
        self.total = total
        self.store = store
        self.leasing = leasing
        self.pool = leasing.pool
        self.drivers = drivers
        self._bg = background

    def node_stats(self, request: raylet_pb2.GetNodeStatsRequest) -> raylet_pb2.NodeStats:
        stats = self.store.statistics()
        host_use = _host_use()  # /proc reads, outside the lock
        with self.leasing.lock:
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
            for worker in self.pool.snapshot():
                reply.workers.add(worker_id=worker.worker_id, pid=worker.pid,
                                  state=state_of(worker.worker_id).value,
                                  actor_id=actor_of(worker.worker_id).hex(),
                                  exit_code=worker.exit_code,
                                  exit_signal=worker.exit_signal, exit_meaning=worker.exit_meaning,
                                  started_at=worker.started_at, ended_at=worker.ended_at)
            targets = [self.pool.address_of(w) for w in self.pool.snapshot()
                       if state_of(w.worker_id) not in (WorkerState.DEAD, WorkerState.STARTING,
                                                        WorkerState.STOPPING)]
        targets += self.drivers.addresses()
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
        with self.leasing.lock:
            state_of, actor_of = self.leasing.state_of, self.leasing.actor_of
            targets = [sd.Target(w.worker_id, w.pid, "worker", state_of(w.worker_id).value,
                                 self.pool.address_of(w) if w.port else None,
                                 actor_of(w.worker_id).hex())
                       for w in self.pool.snapshot()
                       if state_of(w.worker_id) is not WorkerState.DEAD]
        if request.include_drivers:
            targets += [sd.Target(a.worker_id, a.pid, "driver", "DRIVER", a)
                        for a in self.drivers.addresses() if a.port]
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
