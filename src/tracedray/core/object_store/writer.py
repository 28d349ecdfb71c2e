"""A writer's mappings of the object files it wrote, kept to write them again.

A file from the store's pool (:mod:`.pool`) already has its pages, but ``pwrite`` into
it still walks the page cache page by page (about a third of ``memcpy``'s speed into
memory already mapped, on the reference machine). A writer mostly gets back the files
it wrote itself: it puts, drops, puts again. So a writer keeps a mapping of each file it
wrote (up to :data:`MAX_FILES` and a byte budget, least recently used first out), and
when it claims a pool file whose inode it has a mapping for, it copies the object in
with ``memcpy`` through that mapping instead.

It writes through a mapping only into pages the file already has (the file is at least
the object's size, and every byte of a pool file was written by its last writer), so a
full ``/dev/shm`` can never turn into a ``SIGBUS``; it holds the file's exclusive lock
while it writes, as any writer does. A mapping of a file the store has since deleted
would keep its pages alive, so mappings of deleted files are dropped whenever one is
added, and the budget bounds what they can hold meanwhile.
"""

from __future__ import annotations

import mmap
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from tracedray.core.object_store.layout import Segment

MAX_FILES = 128
# Smaller objects are written with pwrite: a mapping costs more than it saves.
MIN_MAPPED_BYTES = 256 << 10


@dataclass
class _Mapped:
    fd: int  # our own descriptor: fstat tells whether the file still exists
    mapping: mmap.mmap
    size: int


@dataclass(frozen=True)
class MappedFilesStatistics:
    files: int
    bytes: int
    budget_bytes: int
    hits_total: int  # objects written through a kept mapping
    misses_total: int  # pool files written with pwrite, none kept for them


class MappedFiles:
    """One process's kept mappings. Thread-safe."""

    def __init__(self, budget_bytes: int = 0) -> None:
        self._lock = threading.Lock()
        self._budget = budget_bytes
        self._by_inode: OrderedDict[tuple[int, int], _Mapped] = OrderedDict()
        self._bytes = 0
        self._hits = self._misses = 0

    def set_budget(self, budget_bytes: int) -> None:
        with self._lock:
            self._budget = budget_bytes
            closing = self._shrink_locked(0)
        _close_all(closing)

    def write(self, fd: int, total: int, parts: Sequence[Segment]) -> bool:
        """Write the object (``parts``, ``total`` bytes) into the claimed pool file ``fd``
        through a kept mapping of it; ``False`` when there is none that fits (the caller
        writes with ``pwrite``, then offers the file to :meth:`keep`)."""
        if total < MIN_MAPPED_BYTES:
            return False
        stat = os.fstat(fd)
        key = (stat.st_dev, stat.st_ino)
        with self._lock:
            entry = self._by_inode.get(key)
            if entry is None or entry.size < total or stat.st_size < total \
                    or os.fstat(entry.fd).st_nlink == 0:
                self._misses += 1
                return False
            self._by_inode.move_to_end(key)
            self._hits += 1
            if stat.st_size > total:
                os.ftruncate(fd, total)  # only cuts: every page we copy into is there
            for offset, view in parts:  # under the lock: no other thread closes it meanwhile
                entry.mapping[offset:offset + view.nbytes] = view
        return True

    def keep(self, fd: int, size: int) -> None:
        """Keep a mapping of the file ``fd`` just written with ``pwrite`` (``size`` bytes,
        every page there)."""
        if size < MIN_MAPPED_BYTES:
            return
        with self._lock:
            if size > self._budget:
                return
        stat = os.fstat(fd)
        key = (stat.st_dev, stat.st_ino)
        try:
            own = os.open(f"/proc/self/fd/{fd}", os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return
        try:
            mapping = mmap.mmap(own, size, mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0),
                                mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError:
            os.close(own)
            return
        with self._lock:
            old = self._by_inode.pop(key, None)
            closing = [old] if old is not None else []
            self._bytes -= old.size if old is not None else 0
            self._by_inode[key] = _Mapped(own, mapping, size)
            self._bytes += size
            closing += self._drop_deleted_locked()
            closing += self._shrink_locked(0)
        _close_all(closing)

    def close(self) -> None:
        with self._lock:
            closing = list(self._by_inode.values())
            self._by_inode.clear()
            self._bytes = 0
        _close_all(closing)

    def statistics(self) -> MappedFilesStatistics:
        with self._lock:
            return MappedFilesStatistics(len(self._by_inode), self._bytes, self._budget,
                                         self._hits, self._misses)

    def _drop_deleted_locked(self) -> list[_Mapped]:
        gone = [key for key, entry in self._by_inode.items() if os.fstat(entry.fd).st_nlink == 0]
        dropped = [self._by_inode.pop(key) for key in gone]
        self._bytes -= sum(entry.size for entry in dropped)
        return dropped

    def _shrink_locked(self, room: int) -> list[_Mapped]:
        dropped = []
        while self._by_inode and (len(self._by_inode) > MAX_FILES
                                  or self._bytes + room > self._budget):
            _, entry = self._by_inode.popitem(last=False)
            self._bytes -= entry.size
            dropped.append(entry)
        return dropped


def _close_all(entries: Sequence[_Mapped]) -> None:
    for entry in entries:
        entry.mapping.close()
        os.close(entry.fd)
