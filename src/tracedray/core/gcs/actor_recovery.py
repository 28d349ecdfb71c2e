"""What a restarted GCS does about the actor creations the GCS before it left under way.

The GCS asks a raylet for an actor's worker (the request may wait there for a CPU), runs
``__init__`` on the worker granted, and records the actor ALIVE once it returned. A GCS
that dies in between leaves the request waiting, or a worker granted to the actor, with
nobody to use them; the restarted GCS recovers the actor as PENDING_CREATION (or
RESTARTING) and places it again. Left alone, the old request would be granted too: a
second worker for the actor, holding its CPU for as long as the node runs (and, had its
``__init__`` finished, a second instance nobody calls).

So before it places any actor, the restarted GCS tells each raylet it knows which actor
workers it uses (those of ALIVE actors there): the raylet answers the actor requests
waiting there (all from the GCS before) and kills its other actor workers
(``ReleaseUnusedActorWorkers``, as Ray's GCS releases unused actor workers). This
function decides; ``actor_manager`` does the RPCs (and ``actor_lifecycle`` places the
recovered actors whose creation was under way).
"""

from __future__ import annotations

from collections.abc import Iterable

from tracedray._proto.v1 import gcs_pb2, raylet_pb2
from tracedray.core.address import Address
from tracedray.core.gcs.actor_lifecycle import ActorState

# What the raylet's log and the killed workers' exit say.
CAUSE = "the GCS restarted during the actor's creation and creates it again"


def workers_in_use(actors: Iterable[gcs_pb2.ActorInfo],
                   node_ids: Iterable[str]) -> dict[str, list[str]]:
    """For each node, the worker ids of the ALIVE actors it hosts: the only actor
    workers there that the GCS uses."""
    in_use: dict[str, list[str]] = {node_id: [] for node_id in node_ids}
    for info in actors:
        node_id = info.address.node_id
        if info.state == ActorState.ALIVE.value and node_id in in_use and info.address.worker_id:
            in_use[node_id].append(info.address.worker_id)
    return {node_id: sorted(ids) for node_id, ids in in_use.items()}


def adopt(adopted: dict[bytes, Address], kept: Iterable[raylet_pb2.AdoptedActorWorker]
          ) -> list[tuple[bytes, Address]]:
    """Add to ``adopted`` (actor id -> worker) the workers the raylets kept for actors
    whose creation was under way: one per actor. Returns the others (an actor whose
    restarts overlapped may have had a worker on two nodes), which nobody uses."""
    spare = []
    for worker in kept:
        address = Address.from_proto(worker.worker)
        if worker.actor_id in adopted:
            spare.append((worker.actor_id, address))
        else:
            adopted[worker.actor_id] = address
    return spare
