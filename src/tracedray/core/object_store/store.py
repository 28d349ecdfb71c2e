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

import errno
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from tracedray.core.address import Address
from tracedray.core.object_store import files
from tracedray.core.object_store.client import hold_for_reading, map_object
from tracedray.core.object_store.policy import (
    Full,
    MakeRoom,
    StoredObject,
    StoreState,
    describe_full,
    plan_admission,
)
from tracedray.core.object_store.pool import FilePool, PoolStatistics
from tracedray.exceptions import ConfigError, ObjectLostError, ObjectStoreFullError, RaySystemError
from tracedray.logs import get_logger
from tracedray.telemetry import instruments
from tracedray.telemetry.cluster_events import StoreEvents

remove_orphans = files.remove_orphans

# Why an object leaves the store (the object.free span says it, statistics() counts it):
# its owner let go of its last reference. The raylet's other reasons are its owner's
# exit or death (raylet/owner_death.py).
FREE_RELEASED = "released"
# How many frees of objects not (yet) held, and refused seals, are remembered.
_REMEMBERED = 4096

_log = get_logger(__name__)


@dataclass(frozen=True)
class ObjectLocation:
    object_id: str
    kind: Literal["shm", "spilled"]
    path: Path
    size: int


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


class ObjectStore:
    def __init__(self, *, node_id: str, capacity_bytes: int, name_prefix: str, spill_dir: Path,
                 spilling_enabled: bool = True, shm_dir: Path = Path("/dev/shm"),
                 on_evict: Callable[[Sequence[str]], None] | None = None,
                 settle: Callable[[], object] | None = None) -> None:
        """``on_evict`` is told (outside the store's lock) which secondary copies were
        dropped to make room, so the raylet can update the cluster's location table.
        ``settle`` waits for the seals sent to this node before the call (see above)."""
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
        self._used = 0
        self._objects: dict[str, StoredObject] = {}
        self._pins: dict[str, int] = {}
        self._created_at: dict[str, float] = {}
        self._spilled_count = self._spilled_bytes = 0
        self._restored_count = self._restored_bytes = 0
        self._evicted_count = self._evicted_bytes = 0
        self._freed_count = self._freed_bytes = 0
        self._freed_by_reason: dict[str, int] = {}
        self._rejected_count = 0
        # Owner (worker id) -> the ids of the objects it owns here: what goes with it.
        self._by_owner: dict[str, set[str]] = {}
        # Frees that came before their object's seal (id -> reason), and why seals
        # were refused (id -> message), oldest first.
        self._freed_early: OrderedDict[str, str] = OrderedDict()
        self._refused: OrderedDict[str, str] = OrderedDict()
        # Freed files kept for new puts (pool.py): up to a quarter of the capacity.
        self._pool = FilePool(shm_dir, self._prefix, capacity_bytes // 4)
        self._warn_if_shm_smaller_than_capacity()

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
            existing = self._objects.get(object_id)
            if existing is not None:
                if existing.spilled:
                    # The writer could create the file only because the stored
                    # copy was spilled; the spilled copy stays authoritative.
                    files.unlink_quietly(path)
                return
            inode = self._check_file_size(path, size)
            self._pool.claimed(inode)  # the writer reused a pool file
            early = self._freed_early.pop(object_id, None)
            if early is not None:  # its owner let go before the seal came
                if not self._pool.keep(path, size):
                    files.unlink_quietly(path)
                self._count_free(size, early)
                _log.debug("object freed before its seal", object_id=object_id, size=size,
                           node_id=self._node_id, reason=early)
                return
            try:
                evicted = self._admit(object_id, size, path)
            except ObjectStoreFullError as exc:
                _remember(self._refused, object_id, str(exc))
                raise
            self._add(object_id, size, owner=owner, call_site=call_site, primary=primary,
                      owner_address=owner_address)
            entered = (self._used, time.time_ns())
        self._record_seal(object_id, size, call_site, primary, start_ns, entered)
        self._notify_evicted(evicted)

    def receive(self, object_id: str, size: int, chunks: Iterable[bytes], *, owner: str,
                call_site: str = "", owner_address: Address | None = None) -> None:
        """Store a secondary copy pulled from another node, chunk by chunk.

        The bytes go to a temporary file that is renamed into place only after
        admission, so a reader never maps a partial copy.
        """
        if self.contains(object_id):
            return
        start_ns = time.time_ns()
        temporary = files.temp_path(self.object_path(object_id), "receiving")
        received = self._write_chunks(temporary, chunks)
        if received != size:
            files.unlink_quietly(temporary)
            raise RaySystemError(f"transfer of object {object_id} to node {self._node_id} "
                                 f"ended after {received} of {size} bytes")
        self._enter_received(object_id, size, temporary, start_ns, owner=owner,
                             call_site=call_site, owner_address=owner_address)

    def receive_into(self, object_id: str, size: int, fill: Callable[[int], object], *,
                     owner: str, call_site: str = "",
                     owner_address: Address | None = None) -> None:
        """Store a secondary copy that ``fill`` writes into a file descriptor.

        The file is a pool file of the copy's size class when there is one, else a new
        one; either way it is cut to its full size first, so ``fill`` may write its ranges
        in any order and from several threads (``pwrite``); it is renamed into place
        only after admission, so a reader never maps a partial copy, and removed when
        ``fill`` raises, so a failed transfer leaves nothing behind.
        """
        if self.contains(object_id):
            return
        start_ns = time.time_ns()
        temporary = files.temp_path(self.object_path(object_id), "receiving")
        with self._lock:  # a freed file of its class: no page to allocate (pool.py)
            pooled = self._pool.take(size, temporary)
        try:
            fd = pooled if pooled is not None else os.open(
                temporary, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise RaySystemError(f"cannot create {temporary} for a received object: "
                                 f"{exc}") from exc
        try:
            os.ftruncate(fd, size)
            fill(fd)
        except OSError as exc:
            files.unlink_quietly(temporary)
            raise self._write_error(temporary, exc) from exc
        except BaseException:
            files.unlink_quietly(temporary)
            raise
        finally:
            os.close(fd)
        self._enter_received(object_id, size, temporary, start_ns, owner=owner,
                             call_site=call_site, owner_address=owner_address)

    def _enter_received(self, object_id: str, size: int, temporary: Path, start_ns: int, *,
                        owner: str, call_site: str, owner_address: Address | None) -> None:
        """Admit a received copy's complete temporary file and rename it into place."""
        with self._lock:
            self._check_open_or_remove(temporary)
            if object_id in self._objects:  # a concurrent pull finished first
                files.unlink_quietly(temporary)
                return
            evicted = self._admit(object_id, size, temporary)
            os.replace(temporary, self.object_path(object_id))
            self._add(object_id, size, owner=owner, call_site=call_site, primary=False,
                      owner_address=owner_address)
            entered = (self._used, time.time_ns())
        self._record_seal(object_id, size, call_site, False, start_ns, entered)
        self._notify_evicted(evicted)
        _log.debug("object received", object_id=object_id, size=size, node_id=self._node_id)

    def open_for_transfer(self, object_id: str) -> tuple[int, int]:
        """A read-only descriptor of the object's file (shared memory or spill file) and
        its size, for the data path to ``sendfile`` from. Opened under the lock, so a
        concurrent spill or free cannot pull the file away: an open descriptor keeps an
        unlinked file's bytes. The caller closes it."""
        self._wait_if_unknown(object_id)
        with self._lock:
            obj = self._require(object_id)
            self._touch(object_id)
            if obj.spilled:
                return self._open_spilled(object_id), obj.size
            path = self.object_path(object_id)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError as exc:
                raise ObjectLostError(object_id, f"object file of {object_id} cannot be "
                                                 f"opened: {exc}") from exc
            try:  # a file being read is never reused for a new object (pool.py)
                hold_for_reading(fd, path)
            except BaseException:
                os.close(fd)
                raise
            return fd, obj.size

    def _admit(self, object_id: str, size: int, new_file: Path) -> list[str]:
        """Make room for ``size`` bytes or remove ``new_file`` and raise; returns evicted ids."""
        self._trim_pool(size)
        plan = plan_admission(self._state(), size, spilling_enabled=self._spilling_enabled)
        if isinstance(plan, Full):
            message = describe_full(self._state(), size, spilling_enabled=self._spilling_enabled)
            files.unlink_quietly(new_file)
            self._rejected_count += 1
            _log.warning("object store full", object_id=object_id, size=size,
                         node_id=self._node_id, used=self._used, capacity=self._capacity,
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
            return object_id in self._objects

    def locate(self, object_id: str) -> ObjectLocation | None:
        """Where the object is now, or ``None`` when this node does not hold it."""
        self._wait_if_unknown(object_id)
        with self._lock:
            obj = self._objects.get(object_id)
            if obj is None:
                return None
            self._touch(object_id)
            return self._location(obj)

    def ensure_local(self, object_id: str) -> ObjectLocation:
        """Bring a spilled object back into shared memory when it fits (spilling others if
        needed); otherwise return its spill location, which readers can still read."""
        self._wait_if_unknown(object_id)
        with self._lock:
            self._check_open()
            obj = self._require(object_id)
            self._touch(object_id)
            if not obj.spilled:
                return self._location(obj)
            self._trim_pool(obj.size)
            plan = plan_admission(self._state(), obj.size, spilling_enabled=self._spilling_enabled)
            if isinstance(plan, Full):
                _log.info("object restore deferred", object_id=object_id, size=obj.size,
                          node_id=self._node_id, reason=plan.reason)
                return self._location(obj)
            evicted: list[str] = []
            if isinstance(plan, MakeRoom):
                self._make_room(plan)
                evicted = list(plan.evict)
            self._restore(object_id)
            location = self._location(self._objects[object_id])
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
            obj = self._require(object_id)
            self._touch(object_id)
            if not obj.spilled:
                view = map_object(self.object_path(object_id))
            else:
                fd = self._open_spilled(object_id)
        if not obj.spilled:
            for start in range(0, view.nbytes, chunk_size):
                yield view[start:start + chunk_size]
            return
        try:
            offset = 0
            while offset < obj.size:
                chunk = os.pread(fd, min(chunk_size, obj.size - offset), offset)
                if not chunk:
                    raise ObjectLostError(object_id, f"spill file of {object_id} is truncated "
                                                     f"at {offset} of {obj.size} bytes")
                offset += len(chunk)
                yield memoryview(chunk)
        finally:
            os.close(fd)

    def _open_spilled(self, object_id: str) -> int:
        try:
            return os.open(self._spill_path(object_id), os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise ObjectLostError(object_id, f"spill file {self._spill_path(object_id)} "
                                             f"cannot be opened: {exc}") from exc

    # ------------------------------------------------------------- pinning

    def pin(self, object_id: str) -> None:
        """Mark the object in use (by a running task or a reader): it is never spilled or
        evicted until every pin is released.  Pins nest."""
        self._wait_if_unknown(object_id)
        with self._lock:
            obj = self._require(object_id)
            count = self._pins.get(object_id, 0) + 1
            self._pins[object_id] = count
            if count == 1:
                self._objects[object_id] = replace(obj, pinned=True)

    def unpin(self, object_id: str) -> None:
        """Release one pin; unpinning an object that was freed meanwhile does nothing."""
        with self._lock:
            count = self._pins.get(object_id, 0)
            if count == 0:
                if object_id in self._objects:
                    _log.warning("unpin of an object that is not pinned", object_id=object_id,
                                 node_id=self._node_id)
                return
            if count > 1:
                self._pins[object_id] = count - 1
                return
            del self._pins[object_id]
            self._objects[object_id] = replace(self._objects[object_id], pinned=False)

    # ------------------------------------------------------------- freeing

    def free(self, object_ids: Iterable[str], reason: str = FREE_RELEASED) -> int:
        """Remove the objects (shared memory and spill files); returns the bytes freed.
        ``reason`` says why (the span's ``tracedray.object.free_reason``, counted by
        :meth:`statistics`). Unknown ids are skipped: an object may be freed by several
        owners' messages."""
        freed = 0
        with self._lock:
            for object_id in object_ids:
                obj = self._objects.get(object_id)
                if obj is None:  # unknown, or its seal is still on its way
                    _remember(self._freed_early, object_id, reason)
                    continue
                self._drop(object_id)
                self._pins.pop(object_id, None)
                used_after = self._used if obj.spilled else self._used - obj.size
                with self._events.object_free(obj.object_id, obj.size, used_after, reason):
                    if obj.spilled:
                        files.unlink_quietly(self._spill_path(object_id))
                    elif not self._pool.keep(self.object_path(object_id), obj.size):
                        files.unlink_quietly(self.object_path(object_id))
                    self._used = used_after
                    self._count_free(obj.size, reason)
                freed += obj.size
                _log.debug("object freed", object_id=object_id, size=obj.size,
                           spilled=obj.spilled, node_id=self._node_id, store_used=self._used,
                           reason=reason)
        return freed

    def shutdown(self) -> None:
        """Remove every file this store made or was handed (no leaks in /dev/shm)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for object_id, obj in self._objects.items():
                if obj.spilled:
                    files.unlink_quietly(self._spill_path(object_id))
                else:
                    files.unlink_quietly(self.object_path(object_id))
            count = len(self._objects)
            self._pool.clear()
            self._objects.clear()
            self._pins.clear()
            self._created_at.clear()
            self._by_owner.clear()
            self._used = 0
            # Files written but never sealed, and interrupted transfers.
            orphans = files.remove_orphans(self._shm_dir, self._prefix)
        _log.info("object store shut down", node_id=self._node_id, objects=count,
                  unsealed_files=orphans)

    # --------------------------------------------------------- introspection

    def usage(self) -> tuple[int, int]:
        """(bytes in shared memory now, capacity): what a seal's reply reports, without
        the walk over every object that :meth:`statistics` makes."""
        with self._lock:
            return self._used, self._capacity

    def objects(self) -> list[StoredObjectInfo]:
        with self._lock:
            return [self._info(o) for o in self._objects.values()]

    def describe(self, object_id: str) -> StoredObjectInfo | None:
        """The object's row, or ``None`` when this node does not hold it."""
        self._wait_if_unknown(object_id)
        with self._lock:
            obj = self._objects.get(object_id)
            return None if obj is None else self._info(obj)

    def owners(self) -> dict[str, Address | None]:
        """Each owner (worker id) of an object held here, with its address if known."""
        with self._lock:
            return {owner: self._objects[next(iter(ids))].owner_address
                    for owner, ids in self._by_owner.items()}

    def owned_by(self, owners: Iterable[str]) -> dict[str, list[str]]:
        """The ids of the objects held here that each of ``owners`` owns (those with any),
        seals already sent included."""
        if self._settle is not None:
            self._settle()
        with self._lock:
            return {owner: sorted(self._by_owner[owner]) for owner in owners
                    if owner in self._by_owner}

    def statistics(self) -> ObjectStoreStatistics:
        with self._lock:
            spilled = [o for o in self._objects.values() if o.spilled]
            return ObjectStoreStatistics(
                node_id=self._node_id,
                capacity=self._capacity,
                used=self._used,
                num_objects=len(self._objects),
                num_in_memory=len(self._objects) - len(spilled),
                num_spilled=len(spilled),
                spilled_bytes_now=sum(o.size for o in spilled),
                num_pinned=len(self._pins),
                spilled_count=self._spilled_count,
                spilled_bytes=self._spilled_bytes,
                restored_count=self._restored_count,
                restored_bytes=self._restored_bytes,
                evicted_count=self._evicted_count,
                evicted_bytes=self._evicted_bytes,
                freed_count=self._freed_count,
                freed_bytes=self._freed_bytes,
                freed_by_reason=dict(self._freed_by_reason),
                rejected_count=self._rejected_count,
                pool=self._pool.statistics(),
            )

    def __repr__(self) -> str:
        stats = self.statistics()
        return (f"<ObjectStore node={self._node_id[:12]} used={stats.used}/{stats.capacity} "
                f"objects={stats.num_objects} spilled={stats.num_spilled} "
                f"pinned={stats.num_pinned}{' closed' if self._closed else ''}>")

    # --------------------------------------------------- moves (lock held)

    def _spill(self, object_id: str) -> None:
        obj = self._objects[object_id]
        source = self.object_path(object_id)
        destination = self._spill_path(object_id)
        with self._events.object_spill(obj.object_id, obj.size, self._used - obj.size,
                                       str(destination)):
            try:
                destination.parent.mkdir(parents=True, exist_ok=True)
                files.copy_atomically(source, destination)
            except OSError as exc:
                raise RaySystemError(f"cannot spill object {object_id} to {destination}: {exc}; "
                                     "check free disk space in the session folder") from exc
            files.unlink_quietly(source)
            self._used -= obj.size
            self._objects[object_id] = replace(obj, spilled=True)
            self._spilled_count += 1
            self._spilled_bytes += obj.size
        self._events.spilled(object_id, obj.size, str(destination), self._used)

    def _restore(self, object_id: str) -> None:
        obj = self._objects[object_id]
        source = self._spill_path(object_id)
        destination = self.object_path(object_id)
        with self._events.object_restore(obj.object_id, obj.size, self._used + obj.size,
                                         str(source)):
            try:
                files.copy_atomically(source, destination)
            except OSError as exc:
                if exc.errno == errno.ENOSPC:
                    raise ObjectStoreFullError(
                        f"shared memory ({self._shm_dir}) ran out while restoring object "
                        f"{object_id} ({obj.size} bytes); lower object_store_memory") from exc
                raise RaySystemError(f"cannot restore object {object_id} from {source}: "
                                     f"{exc}") from exc
            files.unlink_quietly(source)
            self._used += obj.size
            self._objects[object_id] = replace(obj, spilled=False)
            self._restored_count += 1
            self._restored_bytes += obj.size
        self._events.restored(object_id, obj.size, str(source), self._used)

    def _evict(self, object_id: str) -> None:
        obj = self._drop(object_id)
        with self._events.object_evict(obj.object_id, obj.size, self._used - obj.size):
            files.unlink_quietly(self.object_path(object_id))
            self._used -= obj.size
            self._evicted_count += 1
            self._evicted_bytes += obj.size
        self._events.evicted(object_id, obj.size, self._used)

    # ------------------------------------------------------------- helpers

    def _add(self, object_id: str, size: int, *, owner: str, call_site: str,
             primary: bool, owner_address: Address | None) -> None:
        self._objects[object_id] = StoredObject(
            object_id=object_id, size=size, primary=primary, pinned=False,
            last_access=time.monotonic(), owner=owner, call_site=call_site, spilled=False,
            owner_address=owner_address)
        self._created_at[object_id] = time.time()
        if owner:
            self._by_owner.setdefault(owner, set()).add(object_id)
        self._used += size

    def _drop(self, object_id: str) -> StoredObject:
        """Forget a stored object's bookkeeping (not its pins, nor the bytes it used)."""
        obj = self._objects.pop(object_id)
        self._created_at.pop(object_id, None)
        owned = self._by_owner.get(obj.owner)
        if owned is not None:
            owned.discard(object_id)
            if not owned:
                del self._by_owner[obj.owner]
        return obj

    def _info(self, obj: StoredObject) -> StoredObjectInfo:
        return StoredObjectInfo(object_id=obj.object_id, size=obj.size, owner=obj.owner,
                                call_site=obj.call_site, spilled=obj.spilled,
                                pinned=obj.pinned, primary=obj.primary,
                                created_at=self._created_at[obj.object_id],
                                owner_address=obj.owner_address)

    def _state(self) -> StoreState:
        # A read-only view, not a copy: plan_admission runs under the lock.
        return StoreState(capacity=self._capacity, used=self._used,
                          objects=MappingProxyType(self._objects))

    def _touch(self, object_id: str) -> None:
        self._objects[object_id] = replace(self._objects[object_id], last_access=time.monotonic())

    def _require(self, object_id: str) -> StoredObject:
        obj = self._objects.get(object_id)
        if obj is None:
            raise ObjectLostError(object_id, f"not in the object store of node {self._node_id}")
        return obj

    def _location(self, obj: StoredObject) -> ObjectLocation:
        if obj.spilled:
            return ObjectLocation(obj.object_id, "spilled", self._spill_path(obj.object_id),
                                  obj.size)
        return ObjectLocation(obj.object_id, "shm", self.object_path(obj.object_id), obj.size)

    def _check_open(self) -> None:
        if self._closed:
            raise RaySystemError(f"the object store of node {self._node_id} is shut down")

    def _check_file_size(self, path: Path, size: int) -> int:
        """Check the writer's file has ``size`` bytes; returns its inode."""
        try:
            stat = os.stat(path)
        except FileNotFoundError as exc:
            raise RaySystemError(f"cannot seal {path}: the writer's file does not exist") from exc
        if stat.st_size != size:
            files.unlink_quietly(path)
            raise RaySystemError(f"cannot seal {path}: the file has {stat.st_size} bytes, "
                                 f"the writer reported {size}")
        return stat.st_ino

    def refusal(self, object_id: str) -> str | None:
        """Why the seal of ``object_id`` was refused, if it was (recently)."""
        with self._lock:
            return self._refused.get(object_id)

    def _wait_if_unknown(self, object_id: str) -> None:
        """Before a lookup of an object not held here: wait for the seals already sent."""
        if self._settle is None:
            return
        with self._lock:
            if object_id in self._objects:
                return
        self._settle()

    def _count_free(self, size: int, reason: str) -> None:
        self._freed_count += 1
        self._freed_bytes += size
        self._freed_by_reason[reason] = self._freed_by_reason.get(reason, 0) + 1

    def _trim_pool(self, size: int) -> None:
        """Delete pool files the admission of ``size`` more bytes needs the room of:
        the pool goes before any object is evicted or spilled."""
        room = self._capacity - self._used - size
        if self._pool.bytes > room:
            self._pool.trim(room)

    def _write_chunks(self, path: Path, chunks: Iterable[bytes]) -> int:
        written = 0
        try:
            # Owner-only like every object file, whatever the process's umask.
            with os.fdopen(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC,
                                   0o600), "wb") as out:
                for chunk in chunks:
                    written += out.write(chunk)
        except OSError as exc:
            files.unlink_quietly(path)
            raise self._write_error(path, exc) from exc
        except BaseException:
            files.unlink_quietly(path)
            raise
        return written

    def _write_error(self, path: Path, exc: OSError) -> Exception:
        if exc.errno == errno.ENOSPC:
            return ObjectStoreFullError(
                f"shared memory ({self._shm_dir}) ran out while receiving an object; "
                "lower object_store_memory")
        return RaySystemError(f"cannot write received object to {path}: {exc}")

    def _check_open_or_remove(self, path: Path) -> None:
        if self._closed:
            files.unlink_quietly(path)
        self._check_open()

    def _record_seal(self, object_id: str, size: int, call_site: str, primary: bool,
                     start_ns: int, entered: tuple[int, int]) -> None:
        """``object.seal``: a copy entered shared memory (put, task or actor return, pulled
        copy). Recorded once the lock is released, stamped with the use and time read under
        it, so the timeline orders it with the frees and spills around it."""
        used, end_ns = entered
        instruments.object_sealed(object_id, size, call_site, primary, self._node_id, used,
                                  self._capacity, start_ns, end_ns)

    def _notify_evicted(self, object_ids: list[str]) -> None:
        if object_ids and self._on_evict is not None:
            self._on_evict(object_ids)

    def _warn_if_shm_smaller_than_capacity(self) -> None:
        try:
            stats = os.statvfs(self._shm_dir)
        except OSError as exc:
            raise ConfigError(f"shared-memory folder {self._shm_dir} is unusable: {exc}") from exc
        available = stats.f_bavail * stats.f_frsize
        if available < self._capacity:
            _log.warning("shared memory is smaller than the object store capacity",
                         shm_dir=str(self._shm_dir), available=available,
                         capacity=self._capacity, node_id=self._node_id)


def _remember(memory: OrderedDict[str, str], key: str, value: str) -> None:
    memory[key] = value
    memory.move_to_end(key)
    while len(memory) > _REMEMBERED:
        memory.popitem(last=False)
