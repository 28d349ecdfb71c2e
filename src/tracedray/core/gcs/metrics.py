"""The GCS's metrics: tasks by state and function from its task table, actors by state
and class, nodes, jobs, its tables' hot sets and its flushes, and its RPC latencies.

Counting tasks reads the whole task table (memory and storage). At scrape time that is
the one source ``tracedray list tasks`` reads too, but on a large table it is not free:
a count is reused until ``RESCAN_COST_FACTOR`` times its own duration has passed
(:func:`rescan_due`), so the GCS spends at most a few percent of its time counting
whatever the scrape interval.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client.core import GaugeMetricFamily, Metric

from tracedray._proto.v1 import gcs_pb2
from tracedray.metrics import rpc_latency, serve
from tracedray.metrics.discovery import DiscoveryWriter, Target
from tracedray.metrics.exposition import MetricsServer, counter, gauge, to_prometheus
from tracedray.metrics.rpc_latency import RpcLatency

if TYPE_CHECKING:
    from tracedray.core.gcs.server import Gcs

RESCAN_COST_FACTOR = 20.0
MIN_RESCAN_S = 1.0


def rescan_due(now: float, last_at: float | None, last_duration_s: float) -> bool:
    """Whether the task counts are read again now (pure): always the first time, then no
    sooner than ``MIN_RESCAN_S`` nor ``RESCAN_COST_FACTOR`` times the last read's cost."""
    if last_at is None:
        return True
    return now - last_at >= max(MIN_RESCAN_S, RESCAN_COST_FACTOR * last_duration_s)


def count_tasks(records: Iterator[bytes]) -> Counter[tuple[str, str]]:
    """(state, function name) -> tasks, from serialized task records (pure)."""
    counts: Counter[tuple[str, str]] = Counter()
    for raw in records:
        record = gcs_pb2.TaskRecord.FromString(raw)
        counts[(record.state or "PENDING", record.function_name)] += 1
    return counts


@dataclass(frozen=True)
class TaskCounts:
    counts: Counter[tuple[str, str]]
    duration_s: float


class GcsCollector:
    def __init__(self, gcs: Gcs, rpc_latency: RpcLatency | None) -> None:
        self._gcs = gcs
        self._rpc = rpc_latency
        self._lock = threading.Lock()
        self._tasks: TaskCounts | None = None
        self._tasks_at: float | None = None

    def task_counts(self) -> TaskCounts:
        with self._lock:  # concurrent scrapes share one read
            now = time.monotonic()
            duration = self._tasks.duration_s if self._tasks is not None else 0.0
            if self._tasks is None or rescan_due(now, self._tasks_at, duration):
                started = time.monotonic()
                counts = count_tasks(raw for _, raw in self._gcs.tables["tasks"].scan())
                self._tasks = TaskCounts(counts, time.monotonic() - started)
                self._tasks_at = now
            return self._tasks

    def node_id(self) -> str:
        """The head node's: the GCS runs there (empty until the head raylet registers)."""
        heads = [n.info.node_id for n in self._gcs.node_list() if n.info.is_head]
        return heads[-1] if heads else ""

    def collect(self) -> Iterator[Metric]:
        gcs = self._gcs
        node_id = self.node_id()
        labels, ids = ["node_id"], [node_id]
        tasks = GaugeMetricFamily("tracedray_tasks", "Tasks by state and function, from the "
                                  "GCS's task table", labels=[*labels, "state", "name"])
        counts = self.task_counts()
        for (state, name), count in sorted(counts.counts.items()):
            tasks.add_metric([*ids, state, name], count)
        yield tasks
        yield gauge("tracedray_gcs_task_count_seconds", "How long the last count of the "
                     "task table took", labels, ids, counts.duration_s)
        actors = GaugeMetricFamily("tracedray_actors", "Actors by state and class",
                                   labels=[*labels, "state", "class_name"])
        by_state = Counter((a.state, a.class_name) for a in gcs.actors.list())
        for (state, class_name), count in sorted(by_state.items()):
            actors.add_metric([*ids, state, class_name], count)
        yield actors
        statistics = gcs.statistics()
        nodes = GaugeMetricFamily("tracedray_nodes", "Nodes by state", labels=[*labels, "state"])
        nodes.add_metric([*ids, "ALIVE"], statistics.nodes_alive)
        nodes.add_metric([*ids, "DEAD"], statistics.nodes_dead)
        yield nodes
        jobs = GaugeMetricFamily("tracedray_jobs", "Jobs by state", labels=[*labels, "state"])
        job_states = Counter(gcs_pb2.JobInfo.FromString(raw).state
                             for _, raw in gcs.tables["jobs"].scan())
        for state, count in sorted(job_states.items()):
            jobs.add_metric([*ids, state], count)
        yield jobs
        hot = GaugeMetricFamily("tracedray_gcs_hot_entries", "Entries of each GCS table held "
                                "in memory", labels=[*labels, "table"])
        hot_bytes = GaugeMetricFamily("tracedray_gcs_hot_bytes", "Bytes of each GCS table held "
                                      "in memory", labels=[*labels, "table"])
        for name, table in sorted(gcs.tables.items()):
            table_stats = table.statistics()
            hot.add_metric([*ids, name], table_stats.hot_entries)
            hot_bytes.add_metric([*ids, name], table_stats.hot_bytes)
        yield hot
        yield hot_bytes
        flusher = gcs.flusher.statistics()
        yield gauge("tracedray_gcs_flush_seconds", "How long the GCS's last flush of finished "
                     "entries to its storage took", labels, ids, flusher.last_duration_s)
        yield counter("tracedray_gcs_flushes", "Flushes of the GCS's tables to storage",
                       labels, ids, flusher.flushes)
        yield counter("tracedray_gcs_flush_failures", "Flushes that failed (retried)",
                       labels, ids, flusher.failures)
        yield counter("tracedray_gcs_flushed_entries", "Entries moved from memory to storage",
                       labels, ids, flusher.entries_flushed)
        yield counter("tracedray_gcs_watch_stalls", "Times the GCS's node watch woke late",
                       labels, ids, statistics.watch_stalls_total)
        if self._rpc is not None:
            yield from to_prometheus([self._rpc.family()],
                                     {"node_id": node_id, "component": "gcs"})


def attach(server: MetricsServer, gcs: Gcs, session_dir: Path) -> DiscoveryWriter:
    """Serve the GCS's metrics on ``server``, and keep ``prometheus_sd.json`` up to date."""
    collector = GcsCollector(gcs, rpc_latency.installed())
    writer = DiscoveryWriter(session_dir, gcs.node_list,
                             lambda: Target(server.host, server.port, collector.node_id(),
                                            "gcs"))
    writer.update()
    writer.start()
    serve.attach(server, "gcs", collector.collect, node_id="", session_name=session_dir.name,
                 discovery=str(writer.path))
    return writer
