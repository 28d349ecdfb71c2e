"""What one node's object store holds: its objects, pins, owners and the bytes they use.

Plain bookkeeping with no lock and no I/O: :class:`~.store.ObjectStore` reads and changes
it only under its one lock.  The counters of what moved (spills, restores, evictions,
frees, refused seals) and their snapshot are :mod:`.accounting`'s.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from types import MappingProxyType

from tracedray.core.address import Address
from tracedray.core.object_store.policy import StoredObject, StoreState
from tracedray.exceptions import ObjectLostError


@dataclass(frozen=True)
class StoredObjectInfo:
    """One row of ``tracedray memory``."""

    object_id: str
    size: int
    owner: str
    call_site: str
    spilled: bool
    pinned: bool
    primary: bool
    created_at: float  # wall-clock seconds since the epoch
    owner_address: Address | None = None


class Holdings:
    """The objects held (in shared memory or spilled), their pins and owners, and the
    bytes in shared memory (``used``)."""

    def __init__(self, node_id: str, capacity: int) -> None:
        self.node_id = node_id
        self.capacity = capacity
        self.used = 0
        self.objects: dict[str, StoredObject] = {}
        self.pins: dict[str, int] = {}
        self.created_at: dict[str, float] = {}
        # Owner (worker id) -> the ids of the objects it owns here: what goes with it.
        self.by_owner: dict[str, set[str]] = {}

    def add(self, object_id: str, size: int, *, owner: str, call_site: str,
            primary: bool, owner_address: Address | None) -> None:
        self.objects[object_id] = StoredObject(
            object_id=object_id, size=size, primary=primary, pinned=False,
            last_access=time.monotonic(), owner=owner, call_site=call_site, spilled=False,
            owner_address=owner_address)
        self.created_at[object_id] = time.time()
        if owner:
            self.by_owner.setdefault(owner, set()).add(object_id)
        self.used += size

    def drop(self, object_id: str) -> StoredObject:
        """Forget a stored object's bookkeeping (not its pins, nor the bytes it used)."""
        obj = self.objects.pop(object_id)
        self.created_at.pop(object_id, None)
        owned = self.by_owner.get(obj.owner)
        if owned is not None:
            owned.discard(object_id)
            if not owned:
                del self.by_owner[obj.owner]
        return obj

    def clear(self) -> None:
        self.objects.clear()
        self.pins.clear()
        self.created_at.clear()
        self.by_owner.clear()
        self.used = 0

    def info(self, obj: StoredObject) -> StoredObjectInfo:
        return StoredObjectInfo(object_id=obj.object_id, size=obj.size, owner=obj.owner,
                                call_site=obj.call_site, spilled=obj.spilled,
                                pinned=obj.pinned, primary=obj.primary,
                                created_at=self.created_at[obj.object_id],
                                owner_address=obj.owner_address)

    def state(self) -> StoreState:
        # A read-only view, not a copy: plan_admission runs under the store's lock.
        return StoreState(capacity=self.capacity, used=self.used,
                          objects=MappingProxyType(self.objects))

    def touch(self, object_id: str) -> None:
        self.objects[object_id] = replace(self.objects[object_id], last_access=time.monotonic())

    def require(self, object_id: str) -> StoredObject:
        obj = self.objects.get(object_id)
        if obj is None:
            raise ObjectLostError(object_id, f"not in the object store of node {self.node_id}")
        return obj

    def owners(self) -> dict[str, Address | None]:
        """Each owner of an object held, with its address if known."""
        return {owner: self.objects[next(iter(ids))].owner_address
                for owner, ids in self.by_owner.items()}

    def owned_by(self, owners: Iterable[str]) -> dict[str, list[str]]:
        """The ids of the objects held that each of ``owners`` owns (those with any)."""
        return {owner: sorted(self.by_owner[owner]) for owner in owners
                if owner in self.by_owner}

    def pin(self, object_id: str) -> None:
        obj = self.require(object_id)
        count = self.pins.get(object_id, 0) + 1
        self.pins[object_id] = count
        if count == 1:
            self.objects[object_id] = replace(obj, pinned=True)

    def unpin(self, object_id: str) -> bool:
        """Release one pin; False when the object is not pinned."""
        count = self.pins.get(object_id, 0)
        if count == 0:
            return False
        if count > 1:
            self.pins[object_id] = count - 1
            return True
        del self.pins[object_id]
        self.objects[object_id] = replace(self.objects[object_id], pinned=False)
        return True
