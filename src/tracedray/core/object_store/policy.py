"""Admission decisions for a full store, as pure functions over explicit state.

The raylet's ``ObjectStore`` snapshots its bookkeeping into a :class:`StoreState`,
asks :func:`plan_admission` what to do, and carries the plan out (file I/O,
spans, logs).  Keeping the decision here makes every branch testable without
files and keeps the store's I/O code free of policy.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tracedray.core.address import Address


@dataclass(frozen=True)
class StoredObject:
    object_id: str
    size: int
    primary: bool  # False for a copy pulled from another node (evictable: the primary lives on)
    pinned: bool  # in use by a running task or being read: never spilled or evicted meanwhile
    last_access: float  # monotonic seconds
    owner: str
    call_site: str
    spilled: bool  # lives in the spill folder, not in shared memory (takes no capacity)
    owner_address: Address | None = None  # the process it goes with (owner_death.py)


@dataclass(frozen=True)
class StoreState:
    capacity: int
    used: int  # bytes in shared memory (spilled objects excluded)
    objects: Mapping[str, StoredObject]


@dataclass(frozen=True)
class Admit:
    """The object fits as things are."""


@dataclass(frozen=True)
class MakeRoom:
    """The object fits after evicting these secondary copies and spilling these primaries."""

    evict: tuple[str, ...]
    spill: tuple[str, ...]

    @property
    def object_ids(self) -> tuple[str, ...]:
        return self.evict + self.spill


@dataclass(frozen=True)
class Full:
    """The object cannot fit; ``reason`` says why in one sentence."""

    reason: str


Admission = Admit | MakeRoom | Full


def _lru(objects: Iterable[StoredObject]) -> list[StoredObject]:
    # Ties broken by id so a plan never depends on dict order.
    return sorted(objects, key=lambda o: (o.last_access, o.object_id))


def _take_until(candidates: list[StoredObject], needed: int) -> tuple[list[str], int]:
    chosen: list[str] = []
    freed = 0
    for candidate in candidates:
        if freed >= needed:
            break
        chosen.append(candidate.object_id)
        freed += candidate.size
    return chosen, freed


def plan_admission(state: StoreState, size: int, *, spilling_enabled: bool) -> Admission:
    """Decide how an object of ``size`` bytes gets into the store.

    Secondary copies go first (the primary lives on another node, so dropping a
    copy loses nothing); then, when spilling is enabled, unpinned primaries,
    least recently used first.  Pinned objects never move.  Nothing is touched
    unless the whole need can be met, so a refused object leaves the store as
    it was.
    """
    if size < 0:
        raise ValueError(f"object size must be non-negative, got {size}")
    free = state.capacity - state.used
    if size <= free:
        return Admit()
    if size > state.capacity:
        return Full(f"the object ({_fmt_bytes(size)}) is larger than the whole store "
                    f"({_fmt_bytes(state.capacity)})")
    needed = size - free
    movable = [o for o in state.objects.values() if not o.spilled and not o.pinned]
    evict, evicted = _take_until(_lru(o for o in movable if not o.primary), needed)
    spill: list[str] = []
    spilled = 0
    if evicted < needed and spilling_enabled:
        spill, spilled = _take_until(_lru(o for o in movable if o.primary), needed - evicted)
    if evicted + spilled < needed:
        if spilling_enabled:
            return Full(f"{_fmt_bytes(needed)} more is needed but only "
                        f"{_fmt_bytes(evicted + spilled)} is held by objects that are not pinned")
        return Full(f"{_fmt_bytes(needed)} more is needed, spilling is disabled and secondary "
                    f"copies hold only {_fmt_bytes(evicted)}")
    return MakeRoom(evict=tuple(evict), spill=tuple(spill))


@dataclass(frozen=True)
class CallSiteUsage:
    call_site: str
    bytes: int
    count: int


def usage_by_call_site(state: StoreState) -> list[CallSiteUsage]:
    """Bytes and object counts in shared memory per call site, largest first."""
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for obj in state.objects.values():
        if obj.spilled:
            continue
        entry = totals[obj.call_site or "(unknown call site)"]
        entry[0] += obj.size
        entry[1] += 1
    usages = [CallSiteUsage(site, total, count) for site, (total, count) in totals.items()]
    return sorted(usages, key=lambda u: (-u.bytes, u.call_site))


def describe_full(state: StoreState, size: int, *, spilling_enabled: bool = False,
                  top: int = 5) -> str:
    """The :class:`ObjectStoreFullError` message: the request, what holds the memory, what to do."""
    resident = [o for o in state.objects.values() if not o.spilled]
    pinned = sum(1 for o in resident if o.pinned)
    lines = [
        f"cannot store an object of {_fmt_bytes(size)}: the object store has "
        f"{_fmt_bytes(state.used)} of {_fmt_bytes(state.capacity)} used "
        f"({len(resident)} objects, {pinned} pinned by running tasks), "
        f"{_fmt_bytes(max(state.capacity - state.used, 0))} free.",
    ]
    usages = usage_by_call_site(state)
    if usages:
        lines.append("Largest users by call site:")
        for usage in usages[:top]:
            plural = "object" if usage.count == 1 else "objects"
            lines.append(f"  {_fmt_bytes(usage.bytes)} in {usage.count} {plural} "
                         f"created at {usage.call_site}")
        if len(usages) > top:
            lines.append(f"  ... and {len(usages) - top} more call sites")
    if size > state.capacity:
        lines.append("The object is larger than the whole store: raise object_store_memory "
                     "or split the value into smaller objects.")
    elif spilling_enabled:
        lines.append("Spilling is on but everything that could be spilled is pinned by running "
                     "tasks; raise object_store_memory or hold fewer objects at once.")
    else:
        lines.append("Object spilling is off (object_spilling=False): turn it on, raise "
                     "object_store_memory, or drop references you no longer need.")
    lines.append("Run `tracedray memory` to see every object and who holds it.")
    return "\n".join(lines)


def _fmt_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")
