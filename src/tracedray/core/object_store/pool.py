"""Freed object files kept for later puts instead of being deleted (the raylet's side).

A put that creates a fresh /dev/shm file pays for every 4 KiB page twice: the kernel
allocates and zeroes it, then the writer copies over it. A freed object's file is
instead renamed into the pool folder of its size class, ``<shm_dir>/<prefix>-pool-<class>/``
(:func:`size_class`: sizes within a factor of two share one), as one of at most
:data:`FILES_PER_CLASS` files named ``0`` to ``FILES_PER_CLASS - 1`` (a tmpfs folder's
listing walks every name it ever held, so names are reused). A writer of an object of
that class lists that folder and claims a file by renaming it out
(:func:`.client.write_object`), overwrites every byte of it and truncates it to its
object's size; its pages are already there.

Safety across processes rests on ``flock``. Every reader of an object file holds a
shared lock for as long as it maps the file (:func:`.client.map_object`, the data path's
descriptor). A file enters the pool only when the store gets the exclusive lock without
waiting, i.e. when nobody maps it; otherwise it is deleted as before (its readers keep
their pages). A writer takes the exclusive lock on the file it claimed before writing,
and gives the file up when a late reader got in first. A reader checks, once it holds
its lock, that the object's name still names the file it opened, so it never maps a
file that became a pool slot meanwhile.

The pool may hold what the store's capacity leaves free (:func:`decide`): its bytes are
counted against the capacity, and the store trims the pool before it would evict or spill
anything (:meth:`FilePool.trim`), so the pool only ever holds room no object wants. A big
object's file (a GB) is thus kept and reused like a small one's: Ray's plasma keeps its
pages once faulted, and deleting a GB file costs the raylet a tenth of a second of system
time, and the next put of that size a fault and a zeroing of every page. Files left
unused for the pool's idle time (``TRACEDRAY_OBJECT_POOL_IDLE_S``) go
(:meth:`FilePool.release_idle`, :func:`idle_files`), so an idle node gives its memory back.
A file leaving the pool is first renamed out of its slot (:func:`doomed_path`), so no
writer can claim it and its slot's name is free at once; the store empties it (its pages
go even while a writer keeps a mapping of it: no reader ever maps a pool file) and deletes
it off its lock (:mod:`.deleter`).
The store learns that a writer took a file when the writer seals it: the sealed file's
inode is the pool file's (:meth:`FilePool.claimed`). All methods run under the store's lock.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tracedray.core.object_store.files import remove_pool_folders, unlink_quietly
from tracedray.exceptions import ConfigError

FILES_PER_CLASS = 64
# Files below this size are not worth keeping: their pages cost little to allocate.
MIN_POOLED_BYTES = 64 << 10


def size_class(size: int) -> int:
    """The pool class of a file of ``size`` bytes: ``c`` such that 2^(c-1) < size <= 2^c."""
    return max(0, (size - 1).bit_length())


def class_folder(shm_dir: Path, name_prefix: str, klass: int) -> Path:
    """The pool folder of size class ``klass``; its files' names mean nothing."""
    return shm_dir / f"{name_prefix}-pool-{klass}"


def doomed_path(shm_dir: Path, name_prefix: str, inode: int) -> Path:
    """Where a file leaving the pool waits for its deletion: outside every class folder (no
    writer claims it), named like an object file so that ``remove_orphans`` finds it after
    a crash, and unique (its inode)."""
    return shm_dir / f"{name_prefix}-deleting-{inode}"


class PoolDecision(enum.Enum):
    KEEP = "keep"
    TOO_SMALL = "too small"
    POOL_FULL = "pool full"  # the pool would hold more than the capacity leaves free
    CLASS_FULL = "class full"  # its class's folder holds FILES_PER_CLASS files


def decide(size: int, pooled_bytes: int, room_bytes: int, class_files: int) -> PoolDecision:
    """Whether a freed file of ``size`` bytes enters the pool (pure); ``room_bytes`` is what
    the store's capacity leaves free once the file's object is gone."""
    if size < MIN_POOLED_BYTES:
        return PoolDecision.TOO_SMALL
    if pooled_bytes + size > room_bytes:
        return PoolDecision.POOL_FULL
    if class_files >= FILES_PER_CLASS:
        return PoolDecision.CLASS_FULL
    return PoolDecision.KEEP


def idle_files(kept_at: Mapping[int, float], now: float, idle_s: float) -> list[int]:
    """The pool files (inode -> when it entered the pool, monotonic seconds) that have
    waited at least ``idle_s`` for a writer: the ones to give back (pure)."""
    return sorted(inode for inode, since in kept_at.items() if now - since >= idle_s)


@dataclass(frozen=True)
class _Pooled:
    path: Path
    klass: int
    name: int
    inode: int
    size: int
    kept_at: float  # monotonic seconds


@dataclass(frozen=True)
class PoolStatistics:
    files: int  # in the pool now
    bytes: int
    idle_s: float  # a file unused this long is deleted
    kept_total: int  # freed files that entered the pool
    reused_total: int  # pool files a writer (or a received copy) took for a new object
    trimmed_total: int  # pool files deleted to make room for objects
    released_idle_total: int  # pool files deleted after idle_s unused
    in_use_total: int  # freed files deleted instead, as a reader still mapped them
    full_total: int  # freed files deleted instead, as the capacity left no room for them


class FilePool:
    """The pool of one store. Not thread-safe: the store calls it under its lock.

    The methods that let files go return their doomed paths (:func:`doomed_path`) with
    their sizes; the caller deletes them, off its lock."""

    def __init__(self, shm_dir: Path, name_prefix: str, idle_s: float) -> None:
        if not idle_s > 0:  # NaN too
            raise ConfigError(f"the object pool's idle time must be positive, got {idle_s}")
        self._shm_dir = shm_dir
        self._prefix = name_prefix
        self._idle_s = idle_s
        self._by_inode: dict[int, _Pooled] = {}
        self._per_class: dict[int, set[int]] = {}  # class -> names believed in its folder
        self._bytes = 0
        self._kept = self._reused = self._trimmed = self._released = 0
        self._in_use = self._full = 0

    @property
    def bytes(self) -> int:
        return self._bytes

    def keep(self, path: Path, size: int, room: int, now: float) -> bool:
        """Move the freed object file ``path`` into a slot, when the pool's bytes and its
        stay within ``room`` (what the capacity leaves free); ``False`` when it stays where
        it is (the caller deletes it)."""
        klass = size_class(size)
        names = self._per_class.setdefault(klass, set())
        decision = decide(size, self._bytes, room, len(names))
        if decision is PoolDecision.CLASS_FULL:
            self._forget_missing(klass)
            decision = decide(size, self._bytes, room, len(names))
        if decision is PoolDecision.POOL_FULL:
            self._full += 1
        if decision is not PoolDecision.KEEP:
            return False
        name = min(set(range(FILES_PER_CLASS)) - names)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._in_use += 1  # a reader maps it: its bytes must stay as they are
                return False
            inode = os.fstat(fd).st_ino
            folder = class_folder(self._shm_dir, self._prefix, klass)
            target = folder / str(name)
            try:
                try:
                    os.rename(path, target)
                except FileNotFoundError:
                    folder.mkdir(mode=0o700, exist_ok=True)
                    os.rename(path, target)
            except OSError:
                return False
        finally:
            os.close(fd)  # releases the lock
        self._by_inode[inode] = _Pooled(target, klass, name, inode, size, now)
        names.add(name)
        self._bytes += size
        self._kept += 1
        return True

    def claimed(self, inode: int) -> bool:
        """A writer sealed a file with this inode: if it was a pool slot's, forget it."""
        entry = self._by_inode.get(inode)
        if entry is None:
            return False
        self._drop(entry)
        self._reused += 1
        return True

    def take(self, size: int, destination: Path) -> int | None:
        """A pool file of ``size``'s class, renamed to ``destination``, as a writable
        descriptor locked exclusively: the raylet receives a pulled copy into it, whose
        pages are already there. ``None`` when the class has no file to give (a writer
        took it, or a late reader maps it: that one is deleted)."""
        klass = size_class(size)
        for entry in [e for e in self._by_inode.values() if e.klass == klass]:
            self._drop(entry)
            try:  # atomic against a writer's claim (client.write_object)
                os.rename(entry.path, destination)
                fd = os.open(destination, os.O_RDWR | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                unlink_quietly(destination)
                continue
            self._reused += 1
            return fd
        return None

    def trim(self, keep_bytes: int) -> list[tuple[Path, int]]:
        """Let pool files go, largest first, until the pool holds at most ``keep_bytes``."""
        doomed: list[tuple[Path, int]] = []
        for entry in sorted(self._by_inode.values(), key=lambda e: e.size, reverse=True):
            if self._bytes <= max(0, keep_bytes):
                break
            doomed += self._let_go(entry)
            self._trimmed += 1
        return doomed

    def release_idle(self, now: float) -> list[tuple[Path, int]]:
        """Let go the pool files unused for the pool's idle time (:func:`idle_files`)."""
        kept_at = {inode: entry.kept_at for inode, entry in self._by_inode.items()}
        doomed: list[tuple[Path, int]] = []
        for inode in idle_files(kept_at, now, self._idle_s):
            doomed += self._let_go(self._by_inode[inode])
            self._released += 1
        return doomed

    def clear(self) -> None:
        """Delete every pool file and folder (the store shuts down)."""
        for entry in list(self._by_inode.values()):
            self._drop(entry)
        remove_pool_folders(self._shm_dir, self._prefix)

    def statistics(self) -> PoolStatistics:
        return PoolStatistics(files=len(self._by_inode), bytes=self._bytes, idle_s=self._idle_s,
                              kept_total=self._kept, reused_total=self._reused,
                              trimmed_total=self._trimmed, released_idle_total=self._released,
                              in_use_total=self._in_use, full_total=self._full)

    def _let_go(self, entry: _Pooled) -> list[tuple[Path, int]]:
        """Forget ``entry`` and rename its file out of its slot; its doomed path, or none
        when a writer claimed it meanwhile."""
        self._drop(entry)
        doomed = doomed_path(self._shm_dir, self._prefix, entry.inode)
        try:
            os.rename(entry.path, doomed)
        except OSError:
            return []
        return [(doomed, entry.size)]

    def _drop(self, entry: _Pooled) -> None:
        del self._by_inode[entry.inode]
        self._per_class[entry.klass].discard(entry.name)
        self._bytes -= entry.size

    def _forget_missing(self, klass: int) -> None:
        """Forget the files of ``klass`` that are gone (a writer took one and has not
        sealed it yet, or died before it could)."""
        for entry in [e for e in self._by_inode.values() if e.klass == klass]:
            with contextlib.suppress(OSError):
                if os.stat(entry.path).st_ino == entry.inode:
                    continue
            self._drop(entry)
