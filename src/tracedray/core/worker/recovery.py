"""What an owner does when a node dies: rebuild its objects, re-resolve its tasks' inputs.

``NodeDirectory`` is this process's view of which nodes are alive (the GCS's node
table, refreshed on demand and at most every ``min_interval_s``). ``Recovery``
watches it while this process has something on another node (results held
there, leases there) and, for each node that died:
- every owned object whose only copy was there is rebuilt by running the task
  that made it again (lineage), or, without lineage (``put``), replaced by an
  ``ObjectLostError`` saying why, so ``get`` never waits forever;
- tasks whose inputs lived there wait for those rebuilt values before they run
  again (``stale_args`` + the dependency resolver).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tracedray import config, logs
from tracedray._proto.v1 import common_pb2, gcs_pb2
from tracedray.core.address import Address
from tracedray.core.worker.pending_task import PendingTask, error_value
from tracedray.exceptions import ObjectLostError, RaySystemError
from tracedray.telemetry.cluster_events import OwnerEvents

if TYPE_CHECKING:
    from tracedray.core.gcs.client import GcsClient
    from tracedray.core.worker.lineage import Lineage
    from tracedray.core.worker.memory_store import MemoryStore
    from tracedray.core.worker.reference_table import ReferenceTable
    from tracedray.core.worker.task_events import TaskEventBuffer

log = logs.get_logger(__name__)
_events = OwnerEvents(log)
# How often one task is run again to rebuild its results (nodes may keep dying).
MAX_REBUILDS = 3


class NodeDirectory:
    def __init__(self, gcs: GcsClient, min_interval_s: float = 0.2) -> None:
        self._gcs = gcs
        self._min_interval_s = min_interval_s
        self._lock = threading.Lock()
        self._nodes: dict[str, gcs_pb2.NodeInfo] = {}
        self._fetched_at = 0.0

    def refresh(self, *, force: bool = False) -> dict[str, gcs_pb2.NodeInfo]:
        with self._lock:
            fresh = time.monotonic() - self._fetched_at < self._min_interval_s
            if self._nodes and fresh and not force:
                return dict(self._nodes)
        try:
            nodes = {n.info.node_id: n.info for n in self._gcs.get_nodes()}
        except RaySystemError as exc:
            log.warning("nodes.refresh_failed", error=str(exc))
            with self._lock:
                return dict(self._nodes)
        with self._lock:
            self._nodes, self._fetched_at = nodes, time.monotonic()
            return dict(nodes)

    def info(self, node_id: str) -> gcs_pb2.NodeInfo | None:
        with self._lock:
            known = self._nodes.get(node_id)
        return known if known is not None else self.refresh().get(node_id)

    def alive_raylet(self, node_id: str) -> Address | None:
        info = self.info(node_id)
        if info is None or info.state != "ALIVE":
            return None
        return Address.from_proto(info.raylet)

    def is_dead(self, node_id: str) -> bool:
        info = self.info(node_id)
        return info is not None and info.state == "DEAD"

    def dead_nodes(self) -> set[str]:
        with self._lock:
            return {n for n, info in self._nodes.items() if info.state == "DEAD"}


def stale_args(spec: common_pb2.TaskSpec, dead: set[str]) -> list[int]:
    """Indexes of ref arguments whose resolved value lives on a dead node (pure)."""
    return [i for i, arg in enumerate(spec.args)
            if arg.is_ref and arg.value.store_node_id and arg.value.store_node_id in dead]


@dataclass(frozen=True)
class RecoveryStatistics:
    dead_nodes_seen: int
    objects_rebuilt: int
    objects_lost: int


class Recovery:
    def __init__(self, nodes: NodeDirectory, node_id: str, references: ReferenceTable,
                 memory_store: MemoryStore, lineage: Lineage, task_events: TaskEventBuffer, *,
                 submit: Callable[[PendingTask], None],
                 lease_nodes: Callable[[], set[str]]) -> None:
        self.nodes = nodes
        self._node_id = node_id
        self._references = references
        self._memory_store = memory_store
        self._lineage = lineage
        self._task_events = task_events
        self._submit = submit  # to the task submitter
        self._lease_nodes = lease_nodes  # nodes this process holds worker leases on
        self._handled: set[str] = set()
        self._lock = threading.Lock()
        self._rebuilt = self._lost = 0
        self._interval_s = config.HEARTBEAT_INTERVAL_S.get()

    # --- watching
    def watch_loop(self, stopped: threading.Event) -> None:
        """Poll the node table while this process has results or leases elsewhere."""
        while not stopped.wait(self._interval_s):
            if not self._has_remote_interest():
                continue
            self.check_nodes()

    def _has_remote_interest(self) -> bool:
        here = self._node_id
        return any(n != here for n in self._lineage.nodes()) or any(
            n != here for n in self._lease_nodes())

    def check_nodes(self, *, force: bool = False) -> set[str]:
        """Refresh the node table and handle nodes that died since; returns the dead ones."""
        nodes = self.nodes.refresh(force=force)
        dead = {n for n, info in nodes.items() if info.state == "DEAD"}
        with self._lock:
            new = dead - self._handled
            self._handled |= new
        for node_id in sorted(new):
            self._on_node_dead(nodes[node_id])
        return dead

    def await_verdict(self, node_id: str) -> bool:
        """Wait until the GCS declares ``node_id`` dead (True) or it answers heartbeats
        long enough to be alive (False); a node whose raylet just exited is noticed
        within a few heartbeat intervals (see gcs.node_health)."""
        deadline = time.monotonic() + config.NODE_DEATH_TIMEOUT_S.get() + 3 * self._interval_s
        while time.monotonic() < deadline:
            if node_id in self.check_nodes(force=True):
                return True
            time.sleep(min(0.2, self._interval_s))
        return False

    # --- a node died
    def _on_node_dead(self, info: gcs_pb2.NodeInfo) -> None:
        owned_there = [oid for oid, entry in self._references.snapshot()
                       if entry.owned and entry.store_node_id == info.node_id]
        with _events.node_lost_objects(info.node_id, info.death_reason, len(owned_there)):
            for object_id in owned_there:
                self.rebuild_or_fail(object_id, info)

    def rebuild_or_fail(self, object_id: bytes, info: gcs_pb2.NodeInfo) -> None:
        if self._memory_store.get_if_ready(object_id) is None:
            return  # being rebuilt already (or never finished)
        taken = self._lineage.take_for_rebuild(object_id, max_rebuilds=MAX_REBUILDS)
        cause = f"node {info.node_id[:12]} ({info.raylet.ip}) died: {info.death_reason}"
        if taken is None:
            why = ("it was made by put() (or its task's lineage is gone), so it cannot be "
                   "rebuilt" if not self._lineage.has(object_id)
                   else f"it was rebuilt {MAX_REBUILDS} time(s) already")
            self._replace_with_error(object_id, f"its only copy was on {cause}; {why}")
            return
        spec, return_ids = taken
        with self._lock:
            self._rebuilt += 1
        with _events.object_reconstruct(object_id, spec.task_id, spec.function_name,
                                        spec.attempt, cause):
            self._resubmit(spec, list(return_ids))

    def _resubmit(self, spec: common_pb2.TaskSpec, return_ids: list[bytes]) -> None:
        """Run a finished task again to rebuild its lost results (lineage). Its ref
        arguments that are still referenced resolve again, so a lost input is waited
        for (it may be being rebuilt too)."""
        task = PendingTask(spec=spec, return_ids=return_ids, dep_ids=[], unresolved=[],
                           retries_left=spec.max_retries)
        for index, arg in enumerate(spec.args):
            object_id = arg.value.object_id
            entry = self._references.get(object_id) if arg.is_ref else None
            if entry is not None:
                task.dep_ids.append(object_id)
                task.unresolved.append((index, object_id, None if entry.owned else entry.owner))
                arg.ClearField("value")
        self._references.add_submitted(task.dep_ids)
        self._memory_store.delete(return_ids)  # get() waits for the rebuilt values
        self._task_events.record(spec, "PENDING_ARGS_AVAIL")
        self._submit(task)

    def _replace_with_error(self, object_id: bytes, reason: str) -> None:
        with self._lock:
            self._lost += 1
        log.error("object.lost", object_id=object_id.hex(), reason=reason)
        self._memory_store.delete([object_id])
        self._memory_store.put(object_id, error_value(object_id,
                                                      ObjectLostError(object_id.hex(), reason)))

    # --- tasks whose inputs were there
    def refresh_inputs(self, task: PendingTask) -> bool:
        """Point ``task``'s ref arguments that lived on dead nodes back at their owners,
        so the resolver waits for the rebuilt values; True if any had to be.
        Raises ``ObjectLostError`` for an input nobody can rebuild any more."""
        dead = self.check_nodes(force=True)
        stale = stale_args(task.spec, dead)
        if not stale:
            return False
        for index in stale:
            object_id = task.spec.args[index].value.object_id
            entry = self._references.get(object_id)
            if entry is None:
                raise ObjectLostError(object_id.hex(), "its only copy was on a dead node and "
                                      "no reference to it is left to rebuild it from")
            owner = None if entry.owned else entry.owner
            task.input_bytes_by_node.pop(task.spec.args[index].value.store_node_id, None)
            task.spec.args[index].ClearField("value")
            task.unresolved.append((index, object_id, owner))
        return True

    def settle_inputs(self, spec: common_pb2.TaskSpec) -> None:
        """Before re-running a task whose input could not be read: for each node holding
        one of its inputs whose raylet does not answer, wait for the GCS's verdict (so a
        dead node's objects are being rebuilt before the task resolves them again)."""
        from tracedray.core.gcs.node_health import LISTENING, probe_port

        here = self._node_id
        holders = {arg.value.store_node_id for arg in spec.args
                   if arg.is_ref and arg.value.store_node_id not in ("", here)}
        for node_id in sorted(holders):
            address = self.nodes.alive_raylet(node_id)
            if address is not None and probe_port(address.ip, address.port) != LISTENING:
                self.await_verdict(node_id)

    def statistics(self) -> RecoveryStatistics:
        with self._lock:
            return RecoveryStatistics(len(self._handled), self._rebuilt, self._lost)


def is_lost_input(result: common_pb2.TaskResult) -> bool:
    """Did this failed task fail because an object it read was lost (a node died)?"""
    from tracedray.core.serialization import deserialize
    from tracedray.exceptions import RayTaskError

    if not result.is_application_error or not result.returns:
        return False
    inline = result.returns[0].inline_value
    try:
        error = deserialize(inline.inband, list(inline.buffers))
    except Exception:  # noqa: BLE001 - an undecodable error is not a lost input
        return False
    cause = error.cause if isinstance(error, RayTaskError) else error
    return isinstance(cause, ObjectLostError)
