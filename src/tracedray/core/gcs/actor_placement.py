"""Where an actor goes (``choose_node``, pure) and how its ``__init__`` runs there
(``run_creation_task``: the creation task pushed over the task stream callers use)."""

from __future__ import annotations

import threading
from typing import Any

from tracedray._proto.v1 import common_pb2, gcs_pb2
from tracedray.core.address import Address
from tracedray.core.gcs.actor_lifecycle import Outcome
from tracedray.core.protocol.connection import WorkerConnection
from tracedray.core.protocol.resources import feasible, fits
from tracedray.core.serialization import deserialize


def choose_node(nodes: list[gcs_pb2.NodeWithLoad], resources: dict[str, float]
                ) -> gcs_pb2.NodeWithLoad | None:
    """The node for an actor that needs ``resources``, or None while no live node could
    ever fit it. Spread actors: most free CPU first; otherwise queue on the least loaded
    node."""
    alive = [n for n in nodes if n.info.state == "ALIVE"
             and feasible(dict(n.info.resources_total), resources)]
    if not alive:
        return None
    free = [n for n in alive if fits(dict(n.resources_available), resources)]
    pool = free or alive
    return max(pool, key=lambda n: (n.resources_available.get("CPU", 0.0), -n.pending_leases))


def run_creation_task(address: Address, spec: common_pb2.TaskSpec) -> tuple[Outcome, str]:
    """Push the creation task to the worker at ``address`` and wait for its end; returns
    how it ended and, for a failure, the cause of death."""
    done = threading.Event()
    outcome: dict[str, Any] = {}

    def on_results(conn: WorkerConnection, results: list[common_pb2.TaskResult]) -> None:
        outcome["result"] = results[0]
        done.set()

    def on_broken(conn: WorkerConnection, error: BaseException | None) -> None:
        outcome.setdefault("broken", str(error))
        done.set()

    conn = WorkerConnection(address, on_results, on_broken)
    conn.send(spec)
    done.wait()
    conn.close()
    result = outcome.get("result")
    if result is None:
        broken = outcome.get("broken")
        return Outcome.WORKER_DIED, f"the actor's worker died during __init__ ({broken})"
    if result.is_application_error:
        try:
            value = result.returns[0].inline_value
            error = deserialize(value.inband, list(value.buffers))
            return Outcome.RAISED, f"the actor's __init__ raised:\n{error}"
        except Exception as exc:  # noqa: BLE001 - best-effort description
            return Outcome.RAISED, f"the actor's __init__ raised (undecodable error: {exc})"
    return Outcome.RETURNED, ""
