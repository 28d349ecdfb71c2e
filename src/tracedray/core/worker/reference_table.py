"""Reference counting and ownership for one process.

The owner of an object is the process that created it (the caller of ``.remote()``
or ``put``). It frees the object when no reference remains anywhere:
  local refs in this process + pending tasks using it as an argument + borrowers
  (other processes holding it, or objects that captured it).
A process that receives a ref it does not own becomes a borrower: it tells the
owner (+1) when its first local ref appears and (-1) when the last one goes.

What this process tells other owners (its borrows beginning and ending, and refs
captured in objects it owns being captured and let go) is one queue of
``ReferenceUpdate``s in the order the table decided them, and the core worker delivers
it in that order. The order is what makes a nested ref safe: deserializing an outer
value registers the borrow of the ref inside it before the outer can be released, so
the owner always hears "+1 this process" before "-1 captured in the outer". (An owner
keeps borrowers as a set, so it must never see a borrow's -1 and +1 swapped either.)

Finalizers (``ObjectRef.__del__``) only enqueue; the queue is drained under the
table's lock by the next operation or the core worker's flusher thread, so a
garbage collection at any point can never deadlock or corrupt the table.
The side effects (free an object, tell an owner) are returned as
``ReleaseAction``s and executed by the caller outside the lock.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from tracedray.core.address import Address

# Reference types as shown by `tracedray memory` (Ray's names).
LOCAL_REFERENCE = "LOCAL_REFERENCE"
USED_BY_PENDING_TASK = "USED_BY_PENDING_TASK"
CAPTURED_IN_OBJECT = "CAPTURED_IN_OBJECT"
PINNED_IN_MEMORY = "PINNED_IN_MEMORY"
ACTOR_HANDLE = "ACTOR_HANDLE"


# An entry's borrowers and captured refs until it has some: most entries never do, and a
# set and a list per ref made two of the three objects the cyclic collector tracked for
# each live ref (it scans them all in each full pass).
NO_BORROWERS: frozenset[str] = frozenset()
NOTHING_CONTAINED: tuple[tuple[bytes, Address | None], ...] = ()


@dataclass
class RefEntry:
    owned: bool
    owner: Address | None
    call_site: str = ""
    local: int = 0
    submitted: int = 0
    # A set of its own from the first borrower on (``add_borrower``).
    borrowers: set[str] | frozenset[str] = NO_BORROWERS
    size: int = -1
    store_node_id: str = ""  # node whose shared-memory store holds the primary copy
    store_raylet: Address | None = None
    task_status: str = "PENDING"
    contained: Sequence[tuple[bytes, Address | None]] = NOTHING_CONTAINED
    created_at: float = field(default_factory=time.time)


def add_borrower(entry: RefEntry, borrower: str) -> None:
    borrowers = entry.borrowers
    if isinstance(borrowers, frozenset):
        entry.borrowers = {borrower}
    else:
        borrowers.add(borrower)


def captured_in(outer_id: bytes) -> str:
    """The borrower name of object ``outer_id`` for the refs serialized into it."""
    return "object:" + outer_id.hex()


class ReferenceUpdate(NamedTuple):
    """A message for another process that owns ``object_id``: ``borrower`` holds it
    (+1) or no longer does (-1)."""

    object_id: bytes
    owner: Address
    borrower: str
    delta: int


def runs_by_owner(updates: list[ReferenceUpdate]
                  ) -> list[tuple[Address, list[ReferenceUpdate]]]:
    """Consecutive updates for the same owner, batched, in order: one message per run.
    Not grouped further: an update for one owner can depend on an earlier one for
    another (a -1 on an outer object makes its owner send a -1 on the inner one)."""
    runs: list[tuple[Address, list[ReferenceUpdate]]] = []
    for update in updates:
        if runs and runs[-1][0] == update.owner:
            runs[-1][1].append(update)
        else:
            runs.append((update.owner, [update]))
    return runs


class ObjectInfo(NamedTuple):
    """Where an owned value is and which refs it captured (``set_objects_info``)."""
    object_id: bytes
    size: int
    store_node_id: str
    store_raylet: Address | None
    task_status: str
    contained: list[tuple[bytes, Address | None]]


class ReleaseAction(NamedTuple):
    """What to do once an entry is gone: free an owned object and let go of the refs it
    captured that this process owns (``contained``; the other owners' are already queued
    as ``ReferenceUpdate``s), or forget a borrowed one (its -1 is queued too). A named
    tuple: one is made per released ref (5,000 for a burst's results), and a frozen
    dataclass's constructor cost several times as much."""

    object_id: bytes
    owned: bool
    owner: Address | None
    store_node_id: str
    store_raylet: Address | None
    contained: tuple[tuple[bytes, Address | None], ...]
    size: int
    # It queued -1s for captured refs other processes own: worth delivering soon.
    released_remote_captured: bool = False


def is_released(entry: RefEntry) -> bool:
    return entry.local <= 0 and entry.submitted <= 0 and not entry.borrowers


def reference_type(entry: RefEntry) -> str:
    if entry.local > 0:
        return LOCAL_REFERENCE
    if entry.submitted > 0:
        return USED_BY_PENDING_TASK
    if any(b.startswith("object:") for b in entry.borrowers):
        return CAPTURED_IN_OBJECT
    return PINNED_IN_MEMORY  # held only by borrowers in other processes


@dataclass(frozen=True)
class ReferenceTableStatistics:
    entries: int
    owned: int
    borrowed: int
    pending_releases: int
    released_total: int


class ReferenceTable:
    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self._entries: dict[bytes, RefEntry] = {}
        self._lock = threading.RLock()
        self._pending: collections.deque[bytes] = collections.deque()
        self._released_total = 0
        # Updates for other owners, in the order decided (see module docstring), and
        # releases found while answering a query, both waiting for the core worker.
        self._updates: list[ReferenceUpdate] = []
        self._deferred_actions: list[ReleaseAction] = []

    # --- finalizer-safe entry points
    def remove_local_ref(self, object_id: bytes) -> None:
        self._pending.append(object_id)  # deque.append is atomic; see module docstring

    def add_local_ref(self, object_id: bytes, owner: Address | None, call_site: str,
                      *, owned: bool = False) -> None:
        with self._lock:
            # Releases drained here are kept for the flusher: the caller (ObjectRef's
            # constructor) cannot run them, and dropping them would leak the objects.
            if self._pending:
                self._drain_into_actions()
            entry = self._entries.get(object_id)
            if entry is None:
                is_owned = owned or (owner is not None and owner.worker_id == self.worker_id)
                entry = RefEntry(is_owned, owner, call_site)  # positional: ~0.2 µs less
                self._entries[object_id] = entry
                if not is_owned and owner is not None:
                    self._updates.append(ReferenceUpdate(object_id, owner, self.worker_id, +1))
            entry.local += 1

    # --- owner side
    def set_object_info(self, object_id: bytes, *, size: int, store_node_id: str,
                        store_raylet: Address | None, task_status: str,
                        contained: list[tuple[bytes, Address | None]] | None = None
                        ) -> list[ReleaseAction]:
        """Record where an owned value is and which refs it captured. A value whose
        refs are all gone already (a task's result dropped before it finished) is
        released at once: the returned action frees its copy and its captured refs,
        which nothing else would (its entry's release knew neither)."""
        return self.set_objects_info([ObjectInfo(object_id, size, store_node_id, store_raylet,
                                                 task_status, contained or [])])

    def set_objects_info(self, infos: list[ObjectInfo]) -> list[ReleaseAction]:
        """``set_object_info`` for several values under one lock (a batch of results)."""
        actions: list[ReleaseAction] = []
        with self._lock:
            entries = self._entries
            for info in infos:
                entry = entries.get(info.object_id)
                if entry is None:
                    gone = RefEntry(owned=True, owner=None, size=info.size,
                                    store_node_id=info.store_node_id,
                                    store_raylet=info.store_raylet,
                                    contained=list(info.contained))
                    actions.extend(self._release_locked(info.object_id, gone))
                    continue
                entry.size = info.size
                entry.store_node_id = info.store_node_id
                entry.store_raylet = info.store_raylet
                entry.task_status = info.task_status
                if info.contained:
                    entry.contained = info.contained
        return actions

    def add_submitted(self, object_ids: list[bytes]) -> None:
        with self._lock:
            for oid in object_ids:
                entry = self._entries.get(oid)
                if entry is not None:
                    entry.submitted += 1

    def remove_submitted(self, object_ids: list[bytes]) -> list[ReleaseAction]:
        with self._lock:
            actions = self._drain_locked()
            for oid in object_ids:
                entry = self._entries.get(oid)
                if entry is not None:
                    entry.submitted -= 1
                    actions.extend(self._maybe_release_locked(oid, entry))
            return actions

    def add_captured(self, inner_id: bytes, owner: Address | None, outer_id: bytes) -> None:
        """``inner_id`` was serialized into ``outer_id`` (owned here): it lives while the
        outer does. An inner owned elsewhere is told through the update queue, so the
        news is ordered before this process's own -1 for it."""
        with self._lock:
            if self._is_local(owner):
                entry = self._entries.get(inner_id)
                if entry is not None:
                    add_borrower(entry, captured_in(outer_id))
            else:
                assert owner is not None
                self._updates.append(ReferenceUpdate(inner_id, owner, captured_in(outer_id), +1))

    def update_borrower(self, object_id: bytes, borrower: str, delta: int) -> list[ReleaseAction]:
        with self._lock:
            entry = self._entries.get(object_id)
            if entry is None:
                return []
            if delta > 0:
                add_borrower(entry, borrower)
                return []
            borrowers = entry.borrowers
            if isinstance(borrowers, set):  # else it has none
                borrowers.discard(borrower)
            return self._maybe_release_locked(object_id, entry)

    def forget_unreferenced(self, object_ids: list[bytes],
                            forget: Callable[[list[bytes]], None]) -> list[bytes]:
        """Call ``forget`` (e.g. dropping cached values) with the ids that still have no
        entry, atomically with respect to new references: a release handled late must
        not drop the value fetched for a reference made again since (a task that gets the
        same borrowed ref its predecessor on this worker had). Returns those ids."""
        with self._lock:
            gone = [oid for oid in object_ids if oid not in self._entries]
            forget(gone)
            return gone

    # --- queries
    def get(self, object_id: bytes) -> RefEntry | None:
        with self._lock:
            return self._entries.get(object_id)

    def owns(self, object_id: bytes) -> bool:
        with self._lock:
            entry = self._entries.get(object_id)
            return entry is not None and entry.owned

    def snapshot(self) -> list[tuple[bytes, RefEntry]]:
        with self._lock:
            self._drain_into_actions()
            return [(oid, _copy(entry)) for oid, entry in self._entries.items()]

    def drain(self) -> list[ReleaseAction]:
        with self._lock:
            return self._drain_locked()

    def take_updates(self) -> list[ReferenceUpdate]:
        """The updates for other owners, oldest first; send them in this order."""
        with self._lock:
            self._drain_into_actions()
            updates, self._updates = self._updates, []
            return updates

    def statistics(self) -> ReferenceTableStatistics:
        with self._lock:
            owned = sum(1 for e in self._entries.values() if e.owned)
            return ReferenceTableStatistics(len(self._entries), owned, len(self._entries) - owned,
                                            len(self._pending), self._released_total)

    def __repr__(self) -> str:
        s = self.statistics()
        return f"<ReferenceTable entries={s.entries} owned={s.owned} borrowed={s.borrowed}>"

    # --- internals
    def _is_local(self, owner: Address | None) -> bool:
        return owner is None or owner.worker_id == self.worker_id

    def _drain_into_actions(self) -> None:
        self._deferred_actions.extend(self._drain_locked())

    def has_dropped_refs(self) -> bool:
        """Whether refs were dropped, or releases deferred, since the last take (no lock:
        a hint)."""
        return bool(self._pending) or bool(self._deferred_actions)

    def take_deferred_actions(self) -> list[ReleaseAction]:
        with self._lock:
            actions = self._drain_locked()
            actions[:0] = self._deferred_actions
            self._deferred_actions = []
            return actions

    def _drain_locked(self) -> list[ReleaseAction]:
        actions: list[ReleaseAction] = []
        pending = self._pending
        while pending:
            oid = pending.popleft()
            entry = self._entries.get(oid)
            if entry is None:
                continue
            entry.local -= 1
            actions.extend(self._maybe_release_locked(oid, entry))
        return actions

    def _maybe_release_locked(self, object_id: bytes, entry: RefEntry) -> list[ReleaseAction]:
        if not is_released(entry):
            return []
        del self._entries[object_id]
        self._released_total += 1
        return self._release_locked(object_id, entry)

    def _release_locked(self, object_id: bytes, entry: RefEntry) -> list[ReleaseAction]:
        local_inner: list[tuple[bytes, Address | None]] = []
        if not entry.owned:
            if entry.owner is not None:
                self._updates.append(ReferenceUpdate(object_id, entry.owner, self.worker_id, -1))
        else:
            # Queued now, under the lock: after every borrow registered before this
            # release (a borrow of an inner ref begins while its outer is still alive).
            for inner_id, inner_owner in entry.contained:
                if self._is_local(inner_owner):
                    local_inner.append((inner_id, inner_owner))
                else:
                    assert inner_owner is not None
                    self._updates.append(ReferenceUpdate(inner_id, inner_owner,
                                                         captured_in(object_id), -1))
        return [ReleaseAction(object_id, entry.owned, entry.owner, entry.store_node_id,
                              entry.store_raylet, tuple(local_inner), entry.size,
                              len(local_inner) < len(entry.contained))]


def _copy(entry: RefEntry) -> RefEntry:
    return RefEntry(entry.owned, entry.owner, entry.call_site, entry.local, entry.submitted,
                    set(entry.borrowers), entry.size, entry.store_node_id, entry.store_raylet,
                    entry.task_status, list(entry.contained), entry.created_at)
