"""What happens to the raylet's lease book (events) and what it asks the raylet to do
(actions). Both are plain frozen records: ``LeaseBook.handle(event) -> list[Action]``."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from tracedray.core.address import Address
from tracedray.core.log_line import LogLine
from tracedray.core.raylet.scheduler import Decision

# --- events


@dataclass(frozen=True)
class LeaseAsk:
    """One lease request as the book sees it."""

    resources: Mapping[str, float]
    requester: Address | None = None  # the lessee of a task lease; None for an actor's
    requester_worker_id: str = ""
    requester_pid: int = 0
    request_id: bytes = b""
    task_id: bytes = b""
    input_bytes_by_node: Mapping[str, int] = field(default_factory=dict)
    may_spill: bool = True
    actor_id: bytes = b""
    job_id: bytes = b""
    is_actor: bool = False


@dataclass(frozen=True)
class Peer:
    """Another node, as the last GetNodes said."""

    node_id: str
    alive: bool
    total: Mapping[str, float]
    available: Mapping[str, float]
    pending_leases: int
    raylet: Address


@dataclass(frozen=True)
class LeaseRequested:
    ticket: int  # names the request in the answers
    ask: LeaseAsk


@dataclass(frozen=True)
class RequesterGone:
    ticket: int


@dataclass(frozen=True)
class RequestsWithdrawn:
    """A requester withdrew requests by id (none named: all of its requests)."""

    requester_worker_id: str
    request_ids: frozenset[bytes]
    now: float


@dataclass(frozen=True)
class ActorCreationWithdrawn:
    actor_id: bytes
    cause: str


@dataclass(frozen=True)
class UnusedActorWorkersReleased:
    """A restarted GCS: the actor requests waiting here are all the GCS before's
    (withdrawn); of the workers granted to actors it uses those in ``in_use`` and adopts
    one of each actor in ``adopt``; the others are discarded."""
    in_use: frozenset[str]
    cause: str
    # Actors whose creation the restarted GCS finishes on a worker granted here: one
    # worker of each is kept (ActorWorkerAdopted).
    adopt: frozenset[bytes] = frozenset()


@dataclass(frozen=True)
class AbandonedActorGrant:
    lease_id: str


@dataclass(frozen=True)
class PeersSeen:
    peers: tuple[Peer, ...] | None  # None: the view could not be refreshed


@dataclass(frozen=True)
class WorkersPrestarted:
    count: int


@dataclass(frozen=True)
class WorkerSpawned:
    worker_id: str
    pid: int


@dataclass(frozen=True)
class WorkerSpawnFailed:
    worker_id: str


@dataclass(frozen=True)
class WorkerRegistered:
    worker_id: str
    now: float


@dataclass(frozen=True)
class WorkerBlocked:
    worker_id: str
    blocked: bool


@dataclass(frozen=True)
class WorkerExited:
    worker_id: str


@dataclass(frozen=True)
class LeaseReturned:
    lease_id: str
    disconnect: bool  # its lessee shuts down: a worker still running its tasks is killed
    now: float
    # Its lessee's connection to the worker broke: the worker is dead or unreachable, and
    # the raylet may not have seen its exit yet. It stays leased (never granted again)
    # until its exit, and is killed if that is not seen within a grace.
    failed: bool = False


@dataclass(frozen=True)
class LeaseReclaimed:
    """The lessee of a task lease died (``lease_reclaim.py`` decided)."""

    lease_id: str
    worker_id: str
    lessee: Address
    why: str


@dataclass(frozen=True)
class KillRequested:
    worker_id: str
    force: bool
    reason: str = ""
    meaning: str = ""


@dataclass(frozen=True)
class IdleWorkerReaped:
    worker_id: str
    meaning: str


@dataclass(frozen=True)
class NodeStopping:
    pass


Event = (LeaseRequested | RequesterGone | RequestsWithdrawn | ActorCreationWithdrawn
         | UnusedActorWorkersReleased | AbandonedActorGrant | PeersSeen | WorkersPrestarted
         | WorkerSpawned | WorkerSpawnFailed | WorkerRegistered | WorkerBlocked | WorkerExited
         | LeaseReturned | LeaseReclaimed | KillRequested | IdleWorkerReaped | NodeStopping)

# --- actions


class Outcome(enum.Enum):
    GRANTED = "granted"
    SPILLBACK = "spillback"
    WITHDRAWN = "withdrawn"  # answered TIMEOUT with a reason: nobody needs it, or the node stops


@dataclass(frozen=True)
class Answer:
    ticket: int
    outcome: Outcome
    reason: str = ""  # a withdrawal's
    decision: Decision | None = None  # a grant's or spillback's
    lease_id: str = ""
    worker_id: str = ""
    spillback: Address | None = None


@dataclass(frozen=True)
class StartWorker:
    worker_id: str


@dataclass(frozen=True)
class KillWorker:
    worker_id: str
    force: bool
    reason: str
    meaning: str


@dataclass(frozen=True)
class StopIdleWorker:
    worker_id: str
    meaning: str


@dataclass(frozen=True)
class StopUnlessExited:
    """A worker its lessee lost the connection to: if its exit is not seen within a
    grace, kill it for ``reason``; an exit seen first keeps its own meaning (a SIGKILL
    from elsewhere stays one)."""
    worker_id: str
    reason: str
    meaning: str


@dataclass(frozen=True)
class ReportInfeasible:
    ask: LeaseAsk
    reason: str


Log = LogLine  # a line the shell writes after the lock (core/log_line.py)


@dataclass(frozen=True)
class ActorWorkerAdopted:
    """Kept for the restarted GCS, which finishes the actor's creation on it."""
    actor_id: bytes
    worker_id: str


Action = (Answer | StartWorker | KillWorker | StopIdleWorker | StopUnlessExited
          | ReportInfeasible | ActorWorkerAdopted | Log)
