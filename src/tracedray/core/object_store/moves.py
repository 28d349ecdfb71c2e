"""The store's moves between shared memory and disk (spill, restore, evict, free), and
the opening and reading of object files for transfer.

The moves run under the store's lock (so no reader sees a half-moved object), change
its :class:`~.holdings.Holdings` and :class:`~.accounting.StoreCounters`, and record each
move's span and log line through :class:`StoreEvents`.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from tracedray.core.object_store import files
from tracedray.core.object_store.accounting import StoreCounters
from tracedray.core.object_store.client import hold_for_reading
from tracedray.core.object_store.holdings import Holdings
from tracedray.core.object_store.policy import StoredObject
from tracedray.core.object_store.pool import FilePool
from tracedray.exceptions import ObjectLostError, ObjectStoreFullError, RaySystemError
from tracedray.telemetry.cluster_events import StoreEvents


def spill(held: Holdings, counts: StoreCounters, events: StoreEvents, object_id: str,
          source: Path, destination: Path) -> None:
    """Copy the object's shared-memory file ``source`` to its spill file ``destination``."""
    obj = held.objects[object_id]
    with events.object_spill(obj.object_id, obj.size, held.used - obj.size, str(destination)):
        try:
            destination.parent.mkdir(parents=True, exist_ok=True)
            files.copy_atomically(source, destination)
        except OSError as exc:
            raise RaySystemError(f"cannot spill object {object_id} to {destination}: {exc}; "
                                 "check free disk space in the session folder") from exc
        files.unlink_quietly(source)
        held.used -= obj.size
        held.objects[object_id] = replace(obj, spilled=True)
        counts.spilled_count += 1
        counts.spilled_bytes += obj.size
    events.spilled(object_id, obj.size, str(destination), held.used)


def restore(held: Holdings, counts: StoreCounters, events: StoreEvents, object_id: str,
            source: Path, destination: Path, shm_dir: Path) -> None:
    """Copy the object's spill file ``source`` back to shared memory (``destination``)."""
    obj = held.objects[object_id]
    with events.object_restore(obj.object_id, obj.size, held.used + obj.size, str(source)):
        try:
            files.copy_atomically(source, destination)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise ObjectStoreFullError(
                    f"shared memory ({shm_dir}) ran out while restoring object "
                    f"{object_id} ({obj.size} bytes); lower object_store_memory") from exc
            raise RaySystemError(f"cannot restore object {object_id} from {source}: "
                                 f"{exc}") from exc
        files.unlink_quietly(source)
        held.used += obj.size
        held.objects[object_id] = replace(obj, spilled=False)
        counts.restored_count += 1
        counts.restored_bytes += obj.size
    events.restored(object_id, obj.size, str(source), held.used)


# Deletes a shared-memory file of the given size, now or off the lock (store.py, deleter.py).
Discard = Callable[[Path, int], None]


def evict(held: Holdings, counts: StoreCounters, events: StoreEvents, object_id: str,
          path: Path, discard: Discard) -> None:
    """Drop a secondary copy (its shared-memory file ``path``) to make room."""
    obj = held.drop(object_id)
    with events.object_evict(obj.object_id, obj.size, held.used - obj.size):
        discard(path, obj.size)
        held.used -= obj.size
        counts.evicted_count += 1
        counts.evicted_bytes += obj.size
    events.evicted(object_id, obj.size, held.used)


def free(held: Holdings, counts: StoreCounters, events: StoreEvents, pool: FilePool,
         obj: StoredObject, reason: str, path: Path, discard: Discard) -> None:
    """Forget a stored object and remove its file ``path`` (shared memory or spill file);
    a shared-memory file may be kept for reuse instead, in the room the capacity leaves
    free (pool.py)."""
    held.drop(obj.object_id)
    held.pins.pop(obj.object_id, None)
    used_after = held.used if obj.spilled else held.used - obj.size
    with events.object_free(obj.object_id, obj.size, used_after, reason):
        if obj.spilled:
            files.unlink_quietly(path)
        elif not pool.keep(path, obj.size, held.capacity - used_after, time.monotonic()):
            discard(path, obj.size)
        held.used = used_after
        counts.count_free(obj.size, reason)


def open_for_reading(object_id: str, path: Path) -> int:
    """A read-only descriptor of the object's shared-memory file ``path``, held for
    reading: a file being read is never reused for a new object (pool.py)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise ObjectLostError(object_id, f"object file of {object_id} cannot be "
                                         f"opened: {exc}") from exc
    try:
        hold_for_reading(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_spilled(object_id: str, path: Path) -> int:
    """A read-only descriptor of the object's spill file ``path``."""
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise ObjectLostError(object_id, f"spill file {path} "
                                         f"cannot be opened: {exc}") from exc


def spilled_chunks(object_id: str, fd: int, size: int, chunk_size: int) -> Iterator[memoryview]:
    """The ``size`` bytes of the spill file open at ``fd``, in chunks; closes ``fd``."""
    try:
        offset = 0
        while offset < size:
            chunk = os.pread(fd, min(chunk_size, size - offset), offset)
            if not chunk:
                raise ObjectLostError(object_id, f"spill file of {object_id} is truncated "
                                                 f"at {offset} of {size} bytes")
            offset += len(chunk)
            yield memoryview(chunk)
    finally:
        os.close(fd)
