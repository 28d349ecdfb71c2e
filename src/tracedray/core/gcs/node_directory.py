"""The GCS's nodes: registration, heartbeats, and the watch that declares nodes dead.

Each raylet registers its node and then sends a heartbeat every interval with its load.
A thread watches the silences: a node silent past a heartbeat interval is probed, and one
silent past the death timeout (less the time the GCS itself was stalled, so a starved GCS
declares nobody dead) is declared dead (``node_health`` decides). ``on_dead`` hears of
each death, outside the lock.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from tracedray import config, logs
from tracedray._proto.v1 import gcs_pb2
from tracedray.core.environment import drift
from tracedray.core.gcs import node_health
from tracedray.core.gcs.storage import TieredTable
from tracedray.telemetry.cluster_events import GcsEvents

log = logs.get_logger(__name__)
_events = GcsEvents(log)


@dataclass(frozen=True)
class NodeStatistics:
    nodes_alive: int
    nodes_dead: int
    # Times the node watch woke late (the GCS process was starved), and for how long in
    # all: that time is left out of nodes' silence, so nodes outlive the GCS's stalls.
    watch_stalls_total: int
    watch_stalled_s_total: float
    longest_watch_stall_s: float


class NodeDirectory:
    def __init__(self, table: TieredTable, *,
                 on_dead: Callable[[gcs_pb2.NodeInfo], None]) -> None:
        self._table = table
        self._on_dead = on_dead
        self._lock = threading.RLock()
        self._nodes: dict[str, gcs_pb2.NodeWithLoad] = {}
        self._head_env: dict[str, str] = {}
        # Stretches (wall clock start, end) the node watch was stalled: node_health.
        self._stalls: deque[tuple[float, float]] = deque()
        self._stalls_total = 0
        self._stalled_s_total = 0.0
        self._longest_stall_s = 0.0
        self._stopped = threading.Event()

    def restore(self) -> int:
        """After a GCS restart: the recorded nodes, each as if it had just sent a
        heartbeat. Returns how many."""
        nodes = [gcs_pb2.NodeInfo.FromString(v) for _, v in self._table.scan()]
        now = time.time()
        with self._lock:
            for info in nodes:
                self._nodes[info.node_id] = gcs_pb2.NodeWithLoad(info=info, last_heartbeat=now)
                if info.is_head:
                    self._head_env = dict(info.environment)
        return len(nodes)

    def start(self) -> None:
        threading.Thread(target=self._watch, daemon=True, name="tracedray-node-watch").start()

    def stop(self) -> None:
        self._stopped.set()

    def all(self) -> list[gcs_pb2.NodeWithLoad]:
        with self._lock:
            return list(self._nodes.values())

    def register(self, info: gcs_pb2.NodeInfo) -> None:
        with self._lock:
            if info.is_head or not self._head_env:
                self._head_env = dict(info.environment) if info.is_head else self._head_env
            differences = drift(self._head_env, dict(info.environment)) if self._head_env else []
            info.ClearField("version_drift")
            info.version_drift.extend(differences)
            entry = gcs_pb2.NodeWithLoad(info=info, last_heartbeat=time.time())
            entry.resources_available.update(info.resources_total)
            self._nodes[info.node_id] = entry
            self._table.put(info.node_id, info.SerializeToString(), finished=False)
        if differences:
            log.warning("node.version_drift", node_id=info.node_id, differences=differences)
        log.info("node.registered", node_id=info.node_id, address=f"{info.raylet.ip}:"
                 f"{info.raylet.port}", resources=dict(info.resources_total))

    def heartbeat(self, request: gcs_pb2.HeartbeatRequest) -> gcs_pb2.HeartbeatReply:
        now = time.time()
        with self._lock:
            entry = self._nodes.get(request.node_id)
            if entry is None:
                return gcs_pb2.HeartbeatReply(gcs_time=now, unknown_node=True)
            if entry.info.state == "DEAD":
                return gcs_pb2.HeartbeatReply(gcs_time=now, declared_dead=True,
                                              death_reason=entry.info.death_reason)
            entry.last_heartbeat = now
            entry.resources_available.clear()
            entry.resources_available.update(request.resources_available)
            entry.store_used = request.store_used
            entry.pending_leases = request.pending_leases
            entry.infeasible_leases = request.infeasible_leases
            # The raylet measured it over the previous heartbeat's round trip (node_health).
            if request.has_clock_estimate:
                entry.info.clock_offset_s = request.clock_offset_s
                entry.info.clock_rtt_s = request.clock_rtt_s
        return gcs_pb2.HeartbeatReply(gcs_time=now)

    def statistics(self) -> NodeStatistics:
        with self._lock:
            states = [e.info.state for e in self._nodes.values()]
            return NodeStatistics(
                nodes_alive=states.count("ALIVE"), nodes_dead=states.count("DEAD"),
                watch_stalls_total=self._stalls_total,
                watch_stalled_s_total=self._stalled_s_total,
                longest_watch_stall_s=self._longest_stall_s)

    def _watch(self) -> None:
        timeout = config.NODE_DEATH_TIMEOUT_S.get()
        interval = config.HEARTBEAT_INTERVAL_S.get()
        period = min(0.5, interval)
        while True:
            expected = time.monotonic() + period
            if self._stopped.wait(period):
                return
            with self._lock:
                # Measured with the lock held: heartbeats wait for it too.
                now = time.time()
                self._note_stall(now, node_health.stall_after(expected, time.monotonic()),
                                 horizon_s=10 * timeout, interval_s=interval)
                late = [(e.info.node_id, e.info.raylet.ip, e.info.raylet.port,
                         e.last_heartbeat) for e in self._nodes.values()
                        if e.info.state == "ALIVE"
                        and node_health.should_probe(now - e.last_heartbeat, interval)]
                stalls = list(self._stalls)
            # Probes run outside the lock: a connect may take up to its timeout.
            verdicts: dict[str, tuple[float, str]] = {}
            for node_id, ip, port, last in late:
                silent = now - last
                stalled = node_health.stalled_within(stalls, last, now)
                # Past the timeout the probe could not change the verdict: not made.
                probe = ("" if node_health.timed_out(silent, stalled, timeout)
                         else node_health.probe_port(ip, port))
                reason = node_health.death_reason(
                    node_health.Liveness(silent, interval, timeout, probe, stalled))
                if reason:
                    verdicts[node_id] = (last, reason)
            for info in self._mark_dead(verdicts):
                _events.node_dead(info.node_id, info.raylet.ip, info.raylet.pid,
                                  info.death_reason)
                self._on_dead(info)

    def _note_stall(self, now: float, stalled_s: float, *, horizon_s: float,
                    interval_s: float) -> None:
        """Keep a stall of the node watch (the caller holds the lock), and forget those
        older than ``horizon_s``: no node is silent that long and still alive."""
        while self._stalls and self._stalls[0][1] < now - horizon_s:
            self._stalls.popleft()
        if not stalled_s:
            return
        self._stalls.append((now - stalled_s, now))
        self._stalls_total += 1
        self._stalled_s_total += stalled_s
        self._longest_stall_s = max(self._longest_stall_s, stalled_s)
        # A stall as long as a heartbeat interval may have cost nodes a heartbeat.
        (log.warning if stalled_s >= interval_s else log.debug)(
            "gcs.stalled", stalled_s=round(stalled_s, 3), stalls_total=self._stalls_total,
            why="the GCS's node watch woke late: this process was not scheduled or its "
                "lock was held; the time is left out of nodes' heartbeat silence")

    def _mark_dead(self, verdicts: dict[str, tuple[float, str]]) -> list[gcs_pb2.NodeInfo]:
        """``verdicts``: node id -> (the last heartbeat the verdict saw, why it is dead)."""
        dead = []
        with self._lock:
            for node_id, (last, reason) in verdicts.items():
                entry = self._nodes.get(node_id)
                if entry is None or entry.info.state != "ALIVE" or entry.last_heartbeat != last:
                    continue  # a heartbeat came back meanwhile: it stays alive
                entry.info.state = "DEAD"
                entry.info.end_time = time.time()
                entry.info.death_reason = reason
                self._table.put(node_id, entry.info.SerializeToString(), finished=False)
                dead.append(entry.info)
        return dead
