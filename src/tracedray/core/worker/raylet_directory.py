"""Clients of the raylets this process talks to, by node, and why a worker of theirs exited.

The local raylet stands in for a node that is not (or no longer) alive: a request for
an object there gets its answer (lost) from the local raylet.
"""

from __future__ import annotations

from collections.abc import Callable

from tracedray._proto.v1 import raylet_pb2
from tracedray.core.address import Address
from tracedray.core.protocol.raylet_client import RayletClient
from tracedray.core.worker.recovery import NodeDirectory
from tracedray.core.worker.task_submitter import crash_error
from tracedray.exceptions import RaySystemError, WorkerCrashedError


class RayletDirectory:
    def __init__(self, local: RayletClient, node_id: str, nodes: NodeDirectory,
                 await_verdict: Callable[[str], bool]) -> None:
        self.local = local
        self._node_id = node_id
        self._nodes = nodes
        self._await_verdict = await_verdict  # True: the GCS declared the node dead
        self._clients: dict[str, RayletClient] = {}

    def for_node(self, node_id: str) -> RayletClient:
        """The raylet of ``node_id`` if that node is alive, else the local raylet."""
        if node_id == self._node_id or not node_id:
            return self.local
        if self._nodes.is_dead(node_id):
            self._clients.pop(node_id, None)
            return self.local
        client = self._clients.get(node_id)
        if client is None:
            address = self._nodes.alive_raylet(node_id)
            if address is None:
                return self.local
            client = self._clients[node_id] = RayletClient(address.target)
        return client

    def statistics(self) -> dict[str, int]:
        return {"clients": len(self._clients)}

    def describe_worker_exit(self, raylet: RayletClient, worker: Address
                             ) -> tuple[WorkerCrashedError, raylet_pb2.WorkerExitInfo]:
        """The error for a task whose worker ``worker`` was lost, saying why it exited,
        and what its raylet said of the exit (``exited=False``: nothing)."""
        try:
            info = raylet.get_worker_exit(worker.worker_id, timeout_s=5.0)
        except RaySystemError:
            # The raylet is unreachable: wait for the GCS to say whether its node died,
            # so the error names the cause (and retries avoid the dead node).
            if worker.node_id != self._node_id and self._await_verdict(worker.node_id):
                node = self._nodes.info(worker.node_id)
                reason = node.death_reason if node is not None else "unknown"
                return WorkerCrashedError(
                    f"the worker process (pid {worker.pid}) was lost with its node "
                    f"{worker.node_id[:12]} ({worker.ip}), which died: {reason}",
                    meaning="node died"), raylet_pb2.WorkerExitInfo(exited=False)
            info = raylet_pb2.WorkerExitInfo(exited=False)
        return crash_error(info, worker), info
