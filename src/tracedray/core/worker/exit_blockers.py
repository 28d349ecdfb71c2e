"""Whether an idle worker may be stopped without losing anything others need.

The raylet stops idle workers beyond its soft limit (raylet/worker_pool.py). A
worker is idle from the raylet's view (no lease) while it may still be an owner or
a caller: a task that returned a ref it created, or submitted work and returned
without waiting for it, leaves the worker as the only process that can serve that
object or take that result, and its leases on other workers would never be given
back. A borrower that vanished is never told to its owner, so a borrowed ref
pins the owner's object forever. Such workers answer with the reasons and are kept,
as Ray keeps workers that own objects still in scope.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkState:
    owned_objects: int  # owned entries still referenced anywhere
    borrowed_objects: int  # refs to other processes' objects held here
    unfinished_tasks: int  # normal tasks this process submitted, not finished
    held_leases: int  # worker leases this process holds (a linger returns idle ones)
    lease_requests: int
    actor_calls: int  # actor calls submitted, queued or in flight
    executing: int  # tasks pushed to this worker, queued or running


def exit_blockers(state: WorkState) -> list[str]:
    """Why stopping the process now would lose something; empty when nothing would."""
    reasons = []
    if state.owned_objects:
        reasons.append(f"owns {state.owned_objects} object(s) still referenced")
    if state.borrowed_objects:
        reasons.append(f"borrows {state.borrowed_objects} object(s)")
    if state.unfinished_tasks:
        reasons.append(f"submitted {state.unfinished_tasks} task(s) not finished yet")
    if state.held_leases or state.lease_requests:
        reasons.append(f"holds {state.held_leases} worker lease(s), "
                       f"{state.lease_requests} requested")
    if state.actor_calls:
        reasons.append(f"has {state.actor_calls} actor call(s) pending")
    if state.executing:
        reasons.append(f"is running or queueing {state.executing} task(s)")
    return reasons
