"""A caller's worker leases (the submitter side of a raylet's lease) and the pure
choices made over them: which lease a task is pipelined onto, which pipelined tasks a
free worker steals back, and which node a task prefers for its inputs.

A lease goes IDLE (granted, or its last result in) <-> BUSY (tasks in flight), then
RETURNED (idle for a linger, or the submitter closes) or LOST (its connection broke:
its worker is dead or unreachable). Tasks on a lease are keyed by task id in the order
they were sent: the first one runs, the others wait behind it on the worker.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tracedray import telemetry
from tracedray.core.address import Address
from tracedray.core.protocol.connection import WorkerConnection
from tracedray.core.protocol.raylet_client import RayletClient
from tracedray.core.worker.pending_task import PendingTask
from tracedray.telemetry import attributes as A
from tracedray.telemetry import instruments

# Tasks in flight per leased worker. More than one hides the stream round trip for
# short tasks, and the deeper the pipeline, the more results each wake-up of the
# caller's stream reader handles (one lock hold, one write of the next tasks): at 4, a
# burst of empty tasks came back ~2.5 results a batch, and the driver spent ~125 µs of
# CPU per task; at 8, ~100 µs (16 saved no more; benchmarks/results/
# submit-driver-2026-11-27c). Tasks queued behind a running one keep asking for leases
# of their own, and a worker that becomes free steals them back, so long tasks never
# wait behind each other while a CPU is idle; a worker that blocks in get() hands back
# the ones it has not started.
PIPELINE_DEPTH = 8
# Locality matters once inputs are big enough that moving them costs more than a lease
# (benchmarks/locality.py: a 1 MB pull between nodes costs ~10 ms, a lease ~1 ms).
LOCALITY_MIN_BYTES = 512 << 10


class LeaseState(enum.Enum):
    IDLE = "idle"  # held, no task in flight (since ``idle_since``)
    BUSY = "busy"  # tasks in flight on its worker
    RETURNED = "returned"  # given back to its raylet
    LOST = "lost"  # its connection broke; given back as failed


@dataclass(eq=False)  # one lease: compared by identity
class Lease:
    lease_id: str
    key: str
    raylet: RayletClient
    worker: Address
    conn: WorkerConnection
    decision: dict[str, object]
    state: LeaseState = LeaseState.IDLE
    inflight: dict[bytes, PendingTask] = field(default_factory=dict)
    idle_since: float = field(default_factory=time.monotonic)
    dispatched: int = 0
    # The dispatch span attributes this lease's tasks share, built once. The reason is a
    # reused lease's; the lease's first dispatch names the raylet's decision instead.
    reuse_attributes: dict[str, Any] = field(default_factory=dict)
    reuse_shape: telemetry.SpanShape | None = None  # the same, as a span shape

    def reused_attributes(self) -> dict[str, Any]:
        if not self.reuse_attributes:
            worker = self.worker
            self.reuse_attributes = {
                A.NODE_ID: worker.node_id, A.NODE_IP: worker.ip, A.WORKER_ID: worker.worker_id,
                A.WORKER_PID: worker.pid, A.LEASE_ID: self.lease_id,
                A.SCHEDULING_REASON: f"reused lease {self.lease_id[:8]} on node "
                                     f"{worker.node_id[:12]}"}
        return self.reuse_attributes

    def reused_dispatch_shape(self) -> telemetry.SpanShape:
        """The shape of the ``task.dispatch`` spans of this lease's later tasks: their
        task id and attempt, then :meth:`reused_attributes`."""
        shape = self.reuse_shape
        if shape is None:
            shape = self.reuse_shape = instruments.dispatch_shape(self.reused_attributes())
        return shape


class LeaseReturn(NamedTuple):
    """A lease given back to its raylet. ``failed``: its connection broke. ``running``:
    its worker still runs tasks of this process, which nobody will wait for (the
    submitter closes), so the raylet kills it instead of leasing it to the next process
    behind them."""
    raylet: RayletClient
    lease_id: str
    failed: bool
    running: bool = False


def resource_shape(resources: Mapping[str, float]) -> str:
    """The resource part of a scheduling key: ``CPU=1,GPU=0.5``."""
    return ",".join(f"{k}={v:g}" for k, v in sorted(resources.items()))


def scheduling_key(resources: Mapping[str, float], preferred_node: str) -> str:
    return f"{resource_shape(resources)}@{preferred_node}"


def least_loaded(leases: list[Lease]) -> Lease | None:
    """The lease to pipeline the next task onto, if any has room."""
    best = min(leases, key=lambda le: len(le.inflight), default=None)
    if best is None or len(best.inflight) >= PIPELINE_DEPTH:
        return None
    return best


def waiting_behind(lease: Lease) -> list[PendingTask]:
    """Tasks pipelined on ``lease`` that have not been asked back yet (likely unstarted)."""
    tasks = list(lease.inflight.values())[1:]
    return [task for task in tasks if not task.steal_requested]


def steal_plan(leases: list[Lease]) -> list[PendingTask]:
    """One pipelined task (the newest of the busiest lease) per idle lease."""
    idle = sum(1 for le in leases if not le.inflight)
    backlog = sorted((waiting_behind(le) for le in leases), key=len, reverse=True)
    plan: list[PendingTask] = []
    while idle and backlog and backlog[0]:
        plan.append(backlog[0].pop())
        idle -= 1
        backlog.sort(key=len, reverse=True)
    return plan


def preferred_node(input_bytes_by_node: dict[str, int]) -> str:
    """The node holding the most input bytes, if that is worth moving the task for."""
    if not input_bytes_by_node:
        return ""
    node, size = max(input_bytes_by_node.items(), key=lambda item: item[1])
    return node if size >= LOCALITY_MIN_BYTES else ""


def started_orphans(orphans: list[PendingTask], running_task_hex: str,
                    running_attempt: int) -> int:
    """How many of a dead worker's ``orphans`` (in the order they were sent) may have
    started; those after them never did. A worker runs a caller's tasks one at a time, in
    that order, so when its flight recorder named the task it died in, the tasks sent
    before it ran too (their results were lost with it) and the ones after never began.
    Otherwise (``""``: its raylet could not tell, or it died between tasks) every one may
    have."""
    if running_task_hex:
        for index, task in enumerate(orphans):
            if task.spec.attempt == running_attempt and task.task_id.hex() == running_task_hex:
                return index + 1
    return len(orphans)
