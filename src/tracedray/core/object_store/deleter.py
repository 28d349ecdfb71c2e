"""Deleting big shared-memory files on a thread of their own, off the store's lock.

Unlinking a tmpfs file gives every one of its pages back, one by one: about a tenth of
a second of system time for 1 GB on the reference machine. Done under the store's lock
(as a trim for an admission, a free or an idle release would) it held up every seal,
lookup and free on the node meanwhile, and done by the thread that serves a writer's
seal socket it held up that writer's next put. The store instead renames a doomed file
to a name no one else uses (:func:`.pool.doomed_path`: no writer can claim it, no
object's name can be reused for it) and hands it here (:meth:`Deleter.delete`); small
files are unlinked at once, where a hand-off would cost more than the unlink
(:func:`when_to_delete`).

A doomed file's bytes no longer count against the store's capacity, so for a moment
shared memory may hold more than the capacity; :meth:`Deleter.drain` waits for the
deletions handed over (the store's shutdown, tests).
"""

from __future__ import annotations

import contextlib
import enum
import os
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tracedray.core.object_store.files import unlink_quietly
from tracedray.core.object_store.pool import doomed_path

# Files of this size or more are deleted on the deleter's thread.
DEFERRED_BYTES = 16 << 20


class WhenToDelete(enum.Enum):
    NOW = "now"  # on the calling thread
    LATER = "later"  # on the deleter's thread


def when_to_delete(size: int) -> WhenToDelete:
    """Where a doomed file of ``size`` bytes is unlinked (pure)."""
    return WhenToDelete.LATER if size >= DEFERRED_BYTES else WhenToDelete.NOW


@dataclass(frozen=True)
class DeleterStatistics:
    pending: int  # files handed over, not deleted yet
    pending_bytes: int
    deleted_total: int  # on the deleter's thread
    deleted_bytes: int


class Deleter:
    """Thread-safe. Its thread starts with the first deferred file and lives until
    :meth:`close`."""

    def __init__(self, shm_dir: Path, name_prefix: str,
                 name: str = "tracedray-shm-deleter") -> None:
        self._shm_dir = shm_dir
        self._prefix = name_prefix
        self._name = name
        self._cond = threading.Condition()
        self._queue: deque[tuple[Path, int, bool]] = deque()
        self._busy = False  # the thread is unlinking a file it took from the queue
        self._thread: threading.Thread | None = None
        self._closed = False
        self._pending_bytes = self._deleted = self._deleted_bytes = 0

    def discard(self, path: Path, size: int) -> None:
        """Delete the object file ``path`` of ``size`` bytes (the caller holds the store's
        lock): a big one is first renamed to a doomed name, so that the object's name is
        free at once and nothing else can be reached by it, then unlinked off the lock."""
        if when_to_delete(size) is WhenToDelete.NOW:
            unlink_quietly(path)
            return
        try:
            doomed = doomed_path(self._shm_dir, self._prefix, os.stat(path).st_ino)
            os.rename(path, doomed)
        except FileNotFoundError:
            return
        except OSError:  # cannot rename: delete it here then
            unlink_quietly(path)
            return
        self.delete([(doomed, size)])

    def delete(self, doomed: Iterable[tuple[Path, int]], *, emptied: bool = False) -> None:
        """Unlink each (path, size): small files now, big ones on the deleter's thread.
        ``emptied``: cut each to 0 bytes first, which frees its pages even while some
        process still maps it; only for pool files, whose mappings are writers' kept ones
        (writer.py) that never touch a file they did not claim, never readers'."""
        later = []
        for path, size in doomed:
            if when_to_delete(size) is WhenToDelete.NOW:
                _remove(path, emptied)
            else:
                later.append((path, size, emptied))
        if not later:
            return
        with self._cond:
            if self._closed:  # after close: nobody would delete them
                for path, _, _ in later:
                    _remove(path, emptied)
                return
            self._queue.extend(later)
            self._pending_bytes += sum(size for _, size, _ in later)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name=self._name)
                self._thread.start()
            self._cond.notify()

    def drain(self) -> None:
        """Wait until every file handed over is deleted."""
        with self._cond:
            while self._queue or self._busy:
                self._cond.wait()

    def close(self) -> None:
        """Delete what is pending and stop the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

    def statistics(self) -> DeleterStatistics:
        with self._cond:
            return DeleterStatistics(len(self._queue) + self._busy, self._pending_bytes,
                                     self._deleted, self._deleted_bytes)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:  # closed and drained
                    return
                path, size, emptied = self._queue.popleft()
                self._busy = True
            # On an error, remove_orphans takes it at shutdown: its name is an object file's.
            with contextlib.suppress(OSError):
                _remove(path, emptied)
            with self._cond:
                self._busy = False
                self._pending_bytes -= size
                self._deleted += 1
                self._deleted_bytes += size
                self._cond.notify_all()


def _remove(path: Path, emptied: bool) -> None:
    if emptied:
        # A writer's kept mapping of a pool file would otherwise hold its pages until the
        # writer next puts (writer.py drops mappings of deleted files then).
        with contextlib.suppress(FileNotFoundError):
            os.truncate(path, 0)
    unlink_quietly(path)
