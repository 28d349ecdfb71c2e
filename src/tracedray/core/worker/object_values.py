"""Getting the values of owned and borrowed objects into this process.

A borrowed value is fetched from its owner; an owned one arrives when its task
finishes. A value whose copy was on a node that died is rebuilt by its owner
(recovery.py): the owner waits for the rebuilt value, a borrower for the verdict on
the node and then for its owner to hand out the new copy.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from tracedray import config, logs
from tracedray._proto.v1 import common_pb2, core_worker_pb2, core_worker_pb2_grpc
from tracedray.core import rpc
from tracedray.core.address import Address
from tracedray.core.worker.blocking import BlockedState
from tracedray.core.worker.memory_store import MemoryStore, is_error
from tracedray.core.worker.pending_task import error_value
from tracedray.core.worker.reference_table import ReferenceTable
from tracedray.exceptions import GetTimeoutError, ObjectLostError, OwnerDiedError

log = logs.get_logger(__name__)


@dataclass(frozen=True)
class ObjectValuesStatistics:
    owner_fetches: int  # GetObject calls to owners of borrowed values
    owners_unreachable: int  # of those, owners that did not answer (OwnerDiedError)
    blocked_waits: int  # waits that blocked (the raylet was told, when a worker)


class ObjectValues:
    def __init__(self, address: Address, references: ReferenceTable, memory_store: MemoryStore,
                 blocking: BlockedState, *, await_verdict: Callable[[str], bool],
                 background: Callable[..., bool], drain_submissions: Callable[[], None]
                 ) -> None:
        self._address = address
        self._references = references
        self._memory_store = memory_store
        self._blocking = blocking
        self._await_verdict = await_verdict  # True: the GCS declared the node dead
        self._background = background
        self._drain_submissions = drain_submissions
        self._lock = threading.Lock()
        self._fetches = self._unreachable = self._blocked = 0

    def wait(self, object_ids: list[bytes], num_ready: int, timeout_s: float | None, *,
             stop_on_error: bool = False) -> set[bytes]:
        """Wait for values of owned or borrowed refs to be available here (with
        ``stop_on_error``, only until one of them is an error)."""
        self._drain_submissions()  # tasks this thread submitted go out now, not when it wakes
        store = self._memory_store
        missing = [oid for oid in object_ids if not store.contains(oid)]
        for object_id in missing:
            entry = self._references.get(object_id)
            if entry is not None and not entry.owned and entry.owner is not None:
                self._background(self._fetch_into_store, object_id, entry.owner)
        ready = {oid for oid in object_ids if store.contains(oid)}
        if len(ready) >= num_ready or (stop_on_error and any(
                is_error(store.get_if_ready(oid)) for oid in ready)):
            return ready  # no need to tell the raylet this worker blocks
        with self._lock:
            self._blocked += 1
        with self._blocking.blocked():
            return store.wait(object_ids, num_ready, timeout_s, stop_on_error=stop_on_error)

    def _fetch_into_store(self, object_id: bytes, owner: Address) -> None:
        value = self.fetch_from_owner(object_id, owner, timeout_s=None)
        if self._references.get(object_id) is not None:
            self._memory_store.put(object_id, value)

    def fetch_from_owner(self, object_id: bytes, owner: Address,
                         timeout_s: float | None) -> common_pb2.ObjectValue:
        request = core_worker_pb2.GetObjectRequest(object_id=object_id,
                                                   timeout_s=-1 if timeout_s is None else timeout_s,
                                                   requester=self._address.to_proto())
        with self._lock:
            self._fetches += 1
        try:
            reply = core_worker_pb2_grpc.CoreWorkerServiceStub(
                rpc.channel(owner.target)).GetObject(
                    request, timeout=None if timeout_s is None else timeout_s + 10)
        except grpc.RpcError as exc:
            with self._lock:
                self._unreachable += 1
            return error_value(object_id, owner_died_error(object_id, owner, exc.code().name))
        if reply.status == core_worker_pb2.GetObjectReply.PENDING:
            raise GetTimeoutError(f"object {object_id.hex()} was not ready in {timeout_s}s")
        if reply.status == core_worker_pb2.GetObjectReply.UNKNOWN:
            return error_value(object_id, ObjectLostError(
                object_id.hex(), "its owner no longer has it (freed, or owner restarted)"))
        return reply.value

    def statistics(self) -> ObjectValuesStatistics:
        with self._lock:
            return ObjectValuesStatistics(self._fetches, self._unreachable, self._blocked)

    def after_loss(self, value: common_pb2.ObjectValue) -> common_pb2.ObjectValue | None:
        """An object could not be read from its node: if that node died, wait for the
        rebuilt value (or the error saying why it cannot be); None: nothing to do.

        A borrower first asks the owner at once: an owner gone (every copy went with
        it, raylet/owner_death.py) answers nothing, which is an OwnerDiedError.
        """
        object_id, node_id = value.object_id, value.store_node_id
        entry = self._references.get(object_id)
        if entry is None or (not entry.owned and entry.owner is None):
            return None
        if not entry.owned:
            assert entry.owner is not None
            # Its owner may be gone, and every copy with it: then say so (OwnerDiedError)
            # at once, rather than wait for a verdict on a node that is alive.
            answer = self._owner_answer(object_id, entry.owner)
            if answer is not None and answer != value:
                return answer  # an error (the owner died, or freed it), or another copy
        if not node_id or node_id == self._address.node_id:
            return None
        if not self._await_verdict(node_id):
            return None
        if not entry.owned:
            assert entry.owner is not None
            return self._rebuilt_by_owner(object_id, entry.owner, node_id)
        self.wait([object_id], 1, None)
        fresh = self._memory_store.get_if_ready(object_id)
        return None if fresh is None or _still_on(fresh, node_id) else fresh

    def _owner_answer(self, object_id: bytes, owner: Address) -> common_pb2.ObjectValue | None:
        """What the owner of a borrowed object says of it now, without waiting for it
        to be ready: its value (maybe another copy), or an error value when the owner
        does not answer (OwnerDiedError) or no longer has it; None: not ready."""
        try:
            return self.fetch_from_owner(object_id, owner, timeout_s=0)
        except GetTimeoutError:
            return None

    def _rebuilt_by_owner(self, object_id: bytes, owner: Address,
                          dead_node: str) -> common_pb2.ObjectValue | None:
        # The owner learns of the death from the GCS as we did, possibly a moment later:
        # until then it still hands out the lost copy.
        deadline = time.monotonic() + config.NODE_DEATH_TIMEOUT_S.get() + 10.0
        while True:
            fresh = self.fetch_from_owner(object_id, owner, timeout_s=None)
            if not _still_on(fresh, dead_node):
                if self._references.get(object_id) is not None:
                    self._memory_store.put(object_id, fresh)
                return fresh
            if time.monotonic() > deadline:
                log.warning("object.rebuild_not_seen", object_id=object_id.hex(),
                            owner_pid=owner.pid, dead_node=dead_node)
                return None
            time.sleep(0.1)


def owner_died_error(object_id: bytes, owner: Address, answer: str) -> OwnerDiedError:
    """A borrowed object whose owner does not answer (``answer``: the RPC's status)."""
    return OwnerDiedError(
        object_id.hex(), f"its owner has exited or died: the process that created it with "
        f"put() or .remote() (pid {owner.pid}, worker {owner.worker_id}, node "
        f"{owner.node_id} at {owner.ip}) does not answer ({answer}). An object lives only as "
        f"long as its owner; its logs: `tracedray logs --worker {owner.pid}`")


def _still_on(value: common_pb2.ObjectValue, node_id: str) -> bool:
    """The value is the copy that lived on ``node_id`` (not a rebuilt or inline one)."""
    return value.store_node_id == node_id and not value.HasField("inline_value")
