"""What happens to a task submitter's lease book (events) and what the book asks the
submitter to do (actions): ``SubmitterBook.handle(event) -> list[Action]``.

Plain named tuples: submission and results build one event per batch and one action per
task sent, on the hot path.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from tracedray._proto.v1 import raylet_pb2
from tracedray.core.address import Address
from tracedray.core.protocol.connection import WorkerConnection
from tracedray.core.protocol.raylet_client import RayletClient
from tracedray.core.worker.lease_requests import LeaseAsk
from tracedray.core.worker.leases import Lease, LeaseReturn
from tracedray.core.worker.pending_task import PendingTask

# --- events


class TasksReady(NamedTuple):
    """Tasks whose arguments are resolved, each with its scheduling key set; cancelled
    ones are left out."""
    tasks: Sequence[PendingTask]
    now: float


class TasksRetried(NamedTuple):
    """Tasks to run again (their attempt already counted), queued after the others."""
    tasks: Sequence[PendingTask]
    now: float


class Verdict(enum.Enum):
    DONE = "done"  # finished or failed for good: the submitter completes it
    REQUEUED = "requeued"  # stolen back before it started: first in its queue again
    RETRY = "retry"  # an application error its retry policy matches: queued again
    RETRY_AFTER_LOSS = "retry after loss"  # an input was lost: rebuilt, then queued again


class ResultsArrived(NamedTuple):
    """Results for tasks in flight on ``conn``'s lease, with what becomes of each."""
    conn: WorkerConnection
    results: Sequence[tuple[PendingTask, Verdict]]
    now: float


class ConnectionBroke(NamedTuple):
    conn: WorkerConnection
    now: float


class Pump(NamedTuple):
    """Look again at keys' queues: dispatch, steal back, ask for leases."""
    keys: Iterable[str]
    now: float


class AskOutcome(enum.Enum):
    NOT_SENT = "not sent"  # the submitter closed, or the request was withdrawn, first
    GRANTED = "granted"
    NOT_GRANTED = "not granted"  # answered without a worker (or withdrawn between hops)
    FAILED = "failed"  # the raylet failed, or spillbacks ran out


class AskAnswered(NamedTuple):
    ask: LeaseAsk
    outcome: AskOutcome
    now: float
    raylet: RayletClient | None = None  # a grant's: the raylet that granted it
    reply: raylet_pb2.LeaseReply | None = None


class QueuedTaskCancelled(NamedTuple):
    task: PendingTask


class LingerTick(NamedTuple):
    """Every half linger: withdraw the requests no task needs any more."""
    now: float


class IdleLeasesDue(NamedTuple):
    """After a tick's withdrawals: give back the leases idle for a linger."""
    now: float


class Closing(NamedTuple):
    pass


Event = (TasksReady | TasksRetried | ResultsArrived | ConnectionBroke | Pump | AskAnswered
         | QueuedTaskCancelled | LingerTick | IdleLeasesDue | Closing)

# --- actions


class Dispatch(NamedTuple):
    """Send ``task`` on ``lease`` (in flight there already). ``decided``: the lease's first
    task, which carries the raylet's scheduling decision in its record."""
    task: PendingTask
    lease: Lease
    decided: bool


class RequestLease(NamedTuple):
    ask: LeaseAsk
    example: PendingTask  # a task of its key, whose spec the request describes


class StealBack(NamedTuple):
    """Ask ``worker`` to hand the task back if it has not started it."""
    task_id: bytes
    worker: Address


class ReturnLease(NamedTuple):
    """Close the lease's connection and give the lease back (through the background pool)."""
    lease: Lease
    failed: bool


class ReturnGrant(NamedTuple):
    """Give back a worker granted to a request nobody needs any more, now (on the
    requesting thread: the close waits for it)."""
    given_back: LeaseReturn
    closing: bool
    key: str
    worker_pid: int


class RetryRequestLater(NamedTuple):
    """A request failed and its key still wants it: look again after a pause."""
    key: str


class Withdraw(NamedTuple):
    raylet: RayletClient
    key: str
    request_ids: list[bytes]


class WorkerLost(NamedTuple):
    """``lease``'s connection broke with ``orphans`` in flight: find out why, then retry
    or fail them."""
    lease: Lease
    orphans: list[PendingTask]


class RetryAfterLoss(NamedTuple):
    """Rebuild the task's lost inputs (``input_lost``) or refresh them (its node died),
    then queue it again."""
    task: PendingTask
    input_lost: bool


class GiveAllBack(NamedTuple):
    """The close: the connections of the leases held to close, the leases to give back
    and the raylets where requests wait, to withdraw them first."""
    conns: list[WorkerConnection]
    returns: list[LeaseReturn]
    waiting_at: list[RayletClient]


Action = (Dispatch | RequestLease | StealBack | ReturnLease | ReturnGrant
          | RetryRequestLater | Withdraw | WorkerLost | RetryAfterLoss | GiveAllBack)
