"""The raylet-side object store of one node: accounting, spilling, restoring, freeing.

Writers create object files themselves (:mod:`.client`) and then call
:meth:`ObjectStore.seal`; from then on the store owns the file.  The store is
thread-safe (the raylet's gRPC threads call it) and keeps one lock over its
bookkeeping.  Spill and restore copies run under that lock, so a spill of a
large object delays other store calls on the node by the copy time (sendfile,
about 2 GB/s); in exchange no reader can ever see a half-moved object.

A writer may seal without waiting for the answer (raylet/seal_channel.py), so a seal
can arrive after a lookup or a free of its object. The store is given ``settle``: a
lookup of an object it does not hold first waits for the seals already sent. A free of
an object it does not hold is remembered (a bounded number of them), and a seal that
arrives for it later frees it at once.

Readers that need an object to stay in shared memory while they map it pin it
first: ``pin(id); loc = ensure_local(id); map...; unpin(id)``.  An object that
is spilled after a reader mapped it stays valid for that reader: Linux keeps an
unlinked file's pages alive while they are mapped.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tracedray import config
from tracedray.core.address import Address
from tracedray.core.object_store import files, moves, receiving
from tracedray.core.object_store.accounting import ObjectStoreStatistics, StoreCounters, snapshot
from tracedray.core.object_store.client import map_object
from tracedray.core.object_store.deleter import Deleter
from tracedray.core.object_store.holdings import Holdings, StoredObjectInfo
from tracedray.core.object_store.policy import (
    Admission,
    Full,
    MakeRoom,
    StoredObject,
    describe_full,
    plan_admission,
)
from tracedray.core.object_store.pool import FilePool
from tracedray.core.object_store.remembered import Remembered
from tracedray.exceptions import ConfigError, ObjectStoreFullError, RaySystemError
from tracedray.logs import get_logger
from tracedray.telemetry import instruments
from tracedray.telemetry.cluster_events import StoreEvents

remove_orphans = files.remove_orphans

# Why an object leaves the store (the object.free span says it, statistics() counts it):
# its owner let go of its last reference. The raylet's other reasons are its owner's
# exit or death (raylet/owner_death.py).
FREE_RELEASED = "released"

_log = get_logger(__name__)


@dataclass(frozen=True)
class ObjectLocation:
    object_id: str
    kind: Literal["shm", "spilled"]
    path: Path
    size: int


__all__ = ["FREE_RELEASED", "ObjectLocation", "ObjectStore", "ObjectStoreStatistics",
           "StoredObjectInfo", "remove_orphans"]


class ObjectStore:
    def __init__(self, *, node_id: str, capacity_bytes: int, name_prefix: str, spill_dir: Path,
                 spilling_enabled: bool = True, shm_dir: Path = Path("/dev/shm"),
                 on_evict: Callable[[Sequence[str]], None] | None = None,
                 settle: Callable[[], object] | None = None,
                 pool_idle_s: float | None = None) -> None:
        """``on_evict`` is told (outside the store's lock) which secondary copies were
        dropped to make room, so the raylet can update the cluster's location table.
        ``settle`` waits for the seals sent to this node before the call (see above).
        ``pool_idle_s`` defaults to ``TRACEDRAY_OBJECT_POOL_IDLE_S`` (pool.py)."""
        if capacity_bytes <= 0:
            raise ConfigError(f"object_store_memory must be positive, got {capacity_bytes}")
        self._node_id = node_id
        self._capacity = capacity_bytes
        self._events = StoreEvents(_log, node_id, capacity_bytes)
        self._prefix = files.validate_name_prefix(name_prefix)
        self._spill_dir = spill_dir
        self._spilling_enabled = spilling_enabled
        self._shm_dir = shm_dir
        self._on_evict = on_evict
        self._settle = settle
        self._lock = threading.Lock()
        self._closed = False
        self._held = Holdings(node_id, capacity_bytes)
        self._counts = StoreCounters()
        # Frees that came before their object's seal (id -> reason), and why seals
        # were refused (id -> message), oldest first.
        self._freed_early = Remembered()
        self._refused = Remembered()
        # Freed files kept for new puts (pool.py), in the room objects leave free; big
        # files leave it (and the store) through the deleter, off the lock.
        self._pool = FilePool(shm_dir, self._prefix, config.OBJECT_POOL_IDLE_S.get()
                              if pool_idle_s is None else pool_idle_s)
        self._deleter = Deleter(shm_dir, self._prefix)
        _warn_if_shm_smaller(shm_dir, capacity_bytes, node_id)

    # ------------------------------------------------------------------ paths

    def object_path(self, object_id: str) -> Path:
        """Where a writer creates the object's file before sealing it."""
        return files.shm_path(self._shm_dir, self._prefix, object_id)

    def _spill_path(self, object_id: str) -> Path:
        return files.spill_path(self._spill_dir, object_id)

    # ------------------------------------------------------------ admission

    def seal(self, object_id: str, size: int, *, owner: str, call_site: str = "",
             primary: bool = True, owner_address: Address | None = None) -> None:
        """Take over the file a writer created at :meth:`object_path`. ``owner`` (a
        worker id; its ``owner_address`` when known) is the process the object goes with.

        Makes room by evicting secondary copies and spilling unpinned primaries
        when needed; when the object cannot fit, its file is removed and
        :class:`ObjectStoreFullError` explains what holds the memory.  Sealing an
        object that is already stored (a retried task's result) keeps the stored
        copy.
        """
        path = self.object_path(object_id)
        start_ns = time.time_ns()
        with self._lock:
            self._check_open()
            existing = self._held.objects.get(object_id)
            if existing is not None:
                if existing.spilled:
                    # The writer could create the file only because the stored
                    # copy was spilled; the spilled copy stays authoritative.
                    files.unlink_quietly(path)
                return
            inode = files.check_written_size(path, size)
            self._pool.claimed(inode)  # the writer reused a pool file
            early = self._freed_early.pop(object_id)
            if early is not None:  # its owner let go before the seal came
                if not self._pool.keep(path, size, self._capacity - self._held.used,
                                       time.monotonic()):
                    self._deleter.discard(path, size)
                self._counts.count_free(size, early)
                _log.debug("object freed before its seal", object_id=object_id, size=size,
                           node_id=self._node_id, reason=early)
                return
            try:
                evicted = self._admit(object_id, size, path)
            except ObjectStoreFullError as exc:
                self._refused.remember(object_id, str(exc))
                raise
            self._held.add(object_id, size, owner=owner, call_site=call_site, primary=primary,
                           owner_address=owner_address)
            entered = (self._held.used, time.time_ns())
        _record_seal(self._node_id, self._capacity, object_id, size, call_site, primary,
                     start_ns, entered)
        self._notify_evicted(evicted)

    def receive(self, object_id: str, size: int, chunks: Iterable[bytes], *, owner: str,
                call_site: str = "", owner_address: Address | None = None) -> None:
        """Store a secondary copy pulled from another node, chunk by chunk (the gRPC
        stream), as :meth:`receive_into` does."""
        fill = receiving.chunks_filler(chunks, size, f"transfer of object {object_id} to "
                                                     f"node {self._node_id}")
        self.receive_into(object_id, size, fill, owner=owner, call_site=call_site,
                          owner_address=owner_address)

    def receive_into(self, object_id: str, size: int, fill: Callable[[int], object], *,
                     owner: str, call_site: str = "",
                     owner_address: Address | None = None) -> None:
        """Store a secondary copy that ``fill`` writes into a file descriptor: a pool file
        of its size class when there is one, else a new one, cut to its full size first
        (``fill`` may ``pwrite`` its ranges in any order, from several threads); renamed
        into place only after admission (a reader never maps a partial copy), removed
        when ``fill`` raises (a failed transfer leaves nothing behind)."""
        if self.contains(object_id):
            return
        start_ns = time.time_ns()
        temporary = files.temp_path(self.object_path(object_id), "receiving")
        with self._lock:  # a freed file of its class: no page to allocate (pool.py)
            pooled = self._pool.take(size, temporary)
        receiving.fill_file(temporary, size, fill, pooled, self._shm_dir)
        with self._lock:  # admit the complete copy and rename it into place
            if self._closed:
                files.unlink_quietly(temporary)
            self._check_open()
            if object_id in self._held.objects:  # a concurrent pull finished first
                files.unlink_quietly(temporary)
                return
            evicted = self._admit(object_id, size, temporary)
            os.replace(temporary, self.object_path(object_id))
            self._held.add(object_id, size, owner=owner, call_site=call_site, primary=False,
                           owner_address=owner_address)
            entered = (self._held.used, time.time_ns())
        _record_seal(self._node_id, self._capacity, object_id, size, call_site, False,
                     start_ns, entered)
        self._notify_evicted(evicted)
        _log.debug("object received", object_id=object_id, size=size, node_id=self._node_id)

    def open_for_transfer(self, object_id: str) -> tuple[int, int]:
        """A read-only descriptor of the object's file (shared memory or spill file) and
        its size, for the data path to ``sendfile`` from. Opened under the lock, so a
        concurrent spill or free cannot pull the file away: an open descriptor keeps an
        unlinked file's bytes. The caller closes it."""
        self._wait_if_unknown(object_id)
        with self._lock:
            obj = self._held.require(object_id)
            self._held.touch(object_id)
            if obj.spilled:
                return moves.open_spilled(object_id, self._spill_path(object_id)), obj.size
            return moves.open_for_reading(object_id, self.object_path(object_id)), obj.size

    def _admit(self, object_id: str, size: int, new_file: Path) -> list[str]:
        """Make room for ``size`` bytes or remove ``new_file`` and raise; returns evicted ids."""
        plan = self._plan(size)
        if isinstance(plan, Full):
            message = describe_full(self._held.state(), size,
                                    spilling_enabled=self._spilling_enabled)
            files.unlink_quietly(new_file)
            self._counts.rejected_count += 1
            _log.warning("object store full", object_id=object_id, size=size,
                         node_id=self._node_id, used=self._held.used, capacity=self._capacity,
                         reason=plan.reason)
            raise ObjectStoreFullError(message)
        if isinstance(plan, MakeRoom):
            try:
                self._make_room(plan)
            except BaseException:
                files.unlink_quietly(new_file)
                raise
            return list(plan.evict)
        return []

    def _make_room(self, plan: MakeRoom) -> None:
        for object_id in plan.evict:
            self._evict(object_id)
        for object_id in plan.spill:
            self._spill(object_id)

    # --------------------------------------------------------------- reading

    def contains(self, object_id: str) -> bool:
        self._wait_if_unknown(object_id)
        with self._lock:
            return object_id in self._held.objects

    def locate(self, object_id: str) -> ObjectLocation | None:
        """Where the object is now, or ``None`` when this node does not hold it."""
        self._wait_if_unknown(object_id)
        with self._lock:
            obj = self._held.objects.get(object_id)
            if obj is None:
                return None
            self._held.touch(object_id)
            return self._location(obj)

    def ensure_local(self, object_id: str) -> ObjectLocation:
        """Bring a spilled object back into shared memory when it fits (spilling others if
        needed); otherwise return its spill location, which readers can still read."""
        self._wait_if_unknown(object_id)
        with self._lock:
            self._check_open()
            obj = self._held.require(object_id)
            self._held.touch(object_id)
            if not obj.spilled:
                return self._location(obj)
            plan = self._plan(obj.size)
            if isinstance(plan, Full):
                _log.info("object restore deferred", object_id=object_id, size=obj.size,
                          node_id=self._node_id, reason=plan.reason)
                return self._location(obj)
            evicted: list[str] = []
            if isinstance(plan, MakeRoom):
                self._make_room(plan)
                evicted = list(plan.evict)
            self._restore(object_id)
            location = self._location(self._held.objects[object_id])
        self._notify_evicted(evicted)
        return location

    def read_chunks(self, object_id: str, chunk_size: int = 4 << 20) -> Iterator[memoryview]:
        """The packed object in chunks, for node-to-node transfer.

        The file is opened or mapped under the lock, so a concurrent spill or
        free cannot pull it away mid-transfer; the chunks are read outside it.
        """
        if chunk_size <= 0:
            raise ValueError(f"chunk_size must be positive, got {chunk_size}")
        self._wait_if_unknown(object_id)
        with self._lock:
            obj = self._held.require(object_id)
            self._held.touch(object_id)
            if not obj.spilled:
                view = map_object(self.object_path(object_id))
            else:
                fd = moves.open_spilled(object_id, self._spill_path(object_id))
        if not obj.spilled:
            for start in range(0, view.nbytes, chunk_size):
                yield view[start:start + chunk_size]
            return
        yield from moves.spilled_chunks(object_id, fd, obj.size, chunk_size)

    # ------------------------------------------------------------- pinning

    def pin(self, object_id: str) -> None:
        """Mark the object in use (by a running task or a reader): it is never spilled or
        evicted until every pin is released.  Pins nest."""
        self._wait_if_unknown(object_id)
        with self._lock:
            self._held.pin(object_id)

    def unpin(self, object_id: str) -> None:
        """Release one pin; unpinning an object that was freed meanwhile does nothing."""
        with self._lock:
            if not self._held.unpin(object_id) and object_id in self._held.objects:
                _log.warning("unpin of an object that is not pinned", object_id=object_id,
                             node_id=self._node_id)

    # ------------------------------------------------------------- freeing

    def free(self, object_ids: Iterable[str], reason: str = FREE_RELEASED) -> int:
        """Remove the objects (shared memory and spill files); returns the bytes freed.
        ``reason`` says why (the span's ``tracedray.object.free_reason``, counted by
        :meth:`statistics`). Unknown ids are skipped: an object may be freed by several
        owners' messages."""
        freed = 0
        with self._lock:
            for object_id in object_ids:
                obj = self._held.objects.get(object_id)
                if obj is None:  # unknown, or its seal is still on its way
                    self._freed_early.remember(object_id, reason)
                    continue
                moves.free(self._held, self._counts, self._events, self._pool, obj, reason,
                           self._location(obj).path, self._deleter.discard)
                freed += obj.size
                _log.debug("object freed", object_id=object_id, size=obj.size,
                           spilled=obj.spilled, node_id=self._node_id, store_used=self._held.used,
                           reason=reason)
        return freed

    def release_idle_pool(self, now: float | None = None) -> int:
        """Delete the pool files unused for the pool's idle time as of ``now`` (monotonic),
        so an idle node gives its memory back (the raylet calls it every second or so)."""
        with self._lock:
            if self._closed:
                return 0
            doomed = self._pool.release_idle(time.monotonic() if now is None else now)
        self._deleter.delete(doomed, emptied=True)
        return len(doomed)

    def shutdown(self) -> None:
        """Remove every file this store made or was handed (no leaks in /dev/shm)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for obj in self._held.objects.values():
                files.unlink_quietly(self._location(obj).path)
            count = len(self._held.objects)
            self._pool.clear()
            self._held.clear()
        self._deleter.close()  # what it was handed is gone before the orphans' sweep
        # Files written but never sealed, and interrupted transfers.
        orphans = files.remove_orphans(self._shm_dir, self._prefix)
        _log.info("object store shut down", node_id=self._node_id, objects=count,
                  unsealed_files=orphans)

    # --------------------------------------------------------- introspection

    def usage(self) -> tuple[int, int]:
        """(bytes in shared memory now, capacity): what a seal's reply reports, without
        the walk over every object that :meth:`statistics` makes."""
        with self._lock:
            return self._held.used, self._capacity

    def objects(self) -> list[StoredObjectInfo]:
        with self._lock:
            return [self._held.info(o) for o in self._held.objects.values()]

    def describe(self, object_id: str) -> StoredObjectInfo | None:
        """The object's row, or ``None`` when this node does not hold it."""
        self._wait_if_unknown(object_id)
        with self._lock:
            obj = self._held.objects.get(object_id)
            return None if obj is None else self._held.info(obj)

    def owners(self) -> dict[str, Address | None]:
        """Each owner (worker id) of an object held here, with its address if known."""
        with self._lock:
            return self._held.owners()

    def owned_by(self, owners: Iterable[str]) -> dict[str, list[str]]:
        """The ids of the objects held here that each of ``owners`` owns (those with any),
        seals already sent included."""
        if self._settle is not None:
            self._settle()
        with self._lock:
            return self._held.owned_by(owners)

    def statistics(self) -> ObjectStoreStatistics:
        with self._lock:
            return snapshot(self._held, self._counts, self._pool.statistics(),
                            self._deleter.statistics())

    def __repr__(self) -> str:
        stats = self.statistics()
        return (f"<ObjectStore node={self._node_id[:12]} used={stats.used}/{stats.capacity} "
                f"objects={stats.num_objects} spilled={stats.num_spilled} "
                f"pinned={stats.num_pinned}{' closed' if self._closed else ''}>")

    # --------------------------------------------------- moves (lock held)

    def _spill(self, object_id: str) -> None:
        moves.spill(self._held, self._counts, self._events, object_id,
                    self.object_path(object_id), self._spill_path(object_id))

    def _restore(self, object_id: str) -> None:
        moves.restore(self._held, self._counts, self._events, object_id,
                      self._spill_path(object_id), self.object_path(object_id), self._shm_dir)

    def _evict(self, object_id: str) -> None:
        moves.evict(self._held, self._counts, self._events, object_id,
                    self.object_path(object_id), self._deleter.discard)

    # ------------------------------------------------------------- helpers

    def _location(self, obj: StoredObject) -> ObjectLocation:
        if obj.spilled:
            return ObjectLocation(obj.object_id, "spilled", self._spill_path(obj.object_id),
                                  obj.size)
        return ObjectLocation(obj.object_id, "shm", self.object_path(obj.object_id), obj.size)

    def _check_open(self) -> None:
        if self._closed:
            raise RaySystemError(f"the object store of node {self._node_id} is shut down")

    def refusal(self, object_id: str) -> str | None:
        """Why the seal of ``object_id`` was refused, if it was (recently)."""
        with self._lock:
            return self._refused.get(object_id)

    def _wait_if_unknown(self, object_id: str) -> None:
        """Before a lookup of an object not held here: wait for the seals already sent."""
        if self._settle is None:
            return
        with self._lock:
            if object_id in self._held.objects:
                return
        self._settle()

    def _plan(self, size: int) -> Admission:
        """How ``size`` more bytes get in (policy.py), once the pool files that admission
        needs the room of are deleted: the pool goes before any object is evicted or
        spilled."""
        room = self._capacity - self._held.used - size
        if self._pool.bytes > room:
            self._deleter.delete(self._pool.trim(room), emptied=True)
        return plan_admission(self._held.state(), size, spilling_enabled=self._spilling_enabled)

    def _notify_evicted(self, object_ids: list[str]) -> None:
        if object_ids and self._on_evict is not None:
            self._on_evict(object_ids)


def _warn_if_shm_smaller(shm_dir: Path, capacity: int, node_id: str) -> None:
    try:
        stats = os.statvfs(shm_dir)
    except OSError as exc:
        raise ConfigError(f"shared-memory folder {shm_dir} is unusable: {exc}") from exc
    available = stats.f_bavail * stats.f_frsize
    if available < capacity:
        _log.warning("shared memory is smaller than the object store capacity",
                     shm_dir=str(shm_dir), available=available,
                     capacity=capacity, node_id=node_id)


def _record_seal(node_id: str, capacity: int, object_id: str, size: int, call_site: str,
                 primary: bool, start_ns: int, entered: tuple[int, int]) -> None:
    """``object.seal``: a copy entered shared memory (put, task or actor return, pulled
    copy). Recorded once the lock is released, stamped with the use and time read under
    it, so the timeline orders it with the frees and spills around it."""
    used, end_ns = entered
    instruments.object_sealed(object_id, size, call_site, primary, node_id, used,
                              capacity, start_ns, end_ns)
