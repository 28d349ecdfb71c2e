"""A worker's exit, recorded by the raylet (its parent): the ``worker.exit`` span and log
line with its exit code, signal, meaning, memory facts and the task it ran (from its
flight-recorder slot), and the report to the GCS when it hosted an actor."""

from __future__ import annotations

import threading
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from tracedray import logs
from tracedray._proto.v1 import gcs_pb2
from tracedray.core import rpc, trace_context
from tracedray.core.gcs.client import GcsClient
from tracedray.core.protocol.flight_recorder import read_slot
from tracedray.core.raylet import owner_death as od
from tracedray.core.raylet import worker_pool as wp
from tracedray.core.raylet import worker_states as ws
from tracedray.core.raylet.exit_meaning import MemoryEvidence
from tracedray.core.raylet.lease_service import LeaseService
from tracedray.core.raylet.object_frees import ObjectFrees
from tracedray.exceptions import RaySystemError
from tracedray.telemetry.cluster_events import RayletEvents

log = logs.get_logger(__name__)
_events = RayletEvents(log)


class WorkerExits:
    def __init__(self, *, node_id: str, session_dir: Path, leasing: LeaseService,
                 gcs: GcsClient, background: Executor, frees: ObjectFrees,
                 stopped: threading.Event) -> None:
        self.node_id = node_id
        self.session_dir = session_dir
        self.leasing = leasing
        self.pool = leasing.pool
        self.gcs = gcs
        self._bg = background
        self.frees = frees
        self._stopped = stopped

    def on_exit(self, worker: wp.WorkerProcess) -> None:
        """The pool saw ``worker`` exit (on its reaper thread)."""
        # Read before its exit is announced: callers asking why it exited learn which
        # of their tasks it was running (get_worker_exit).
        slot = read_slot(self.session_dir / "workers" / f"{worker.worker_id}.slot")
        worker.running_task_id = str(slot.get("task_id", ""))
        worker.running_attempt = int(slot.get("attempt", 0))
        self.leasing.worker_exited(worker.worker_id)  # first: no new lease may go to it
        actor_id = self.leasing.actor_of(worker.worker_id)
        reason = worker.stop_reason or (ws.STOP_SHUTDOWN if self._stopped.is_set() else "")
        _events.worker_exited(
            worker_id=worker.worker_id, worker_pid=worker.pid, node_id=self.node_id,
            exit_code=worker.exit_code, exit_signal=worker.exit_signal,
            meaning=worker.exit_meaning, memory_fields=exit_memory_fields(worker), slot=slot,
            actor_id=actor_id, reason=reason,
            unexpected=not worker.kill_intended and not self._stopped.is_set(),
            parent=trace_context.parent_from_slot(slot.get("trace")))
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


def exit_memory_fields(worker: wp.WorkerProcess) -> dict[str, Any]:
    """The memory facts of a worker's exit that are known, as log fields."""
    memory = worker.memory or MemoryEvidence()
    found: dict[str, Any] = {"cause": worker.exit_cause, "cgroup": memory.cgroup,
                             "memory_limit": memory.limit_bytes,
                             "peak_rss": memory.peak_rss_bytes,
                             "node_memory_percent": worker.node_memory_percent}
    return {name: value for name, value in found.items() if value not in (None, "")}


