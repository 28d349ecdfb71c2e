"""What the raylet's lease book knows of each worker: its state and its lease.

A worker goes STARTING -> IDLE (registered) -> LEASED or ACTOR (granted) -> IDLE
(returned), LEASED <-> BLOCKED (its task waits in ``get`` and lends its CPU out), IDLE ->
STOPPING (reaped), and any state -> DEAD (its process exited). ``killing`` marks one the
raylet is stopping on purpose: it is never granted again and a return of its lease is
ignored (its exit releases the lease).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from tracedray.core.address import Address


class WorkerState(enum.StrEnum):
    STARTING = "STARTING"
    IDLE = "IDLE"
    LEASED = "LEASED"
    BLOCKED = "BLOCKED"
    ACTOR = "ACTOR"
    STOPPING = "STOPPING"
    DEAD = "DEAD"


# A node's task workers that count against its soft limit (actor workers do not).
LIVE_TASK_STATES = frozenset({WorkerState.STARTING, WorkerState.IDLE, WorkerState.LEASED,
                              WorkerState.BLOCKED})


@dataclass
class WorkerSlot:
    worker_id: str
    state: WorkerState = WorkerState.STARTING
    pid: int = 0  # 0 until its process is spawned
    lease_id: str = ""
    # Who holds its task lease; None when idle, and for an actor's lease, whose lifetime
    # the GCS decides.
    lessee: Address | None = None
    resources: dict[str, float] = field(default_factory=dict)
    actor_id: bytes = b""
    idle_since: float = 0.0  # monotonic time it last became IDLE
    killing: bool = False

    def held(self) -> dict[str, float]:
        """What its lease holds of the node now: all of it, less the CPU a BLOCKED one lent."""
        if self.state is WorkerState.BLOCKED:
            return {k: v for k, v in self.resources.items() if k != "CPU"}
        return self.resources


# Why the raylet meant a worker to exit (its exit's stop reason; "" = it did not). A
# reclaimed lease's reason goes on to name the lessee that died; an abandoned one's, the
# lessee that shut down while the worker still ran its tasks; a dead actor's, why the GCS
# declared the actor dead while its creation was under way; an unused actor worker's, why
# the GCS does not use it (a restarted GCS did not know it, or the GCS that asked for it
# went away before the grant).
STOP_IDLE, STOP_SHUTDOWN, STOP_KILLED = "idle", "shutdown", "killed"
STOP_LESSEE_DIED = "lessee died"
STOP_LESSEE_LEFT = "lessee left its tasks running"
STOP_LESSEE_LOST_IT = "lessee lost its connection"
STOP_ACTOR_DEAD = "actor dead"
STOP_ACTOR_UNUSED = "actor worker unused"
STOP_NOT_REGISTERED = "did not register"
# Actor workers stopped because the GCS does not want them: it is not told of their exit
# (it knows; and a restarted GCS creating the actor again would count it as a failure).
STOPS_FOR_THE_GCS = (STOP_ACTOR_DEAD, STOP_ACTOR_UNUSED)


def exit_concerns_the_gcs(actor_id: bytes, stop_reason: str) -> bool:
    """Whether the GCS is told of a worker's exit: an actor's worker, unless it was
    stopped because the GCS does not want it."""
    return bool(actor_id) and not stop_reason.startswith(STOPS_FOR_THE_GCS)
