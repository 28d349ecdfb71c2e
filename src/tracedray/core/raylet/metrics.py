"""A raylet's metrics: its node's numbers as ``GetNodeStats`` and ``statistics()`` give
them to ``tracedray status`` (read at scrape time, nothing counted twice), the RPC
latencies of its server, and the snapshots of the node's other processes (drivers',
workers' and the telemetry agent's).

This module imports prometheus-client: the raylet imports it only when its endpoint
loads, on the first scrape (``raylet/main.py``, ``metrics/deferred.py``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from tracedray._proto.v1 import raylet_pb2
from tracedray.core.process import process_alive
from tracedray.core.raylet import exit_meaning
from tracedray.metrics import rpc_latency
from tracedray.metrics.exposition import counter, gauge, to_prometheus
from tracedray.metrics.rpc_latency import RpcLatency
from tracedray.metrics.snapshot import METRICS_DIR, SnapshotReader

if TYPE_CHECKING:
    from tracedray.core.raylet.server import Raylet

OOM, SIGKILL, ERROR, NORMAL = "OOM", "SIGKILL", "error", "normal"
EXIT_REASONS = (OOM, SIGKILL, ERROR, NORMAL)
LIVE_WORKER_STATES = ("STARTING", "IDLE", "LEASED", "BLOCKED", "ACTOR", "STOPPING")


def exit_reason(exit_code: int, exit_signal: str, exit_cause: str, intended: bool) -> str:
    """How a worker's exit counts in ``tracedray_worker_exits_total`` (pure): killed by
    the OOM killer, by another SIGKILL, ended in an error (a non-zero code, a signal it
    did not ask for), or normally (code 0, or stopped by its raylet on purpose)."""
    if exit_cause in (exit_meaning.CGROUP_OOM, exit_meaning.NODE_OOM):
        return OOM
    if exit_signal == "SIGKILL":
        return SIGKILL
    if (exit_code == 0 and not exit_signal) or (intended and exit_signal == "SIGTERM"):
        return NORMAL
    return ERROR


class NodeCollector:
    def __init__(self, raylet: Raylet, reader: SnapshotReader,
                 rpc_latency: RpcLatency | None) -> None:
        self._raylet = raylet
        self._reader = reader
        self._rpc = rpc_latency

    def collect(self) -> Iterator[Metric]:
        raylet = self._raylet
        node = {"node_id": raylet.node_id}
        labels = ["node_id"]
        ids = [raylet.node_id]
        stats = raylet.reports.node_stats(raylet_pb2.GetNodeStatsRequest())
        statistics = raylet.statistics()

        yield gauge("tracedray_object_store_used_bytes", "Bytes of objects in the node's "
                     "object store (shared memory)", labels, ids, stats.store_used)
        yield gauge("tracedray_object_store_capacity_bytes", "The object store's capacity",
                     labels, ids, stats.store_capacity)
        yield gauge("tracedray_object_store_objects", "Objects in the node's object store",
                     labels, ids, stats.num_objects)
        yield counter("tracedray_spilled_bytes", "Bytes spilled to disk", labels, ids,
                       stats.spilled_bytes)
        yield counter("tracedray_spilled_objects", "Objects spilled to disk", labels, ids,
                       stats.spilled_count)
        yield counter("tracedray_restored_bytes", "Bytes restored from spill files", labels,
                       ids, stats.restored_bytes)
        yield counter("tracedray_restored_objects", "Objects restored from spill files",
                       labels, ids, stats.restored_count)
        freed = CounterMetricFamily("tracedray_objects_freed", "Objects freed from the store, "
                                    "by reason", labels=[*labels, "reason"])
        for reason, count in sorted(stats.freed_by_reason.items()):
            freed.add_metric([*ids, reason], count)
        yield freed
        workers = GaugeMetricFamily("tracedray_workers", "The node's worker processes by "
                                    "state", labels=[*labels, "state"])
        states = Counter(w.state for w in stats.workers)
        for state in LIVE_WORKER_STATES:
            workers.add_metric([*ids, state], states.get(state, 0))
        yield workers
        exits = CounterMetricFamily("tracedray_worker_exits", "Worker processes that exited, "
                                    "by reason (OOM, SIGKILL, error, normal)",
                                    labels=[*labels, "reason"])
        reasons = Counter(exit_reason(w.exit_code, w.exit_signal, w.exit_cause,
                                      w.kill_intended)
                          for w in raylet.pool.exited())
        for reason in EXIT_REASONS:
            exits.add_metric([*ids, reason], reasons.get(reason, 0))
        yield exits
        resources = GaugeMetricFamily("tracedray_resources", "The node's resources, total "
                                      "and available now", labels=[*labels, "resource", "state"])
        for name, amount in sorted(stats.resources_total.items()):
            resources.add_metric([*ids, name, "total"], amount)
            resources.add_metric([*ids, name, "available"],
                                 stats.resources_available.get(name, 0.0))
        yield resources
        yield gauge("tracedray_lease_requests_pending", "Lease requests waiting for "
                     "resources this node has", labels, ids, stats.pending_leases)
        yield gauge("tracedray_lease_requests_infeasible", "Lease requests no node can "
                     "satisfy", labels, ids, stats.infeasible_leases)
        yield counter("tracedray_leases_granted", "Worker leases granted", labels, ids,
                       statistics.leases_granted)
        yield counter("tracedray_leases_reclaimed", "Task leases taken back because their "
                       "holder died", labels, ids, stats.leases_reclaimed)
        yield counter("tracedray_workers_started", "Worker processes started", labels, ids,
                       statistics.workers.started_total)
        yield counter("tracedray_node_heartbeat_late", "Heartbeats to the GCS sent late (the "
                       "heartbeat thread did not run on time)", labels, ids,
                       statistics.heartbeats.late_total)
        yield counter("tracedray_node_heartbeat_failed", "Heartbeats the GCS did not answer",
                       labels, ids, statistics.heartbeats.failed_total)
        yield from to_prometheus(self._reader.read().families.values(), node)
        if self._rpc is not None:
            yield from to_prometheus([self._rpc.family()], {**node, "component": "raylet"})


def collector(raylet: Raylet) -> NodeCollector:
    """The collector of ``raylet``'s metrics."""
    reader = SnapshotReader(raylet.session_dir / METRICS_DIR / raylet.node_id, process_alive)
    return NodeCollector(raylet, reader, rpc_latency.installed())

