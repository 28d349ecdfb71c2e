"""A caller's worker lease requests: how many a scheduling key needs, and which to withdraw.

A caller keeps up to ``MAX_PENDING_LEASE_REQUESTS`` requests out per scheduling key
while tasks of that key have no worker of their own: the queued ones, and those
pipelined behind another task on a leased worker (a free worker takes them). Each
request waits in a raylet's queue until a worker is free there. Once the tasks have gone
out on the leases already held, the requests still waiting are of no use: granted
later, they would lease workers nobody has a task for, and meanwhile they wait ahead of
other callers' requests for the same resources. So the surplus is withdrawn: the newest
first (the furthest back in the raylet's queue), by request id.

Not at once, though: work often comes in waves (``get`` of a few tasks in a loop), and
withdrawing between two waves only to ask again in the next one costs two RPCs per
request for nothing (the throughput of such a loop fell 12-20%). Requests are withdrawn
once the key has not needed all of them for a while (its patience).

Decisions are pure functions of the counts; ``TaskSubmitter`` does the I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tracedray.core.protocol.raylet_client import LeaseCall, RayletClient

MAX_PENDING_LEASE_REQUESTS = 16


@dataclass(eq=False)  # one request: compared by identity
class LeaseAsk:
    """One lease request of a scheduling key, from when it is queued on the caller's
    background pool until its answer is handled."""
    request_id: bytes
    key: str
    # The raylet it waits at and the call waiting, while it waits at one (a spillback
    # moves it to another raylet: in between, and before it is sent, both are None).
    raylet: RayletClient | None = None
    call: LeaseCall | None = None
    # No task needs it any more: it no longer counts as requested, its raylet is asked
    # to answer it without a worker, and a worker granted before that is given back.
    withdrawn: bool = False
    since: float = 0.0  # monotonic time it was made (work that fits no node is warned of)


def lease_requests_wanted(queued: int, behind: int) -> int:
    """How many lease requests a scheduling key should have out: one per task without a
    worker of its own (``queued``, and ``behind`` others on a leased worker), capped.
    Tasks running on a leased worker need none: only those pipelined behind another."""
    return min(queued + behind, MAX_PENDING_LEASE_REQUESTS)


def surplus_lease_requests(queued: int, behind: int, requested: int, *,
                           unneeded_for_s: float, patience_s: float) -> int:
    """How many of the ``requested`` (not withdrawn) lease requests of a scheduling key
    to withdraw: those beyond what its ``queued`` and ``behind`` tasks need, once it has
    not needed all of them for ``patience_s`` (``unneeded_for_s``: how long since it
    last did)."""
    if unneeded_for_s < patience_s:
        return 0
    return max(0, requested - lease_requests_wanted(queued, behind))


def requests_to_withdraw(asks: Sequence[LeaseAsk], queued: int, behind: int, *,
                         unneeded_for_s: float, patience_s: float) -> list[LeaseAsk]:
    """The requests of a key (``asks``, oldest first) to withdraw: the newest of those
    not withdrawn yet, as many as ``surplus_lease_requests`` says."""
    requested = [ask for ask in asks if not ask.withdrawn]
    surplus = surplus_lease_requests(queued, behind, len(requested),
                                     unneeded_for_s=unneeded_for_s, patience_s=patience_s)
    return requested[len(requested) - surplus:] if surplus else []
