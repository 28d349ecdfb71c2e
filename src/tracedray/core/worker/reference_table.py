"""Reference counting and ownership for one process.

The owner of an object is the process that created it (the caller of ``.remote()``
or ``put``). It frees the object when no reference remains anywhere:
  local refs in this process + pending tasks using it as an argument + borrowers
  (other processes holding it, or objects that captured it).
A process that receives a ref it does not own becomes a borrower: it tells the
owner (+1) when its first local ref appears and (-1) when the last one goes.

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
from collections.abc import Callable
from dataclasses import dataclass, field

from tracedray.core.address import Address

# Reference types as shown by `tracedray memory` (Ray's names).
LOCAL_REFERENCE = "LOCAL_REFERENCE"
USED_BY_PENDING_TASK = "USED_BY_PENDING_TASK"
CAPTURED_IN_OBJECT = "CAPTURED_IN_OBJECT"
PINNED_IN_MEMORY = "PINNED_IN_MEMORY"
ACTOR_HANDLE = "ACTOR_HANDLE"


@dataclass
class RefEntry:
    owned: bool
    owner: Address | None
    call_site: str = ""
    local: int = 0
    submitted: int = 0
    borrowers: set[str] = field(default_factory=set)
    size: int = -1
    store_node_id: str = ""  # node whose shared-memory store holds the primary copy
    store_raylet: Address | None = None
    task_status: str = "PENDING"
    contained: list[tuple[bytes, Address | None]] = field(default_factory=list)
    created_at: float = field(default_factory=time.time)


@dataclass(frozen=True)
class ReleaseAction:
    """What to do once an entry is gone: free an owned object, or tell its owner."""

    object_id: bytes
    owned: bool
    owner: Address | None
    store_node_id: str
    store_raylet: Address | None
    contained: tuple[tuple[bytes, Address | None], ...]
    size: int


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
        # Borrow (+1/-1) notifications for owners, and releases found while answering a
        # query, both waiting for the core worker's flusher to act on them.
        self._borrow_events: list[tuple[bytes, Address | None, int]] = []
        self._deferred_actions: list[ReleaseAction] = []

    # --- finalizer-safe entry points
    def remove_local_ref(self, object_id: bytes) -> None:
        self._pending.append(object_id)  # deque.append is atomic; see module docstring

    def add_local_ref(self, object_id: bytes, owner: Address | None, call_site: str,
                      *, owned: bool = False) -> None:
        with self._lock:
            # Releases drained here are kept for the flusher: the caller (ObjectRef's
            # constructor) cannot run them, and dropping them would leak the objects.
            self._drain_into_actions()
            entry = self._entries.get(object_id)
            if entry is None:
                is_owned = owned or (owner is not None and owner.worker_id == self.worker_id)
                entry = RefEntry(owned=is_owned, owner=owner, call_site=call_site)
                self._entries[object_id] = entry
                if not is_owned:
                    self._borrow_events.append((object_id, owner, +1))
            entry.local += 1

    # --- owner side
    def set_object_info(self, object_id: bytes, *, size: int, store_node_id: str,
                        store_raylet: Address | None, task_status: str,
                        contained: list[tuple[bytes, Address | None]] | None = None) -> None:
        with self._lock:
            entry = self._entries.get(object_id)
            if entry is None:
                return
            entry.size = size
            entry.store_node_id = store_node_id
            entry.store_raylet = store_raylet
            entry.task_status = task_status
            if contained:
                entry.contained = contained

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

    def update_borrower(self, object_id: bytes, borrower: str, delta: int) -> list[ReleaseAction]:
        with self._lock:
            entry = self._entries.get(object_id)
            if entry is None:
                return []
            if delta > 0:
                entry.borrowers.add(borrower)
                return []
            entry.borrowers.discard(borrower)
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

    def take_borrow_events(self) -> list[tuple[bytes, Address | None, int]]:
        with self._lock:
            self._drain_into_actions()
            events, self._borrow_events = self._borrow_events, []
            return events

    def statistics(self) -> ReferenceTableStatistics:
        with self._lock:
            owned = sum(1 for e in self._entries.values() if e.owned)
            return ReferenceTableStatistics(len(self._entries), owned, len(self._entries) - owned,
                                            len(self._pending), self._released_total)

    def __repr__(self) -> str:
        s = self.statistics()
        return f"<ReferenceTable entries={s.entries} owned={s.owned} borrowed={s.borrowed}>"

    # --- internals
    def _drain_into_actions(self) -> None:
        self._deferred_actions.extend(self._drain_locked())

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
        if not entry.owned:
            self._borrow_events.append((object_id, entry.owner, -1))
        return [ReleaseAction(object_id, entry.owned, entry.owner, entry.store_node_id,
                              entry.store_raylet, tuple(entry.contained), entry.size)]


def _copy(entry: RefEntry) -> RefEntry:
    return RefEntry(entry.owned, entry.owner, entry.call_site, entry.local, entry.submitted,
                    set(entry.borrowers), entry.size, entry.store_node_id, entry.store_raylet,
                    entry.task_status, list(entry.contained), entry.created_at)
