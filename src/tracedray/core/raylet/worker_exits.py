"""A worker's exit, recorded by the raylet (its parent): the ``worker.exit`` span and log
line with its exit code, signal, meaning, memory facts and the task it ran (from its
flight-recorder slot), and the report to the GCS when it hosted an actor."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from tracedray import logs, telemetry
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
from tracedray.telemetry import attributes as A

log = logs.get_logger(__name__)


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
        self.leasing.worker_exited(worker.worker_id)  # first: no new lease may go to it
        actor_id = self.leasing.actor_of(worker.worker_id)
        slot = read_slot(self.session_dir / "workers" / f"{worker.worker_id}.slot")
        attributes: dict[str, Any] = {
            A.WORKER_ID: worker.worker_id, A.WORKER_PID: worker.pid, A.NODE_ID: self.node_id,
            A.EXIT_CODE: worker.exit_code, A.EXIT_SIGNAL: worker.exit_signal,
            A.EXIT_MEANING: worker.exit_meaning, **exit_memory_attributes(worker)}
        if slot.get("task_id"):
            attributes[A.TASK_ID] = slot["task_id"]
            attributes[A.TASK_ATTEMPT] = int(slot.get("attempt", 0))
            attributes[A.TASK_FUNCTION] = slot.get("function", "")
            attributes.update(attempt_start_attributes(slot))
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
              **exit_memory_fields(worker))
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


def exit_memory_attributes(worker: wp.WorkerProcess) -> dict[str, Any]:
    """The memory facts of a worker's exit, as worker.exit span attributes."""
    return {_ATTRIBUTE_OF[name]: value for name, value in exit_memory_fields(worker).items()}


def exit_memory_fields(worker: wp.WorkerProcess) -> dict[str, Any]:
    """The memory facts of a worker's exit that are known, as log fields."""
    memory = worker.memory or MemoryEvidence()
    found: dict[str, Any] = {"cause": worker.exit_cause, "cgroup": memory.cgroup,
                             "memory_limit": memory.limit_bytes,
                             "peak_rss": memory.peak_rss_bytes,
                             "node_memory_percent": worker.node_memory_percent}
    return {name: value for name, value in found.items() if value not in (None, "")}


_ATTRIBUTE_OF = {"cause": A.EXIT_CAUSE, "cgroup": A.EXIT_CGROUP,
                 "memory_limit": A.EXIT_MEMORY_LIMIT, "peak_rss": A.EXIT_PEAK_RSS,
                 "node_memory_percent": A.NODE_MEMORY_PERCENT}


def attempt_start_attributes(slot: Mapping[str, Any]) -> dict[str, Any]:
    """When the attempt in a dead worker's flight recorder slot started (worker.exit)."""
    started = slot.get("started_at")
    if isinstance(started, int | float) and not isinstance(started, bool) and started > 0:
        return {A.TASK_STARTED: int(started * 1e9)}
    return {}
