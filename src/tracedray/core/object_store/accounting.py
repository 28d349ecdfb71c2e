"""The object store's counters of what moved, and its statistics snapshot."""

from __future__ import annotations

from dataclasses import dataclass, field

from tracedray.core.object_store.deleter import DeleterStatistics
from tracedray.core.object_store.holdings import Holdings
from tracedray.core.object_store.pool import PoolStatistics


@dataclass(frozen=True)
class ObjectStoreStatistics:
    node_id: str
    capacity: int
    used: int  # bytes in shared memory now
    num_objects: int  # in shared memory or spilled
    num_in_memory: int
    num_spilled: int  # spilled now
    spilled_bytes_now: int
    num_pinned: int
    spilled_count: int  # cumulative
    spilled_bytes: int
    restored_count: int
    restored_bytes: int
    evicted_count: int
    evicted_bytes: int
    freed_count: int
    freed_bytes: int
    freed_by_reason: dict[str, int]  # FREE_RELEASED, "owner exited", "owner died"
    rejected_count: int  # seals refused with ObjectStoreFullError
    pool: PoolStatistics  # freed files kept for reuse (pool.py), counted against capacity
    deleter: DeleterStatistics  # big files being deleted off the store's lock (deleter.py)


@dataclass
class StoreCounters:
    """Cumulative counts; changed under the store's lock."""

    spilled_count: int = 0
    spilled_bytes: int = 0
    restored_count: int = 0
    restored_bytes: int = 0
    evicted_count: int = 0
    evicted_bytes: int = 0
    freed_count: int = 0
    freed_bytes: int = 0
    freed_by_reason: dict[str, int] = field(default_factory=dict)
    rejected_count: int = 0

    def count_free(self, size: int, reason: str) -> None:
        self.freed_count += 1
        self.freed_bytes += size
        self.freed_by_reason[reason] = self.freed_by_reason.get(reason, 0) + 1


def snapshot(held: Holdings, counts: StoreCounters, pool: PoolStatistics,
             deleter: DeleterStatistics) -> ObjectStoreStatistics:
    """The statistics of a store holding ``held`` (read under its lock)."""
    spilled = [o for o in held.objects.values() if o.spilled]
    return ObjectStoreStatistics(
        node_id=held.node_id,
        capacity=held.capacity,
        used=held.used,
        num_objects=len(held.objects),
        num_in_memory=len(held.objects) - len(spilled),
        num_spilled=len(spilled),
        spilled_bytes_now=sum(o.size for o in spilled),
        num_pinned=len(held.pins),
        spilled_count=counts.spilled_count,
        spilled_bytes=counts.spilled_bytes,
        restored_count=counts.restored_count,
        restored_bytes=counts.restored_bytes,
        evicted_count=counts.evicted_count,
        evicted_bytes=counts.evicted_bytes,
        freed_count=counts.freed_count,
        freed_bytes=counts.freed_bytes,
        freed_by_reason=dict(counts.freed_by_reason),
        rejected_count=counts.rejected_count,
        pool=pool,
        deleter=deleter,
    )
