"""One actor's lifecycle in the GCS, as a state machine: ``handle(actor, event)`` returns
the actor after the event and the actions the GCS performs (``actor_manager``, the I/O
shell: records, placements, RPCs to raylets, log lines).

States: PENDING_CREATION → ALIVE → (RESTARTING → ALIVE)* → DEAD.

| event | from | to | actions |
|---|---|---|---|
| Registered | PENDING_CREATION | = | Save, Place |
| Recovered (a restarted GCS) | PENDING_CREATION, RESTARTING | = | Place |
| Recovered, adopted worker | PENDING_CREATION, RESTARTING | = (its worker) | ResumeCreation |
| Recovered, adopted worker | DEAD (killed meanwhile) | = | Withdraw |
| NodeChosen | living | = (placing += node) | RequestWorker |
| LeaseAnswered, granted | living | = (current worker) | RunCreation |
| LeaseAnswered, none | living | failure | a failure's |
| LeaseAnswered | DEAD | = | Withdraw if granted |
| InitEnded, returned | living, current worker | ALIVE | Save, Log |
| InitEnded, raised | living, current worker | DEAD | Save, Log, Withdraw |
| InitEnded, worker died | living, current worker | failure | a failure's; KillWorker if restarted |
| InitEnded | DEAD | = | Withdraw |
| WorkerDied | living | failure | a failure's |
| NodeDied | ALIVE or PENDING_CREATION there | failure | a failure's |
| Killed | living | DEAD if no_restart | Save, Log, KillWorker, Withdraw (each creation) |
| a failure | living, current worker | RESTARTING or DEAD | Save, Log (and Place if restarted) |

**Creation.** The GCS asks a raylet for the actor's worker (the request may wait there for
resources), pushes the creation task to it, and records the actor ALIVE once ``__init__``
returned. An actor can be declared DEAD meanwhile (its job ended, ``tracedray.kill``): a
worker started for it would stay ``ACTOR``, holding its resources, for as long as the node
runs. So its creation is withdrawn from the raylets where it is under way (the waiting
request answered, a granted worker killed), and each step looks at the state again: a
worker granted to a dead actor is withdrawn too.

**Failures, counted once.** The GCS can hear of one death twice: the creation task's
stream ends and the raylet reports the worker's death, in either order. So each failure
names the worker it is about, and the actor keeps the worker of its current incarnation
(granted for its creation, or ALIVE on it; None while it waits for one). Only a failure
of that worker counts; once counted the actor has no current worker, so the other account
of the same death, or a late one of an earlier worker, does nothing. A failure without a
worker (the raylet granted none) is about the incarnation waiting for one. As Ray does, an
``__init__`` that raised makes the actor DEAD whatever its restarts: it would raise again.
A worker that died is restarted while ``max_restarts`` allows (-1: for ever).

**GCS restarts.** A restarted GCS recovers each actor from its record: an ALIVE actor's
worker kept running, a DEAD one stays dead. For the others the GCS before had a creation
under way: where a raylet holds a worker granted for it, the restarted GCS adopts that
worker and pushes the creation task to it again (the worker runs ``__init__`` once and
answers both pushes: ``worker/creation_once.py``), which spares a second worker start;
otherwise it places the actor again (``actor_recovery`` says what the raylets drop).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable
from dataclasses import dataclass

from tracedray._proto.v1 import gcs_pb2
from tracedray.core.address import Address
from tracedray.core.log_line import LogLine


class ActorState(enum.Enum):
    """The wire value is the string the protocol, the tables and the CLI show."""
    PENDING_CREATION = "PENDING_CREATION"
    ALIVE = "ALIVE"
    RESTARTING = "RESTARTING"
    DEAD = "DEAD"


PENDING_CREATION, ALIVE = ActorState.PENDING_CREATION, ActorState.ALIVE
RESTARTING, DEAD = ActorState.RESTARTING, ActorState.DEAD
# The states whose creation a GCS had under way (or had yet to start).
UNSETTLED = frozenset({PENDING_CREATION, RESTARTING})
# The cause the raylet gets (its log, the discarded worker's exit reason) is one line:
# an ``__init__`` that raised has its whole traceback in the actor's death cause.
CAUSE_LIMIT = 200


class Outcome(enum.Enum):
    """How the creation task ended."""
    RETURNED = "returned"
    RAISED = "raised"
    WORKER_DIED = "worker_died"  # the task stream ended: the worker process is gone


@dataclass(frozen=True)
class Actor:
    actor_id: bytes
    state: ActorState
    max_restarts: int
    num_restarts: int = 0
    death_cause: str = ""
    # The worker of the current incarnation: granted for its creation, or ALIVE on it.
    worker: Address | None = None
    # Where the actor was last ALIVE: the record's address.
    recorded: Address | None = None
    # The nodes where a creation is under way (asked for a worker, or running __init__
    # there): one entry per placement, as a restart may overlap one.
    placing: tuple[str, ...] = ()

    @property
    def current_worker_id(self) -> str:
        return self.worker.worker_id if self.worker is not None else ""

    @classmethod
    def from_record(cls, info: gcs_pb2.ActorInfo) -> Actor:
        """An actor as its record has it (a restarted GCS): an ALIVE actor is on the
        worker recorded; any other has none."""
        state = ActorState(info.state)
        recorded = Address.from_proto(info.address) if info.HasField("address") else None
        return cls(info.actor_id, state, info.creation_task.actor_options.max_restarts,
                   num_restarts=info.num_restarts, death_cause=info.death_cause,
                   worker=recorded if state is ALIVE else None, recorded=recorded)


# --- events
@dataclass(frozen=True)
class Registered:
    """CreateActor: the actor is new."""


@dataclass(frozen=True)
class Recovered:
    """A restarted GCS read the actor's record, and the raylets kept for it the worker
    the GCS before was creating it on (``adopted``), or none."""
    adopted: Address | None = None


@dataclass(frozen=True)
class NodeChosen:
    node_id: str


@dataclass(frozen=True)
class LeaseAnswered:
    """The raylet's answer to the request for the actor's worker: the worker granted, or
    None with why (refused, or the RPC failed)."""
    node_id: str
    worker: Address | None
    failure: str = ""


@dataclass(frozen=True)
class InitEnded:
    node_id: str
    worker: Address
    outcome: Outcome
    error: str = ""  # for a failure, the cause of death


@dataclass(frozen=True)
class WorkerDied:
    """The raylet reported the death of a worker of the actor."""
    worker_id: str
    exit_code: int = 0
    signal: str = ""
    meaning: str = ""


@dataclass(frozen=True)
class NodeDied:
    node_id: str


@dataclass(frozen=True)
class Killed:
    """``tracedray.kill`` (or the job's end, with ``no_restart``)."""
    no_restart: bool
    cause: str


Event = Registered | Recovered | NodeChosen | LeaseAnswered | InitEnded | WorkerDied \
    | NodeDied | Killed


# --- actions
@dataclass(frozen=True)
class Save:
    """Write the actor's record (state, restarts, cause, address) and wake its waiters."""


@dataclass(frozen=True)
class Place:
    """Start a placement: choose a node, then NodeChosen."""


@dataclass(frozen=True)
class RequestWorker:
    node_id: str


@dataclass(frozen=True)
class RunCreation:
    node_id: str
    worker: Address


@dataclass(frozen=True)
class ResumeCreation:
    """Push the creation task again to the worker the GCS before was creating it on."""
    node_id: str
    worker: Address


@dataclass(frozen=True)
class KillWorker:
    node_id: str
    worker: Address


@dataclass(frozen=True)
class Withdraw:
    """Have the node's raylet drop what it holds for the dead actor's creation."""
    node_id: str
    cause: str


Log = LogLine  # a line the shell writes after the lock (core/log_line.py)


Action = (Save | Place | RequestWorker | RunCreation | ResumeCreation | KillWorker | Withdraw
          | Log)


@dataclass(frozen=True)
class Step:
    actor: Actor
    actions: tuple[Action, ...] = ()


def register(actor_id: bytes, max_restarts: int) -> Step:
    return handle(Actor(actor_id, PENDING_CREATION, max_restarts), Registered())


def handle(actor: Actor, event: Event) -> Step:
    """The actor after ``event``, and what the GCS does about it (in order)."""
    if isinstance(event, Registered):
        return Step(actor, (Save(), Place()))
    if isinstance(event, Recovered):
        return _recovered(actor, event.adopted)
    if isinstance(event, NodeChosen):
        if actor.state is DEAD:
            return Step(actor)
        return Step(dataclasses.replace(actor, placing=actor.placing + (event.node_id,)),
                    (RequestWorker(event.node_id),))
    if isinstance(event, LeaseAnswered):
        return _lease_answered(actor, event)
    if isinstance(event, InitEnded):
        return _init_ended(actor, event)
    if isinstance(event, WorkerDied):
        return _failure(actor, event.worker_id, worker_death_cause(actor, event))
    if isinstance(event, NodeDied):
        on_it = actor.recorded is not None and actor.recorded.node_id == event.node_id
        if not on_it or actor.state not in (ALIVE, PENDING_CREATION):
            return Step(actor)
        return _failure(actor, actor.current_worker_id, f"its node {event.node_id[:12]} died")
    return _killed(actor, event)


def _recovered(actor: Actor, adopted: Address | None) -> Step:
    if adopted is None:
        return Step(actor, (Place(),) if actor.state in UNSETTLED else ())
    if actor.state in UNSETTLED:
        return Step(dataclasses.replace(actor, worker=adopted,
                                        placing=actor.placing + (adopted.node_id,)),
                    (ResumeCreation(adopted.node_id, adopted),))
    # Killed before the raylets answered: the worker kept for it must not stay behind.
    return Step(actor, (Withdraw(adopted.node_id, actor.death_cause),))


def _lease_answered(actor: Actor, event: LeaseAnswered) -> Step:
    if actor.state is DEAD:
        actor = _placement_ended(actor, event.node_id)
        if event.worker is not None:  # granted a moment before the withdrawal came, or after
            return Step(actor, (Withdraw(event.node_id, actor.death_cause),))
        return Step(actor, (Log("debug", "actor.placement_withdrawn", {
            "actor_id": actor.actor_id.hex(), "node_id": event.node_id,
            "reply": event.failure}),))
    if event.worker is not None:
        return Step(dataclasses.replace(actor, worker=event.worker),
                    (RunCreation(event.node_id, event.worker),))
    return _failure(_placement_ended(actor, event.node_id), "", event.failure)


def _init_ended(actor: Actor, event: InitEnded) -> Step:
    actor = _placement_ended(actor, event.node_id)
    if actor.state is DEAD:  # declared dead meanwhile: stays dead, its worker goes
        return Step(actor, (Withdraw(event.node_id, actor.death_cause),))
    if actor.current_worker_id != event.worker.worker_id:
        # Its worker's death was counted already: another incarnation is under way,
        # whose creation must not be withdrawn.
        return Step(actor)
    if event.outcome is Outcome.RETURNED:
        alive = dataclasses.replace(actor, state=ALIVE, recorded=event.worker)
        return Step(alive, (Save(), Log("info", "actor.alive", {
            "actor_id": actor.actor_id.hex(), "node_id": event.worker.node_id,
            "pid": event.worker.pid, "restarts": actor.num_restarts})))
    step = _failure(actor, event.worker.worker_id, event.error,
                    restartable=event.outcome is Outcome.WORKER_DIED)
    if step.actor.state is DEAD:  # its worker must not stay behind, holding resources
        return Step(step.actor, step.actions + (Withdraw(event.node_id,
                                                         step.actor.death_cause),))
    # Restarted. Not a withdrawal: that would take the next incarnation's creation too.
    # The stream ends when the worker exits, but one that merely broke would leave a
    # live worker behind.
    return Step(step.actor, step.actions + (KillWorker(event.node_id, event.worker),))


def _killed(actor: Actor, event: Killed) -> Step:
    if actor.state is DEAD:
        return Step(actor)
    actions: list[Action] = []
    if event.no_restart:
        dead = _dead(actor, event.cause)
        actions.extend(dead.actions)
        actor = dead.actor
    if actor.recorded is not None:
        actions.append(KillWorker(actor.recorded.node_id, actor.recorded))
    if event.no_restart:
        # Its creation under way: the request waits in a raylet, or has a worker the
        # record does not name yet (it is set once ALIVE).
        actions.extend(Withdraw(node_id, event.cause) for node_id in sorted(set(actor.placing)))
    return Step(actor, tuple(actions))


def _failure(actor: Actor, failed_worker: str, cause: str, *,
             restartable: bool = True) -> Step:
    """One failure of the actor's worker ``failed_worker`` ("" when none was granted):
    a restart, death, or nothing when it is not the current worker's (counted already,
    or an earlier incarnation's)."""
    if actor.state is DEAD or failed_worker != actor.current_worker_id:
        return Step(actor)
    if restartable and (actor.max_restarts < 0 or actor.num_restarts < actor.max_restarts):
        restarted = dataclasses.replace(actor, state=RESTARTING, worker=None,
                                        num_restarts=actor.num_restarts + 1, death_cause=cause)
        return Step(restarted, (Save(), Log("warning", "actor.restarting", {
            "actor_id": actor.actor_id.hex(), "cause": cause,
            "restart": restarted.num_restarts, "worker_id": failed_worker}), Place()))
    if restartable and actor.max_restarts:
        cause += f" (no restarts left of max_restarts={actor.max_restarts})"
    return _dead(actor, cause)


def _dead(actor: Actor, cause: str) -> Step:
    dead = dataclasses.replace(actor, state=DEAD, worker=None, death_cause=cause)
    return Step(dead, (Save(), Log("info", "actor.dead", {
        "actor_id": actor.actor_id.hex(), "cause": cause})))


def _placement_ended(actor: Actor, node_id: str) -> Actor:
    placing = list(actor.placing)
    if node_id in placing:
        placing.remove(node_id)
    return dataclasses.replace(actor, placing=tuple(placing))


# --- reading
def worker_death_cause(actor: Actor, death: WorkerDied) -> str:
    during = "" if actor.state is ALIVE else " during __init__"
    pid = actor.worker.pid if actor.worker is not None else 0
    return (f"the actor's worker (pid {pid}) died{during}: "
            f"{death.signal or f'exit {death.exit_code}'}: {death.meaning}")


def settled(actor: Actor, min_restarts: int) -> bool:
    """Whether a wait for the actor ends: it is DEAD, or ALIVE after that many restarts."""
    return actor.state is DEAD or (actor.state is ALIVE
                                   and actor.num_restarts >= min_restarts)


def job_end_order(actors: Iterable[Actor]) -> list[Actor]:
    """The order a job's end kills its actors in: creations under way first, each
    withdrawn before the next; killing a live actor frees resources at once, which the
    raylet would otherwise grant to a creation of the same job waiting for them, only to
    have that worker killed."""
    return sorted(actors, key=lambda actor: actor.state is ALIVE)


def one_line_cause(cause: str) -> str:
    """An actor's death cause on one line of at most ``CAUSE_LIMIT`` characters: its
    first line, and the next one too when the first ends with a colon ("the actor's
    __init__ raised:" is followed by the error's own first line)."""
    lines = [line.strip() for line in cause.splitlines() if line.strip()]
    if not lines:
        return ""
    line = f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]
    return line if len(line) <= CAUSE_LIMIT else line[:CAUSE_LIMIT - 1] + "…"
