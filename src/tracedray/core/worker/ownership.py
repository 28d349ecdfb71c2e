"""The objects this process owns: storing their values, freeing them once no reference
is left, and delivering the reference updates it owes other owners.

Frees of this node's objects go behind their seals on the seal socket; frees on other
nodes and reference updates go over gRPC on the background pool, never inline: this
may run in a gRPC handler, which must never wait for another process (two owners
releasing into each other would deadlock).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import grpc

from tracedray import logs
from tracedray._proto.v1 import common_pb2, core_worker_pb2, core_worker_pb2_grpc
from tracedray.core import rpc
from tracedray.core.address import Address
from tracedray.core.protocol.raylet_client import RayletClient
from tracedray.core.worker import reference_table as rt
from tracedray.core.worker.lineage import Lineage
from tracedray.core.worker.memory_store import MemoryStore
from tracedray.exceptions import RaySystemError

log = logs.get_logger(__name__)


class FreeingRaylet(Protocol):
    """What Ownership asks of a raylet: to free objects in its store."""

    address: str

    def free_objects(self, object_ids: list[bytes]) -> None:
        ...


@dataclass(frozen=True)
class OwnershipStatistics:
    released_total: int  # owned objects released (no reference left)
    local_frees: int  # batches of this node's frees sent over the seal socket
    grpc_frees: int  # batches of frees sent to raylets over gRPC
    update_runs_sent: int  # UpdateReferences calls made to other owners


class Ownership:
    def __init__(self, references: rt.ReferenceTable, memory_store: MemoryStore,
                 lineage: Lineage, local_raylet: FreeingRaylet, *,
                 free_local: Callable[[list[bytes]], bool],
                 background: Callable[..., bool]) -> None:
        self._references = references
        self._memory_store = memory_store
        self._lineage = lineage
        self._raylet = local_raylet
        self._free_local = free_local  # False: could not go over the seal socket
        self._background = background
        self._update_send_lock = threading.Lock()  # see flush_reference_updates
        self._stats_lock = threading.Lock()
        self._released = self._local_frees = self._grpc_frees = self._update_runs = 0

    def store_value(self, value: common_pb2.ObjectValue, status: str) -> None:
        """Record a value this process created (put, a large argument, a task's result).
        One nobody references any more is freed at once (with the refs it captured)."""
        self.store_values([value], status)

    def store_values(self, values: list[common_pb2.ObjectValue], status: str) -> None:
        """``store_value`` for several values, one lock acquisition per table (a batch of
        task results)."""
        self._memory_store.put_many([(value.object_id, value) for value in values])
        self.run_release_actions(self._references.set_objects_info([
            rt.ObjectInfo(
                value.object_id, value.size, value.store_node_id,
                Address.from_proto(value.store_raylet) if value.store_node_id else None,
                status,
                [(c.object_id, Address.from_proto(c.owner) if c.HasField("owner") else None)
                 for c in value.contained_refs])
            for value in values]))

    def add_captured(self, inner: common_pb2.ObjectRefInfo, outer_id: bytes) -> None:
        """``inner`` was serialized into object ``outer_id``: keep it alive while outer
        lives. Another owner hears it with the next flush (a task's caller: before the
        result, see TaskExecutor)."""
        owner = Address.from_proto(inner.owner) if inner.HasField("owner") else None
        self._references.add_captured(inner.object_id, owner, outer_id)

    def flush_reference_updates(self) -> None:
        """Deliver the reference updates for other owners, in the order they were made;
        on return every one made before the call has been applied by its owner (or the
        owner was unreachable). Callers: the flusher, the executor before it replies to
        a task's caller (so a ref the result captured is registered first), and a
        release that let go of a captured ref.

        Take and send happen under one lock: a second flush waits for the updates the
        first one took, so no update overtakes an earlier one (a borrow's +1 and the
        outer object's -1 sent concurrently could reach the owner swapped, and it would
        free the inner object still borrowed)."""
        with self._update_send_lock:
            for owner, run in rt.runs_by_owner(self._references.take_updates()):
                _send_reference_updates(owner, run)
                with self._stats_lock:
                    self._update_runs += 1

    def update_borrower(self, object_id: bytes, borrower: str, delta: int) -> None:
        """Apply a borrower's reference update (from another process)."""
        self.run_release_actions(self._references.update_borrower(object_id, borrower, delta))

    def release_deferred(self) -> None:
        """Free what refs dropped since the last call let go."""
        self.run_release_actions(self._references.take_deferred_actions())

    def run_release_actions(self, actions: list[rt.ReleaseAction]) -> None:
        if not actions:
            return
        frees: dict[Address | None, list[bytes]] = defaultdict(list)
        deleted = []
        notify_owners = False
        released = 0
        for action in actions:
            deleted.append(action.object_id)
            if not action.owned:
                continue
            released += 1
            log.debug("object.release", object_id=action.object_id.hex(), size=action.size)
            if action.store_node_id:
                frees[action.store_raylet].append(action.object_id)
            # Captured refs owned elsewhere: their -1s are queued behind every update
            # made before (the table did that); only those owned here are let go here.
            notify_owners |= action.released_remote_captured
            if action.contained:
                borrower = rt.captured_in(action.object_id)
                for inner_id, _ in action.contained:
                    self.run_release_actions(
                        self._references.update_borrower(inner_id, borrower, -1))
        deleted = self._references.forget_unreferenced(deleted, self._memory_store.delete)
        self._lineage.forget(deleted)
        local_frees = grpc_frees = 0
        for raylet_address, object_ids in frees.items():
            local = raylet_address is None or raylet_address.target == self._raylet.address
            # This node's frees go behind the seals on the seal socket: soon, in order.
            if local and self._free_local(object_ids):
                local_frees += 1
                continue
            client: FreeingRaylet = self._raylet if local or raylet_address is None \
                else RayletClient(raylet_address.target)
            self._background(_free, client, object_ids)
            grpc_frees += 1
        with self._stats_lock:
            self._released += released
            self._local_frees += local_frees
            self._grpc_frees += grpc_frees
        if notify_owners:
            self._background(self.flush_reference_updates)


    def statistics(self) -> OwnershipStatistics:
        with self._stats_lock:
            return OwnershipStatistics(self._released, self._local_frees, self._grpc_frees,
                                       self._update_runs)


def _send_reference_updates(owner: Address, updates: list[rt.ReferenceUpdate]) -> None:
    request = core_worker_pb2.UpdateReferencesRequest(updates=[
        core_worker_pb2.ReferenceUpdate(object_id=u.object_id, borrower=u.borrower,
                                        delta=u.delta) for u in updates])
    try:
        core_worker_pb2_grpc.CoreWorkerServiceStub(rpc.channel(owner.target)).UpdateReferences(
            request, timeout=10)
    except grpc.RpcError as exc:
        log.debug("references.owner_unreachable", owner=owner.target, error=str(exc.code()))


def _free(client: FreeingRaylet, object_ids: list[bytes]) -> None:
    try:
        client.free_objects(object_ids)
    except RaySystemError as exc:
        log.debug("objects.free_failed", raylet=client.address, error=str(exc))
