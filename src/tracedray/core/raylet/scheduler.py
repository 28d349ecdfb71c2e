"""Placement decisions as pure functions over an explicit view of the cluster.

The raylet that receives a lease request decides: grant here, spill back to a
node that can run it sooner, or keep waiting (queued, or infeasible everywhere).
Locality (the Ray paper's Figure 8a): the caller sends the request to the node
holding most of the task's input bytes; that node keeps the task unless its queue
is long and another node is idle.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from tracedray.core.protocol.resources import Resources, feasible, fits

# A local queue this much longer than the least-loaded feasible node justifies moving the data.
QUEUE_SPILL_MARGIN = 4


@dataclass(frozen=True)
class NodeView:
    node_id: str
    alive: bool
    total: Resources
    available: Resources
    queue_length: int
    input_bytes: int = 0


class Placement(enum.Enum):
    GRANT_HERE = "grant_here"
    SPILLBACK = "spillback"
    QUEUE_HERE = "queue_here"
    INFEASIBLE = "infeasible"


@dataclass(frozen=True)
class Decision:
    action: Placement
    node_id: str
    reason: str
    candidates: tuple[str, ...]
    local_bytes: tuple[int, ...]
    queue_lengths: tuple[int, ...]


def decide(local: NodeView, others: Sequence[NodeView], request: Resources,
           *, may_spill: bool) -> Decision:
    nodes = [local, *[n for n in others if n.alive and n.node_id != local.node_id]]
    candidates = [n for n in nodes if feasible(n.total, request)]
    ids = tuple(n.node_id for n in candidates)
    local_bytes = tuple(n.input_bytes for n in candidates)
    queues = tuple(n.queue_length for n in candidates)

    def make(action: Placement, node_id: str, reason: str) -> Decision:
        return Decision(action, node_id, reason, ids, local_bytes, queues)

    if not candidates:
        return make(Placement.INFEASIBLE, "", f"no node has {dict(request)} "
                    f"(cluster nodes: {len(nodes)}); waiting for one to join")
    local_ok = feasible(local.total, request)
    if local_ok and fits(local.available, request):
        held = f", holds {local.input_bytes} input bytes" if local.input_bytes else ""
        return make(Placement.GRANT_HERE, local.node_id, f"resources available on this node{held}")
    if may_spill:
        ready = [n for n in candidates if n.node_id != local.node_id and fits(n.available, request)]
        if ready:
            best = max(ready, key=lambda n: (n.input_bytes, -n.queue_length))
            if not local_ok:
                why = "this node lacks the resources"
            elif local.queue_length + 1 >= QUEUE_SPILL_MARGIN or not local.input_bytes:
                why = f"this node is busy (queue {local.queue_length})"
            else:
                return make(Placement.QUEUE_HERE, local.node_id,
                            f"busy, but holds {local.input_bytes} input bytes; waiting here")
            return make(Placement.SPILLBACK, best.node_id, f"{why}; node {best.node_id[:12]} has "
                        f"resources free")
    if local_ok:
        return make(Placement.QUEUE_HERE, local.node_id, "waiting for resources on this node")
    best = min(candidates, key=lambda n: n.queue_length)
    return make(Placement.SPILLBACK, best.node_id,
                f"this node can never fit {dict(request)}; node {best.node_id[:12]} can")

