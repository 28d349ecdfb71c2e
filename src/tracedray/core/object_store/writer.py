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

A put first frees what the writer's dropped refs let go, over the seal socket, and the
raylet puts the freed file in the pool a moment later: a put that lists the pool at once
often finds only files it has no mapping of, and pwrites 100 MB at a third of the speed
while its own file arrives. So the writer is told which of its files it freed
(:meth:`MappedFiles.freed`), claims a pool file it has a mapping of first
(:meth:`MappedFiles.rank`), and for a big object waits a few milliseconds for a freed
file of its class it has a mapping of (:func:`should_wait`): the raylet puts it in the
pool, or deletes it (a reader maps it, the capacity has no room), or another writer
takes it; the wait ends at the first of these or at :data:`AWAIT_S`.
"""

from __future__ import annotations

import mmap
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tracedray.core.object_store.layout import Segment
from tracedray.core.object_store.pool import size_class

MAX_FILES = 128
# Smaller objects are written with pwrite: a mapping costs more than it saves.
MIN_MAPPED_BYTES = 256 << 10
# Objects this big or more look for a pool file they can write through, and wait for
# their writer's freed file (see above): a pwrite of 16 MiB costs ~3 ms more than a memcpy
# through a mapping, of 100 MB ~20 ms. The wait is bounded by a part of that cost (the
# raylet's seal thread may wait for a CPU a few ms on a busy machine), at most AWAIT_S.
AWAIT_BYTES = 16 << 20
AWAIT_BYTES_PER_S = 10_000_000_000
AWAIT_S = 0.01
AWAIT_POLL_S = 0.0001
FREED_RECENTLY_S = 1.0  # an older free is not waited for: its file went elsewhere


def should_wait(size: int, mapped_in_pool: int, awaited: bool, waited_s: float) -> bool:
    """Whether a writer of ``size`` bytes lists the pool again rather than claim a file it
    has no mapping of (pure): none of the ``mapped_in_pool`` files it could write through
    is there, one it freed is ``awaited``, and it has waited less than its bound."""
    bound = min(AWAIT_S, size / AWAIT_BYTES_PER_S)
    return size >= AWAIT_BYTES and mapped_in_pool == 0 and awaited and waited_s < bound


@dataclass
class _Mapped:
    fd: int  # our own descriptor: fstat tells whether the file still exists
    mapping: mmap.mmap
    size: int
    path: str | None = None  # the object it was last written as
    freed_at: float | None = None  # when the writer freed that object (monotonic)


@dataclass(frozen=True)
class MappedFilesStatistics:
    files: int
    bytes: int
    budget_bytes: int
    hits_total: int  # objects written through a kept mapping
    misses_total: int  # pool files written with pwrite, none kept for them
    awaited_total: int  # claims that waited for a freed file to reach the pool


class MappedFiles:
    """One process's kept mappings. Thread-safe."""

    def __init__(self, budget_bytes: int = 0) -> None:
        self._lock = threading.Lock()
        self._budget = budget_bytes
        self._by_inode: OrderedDict[tuple[int, int], _Mapped] = OrderedDict()
        self._bytes = 0
        self._hits = self._misses = self._awaited = 0
        # The object path of each big file mapped (-> its key): what freed() looks up.
        self._big: dict[str, tuple[int, int]] = {}

    def set_budget(self, budget_bytes: int) -> None:
        with self._lock:
            self._budget = budget_bytes
            closing = self._shrink_locked(0)
        _close_all(closing)

    def write(self, fd: int, total: int, parts: Sequence[Segment], path: Path | None = None
              ) -> bool:
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
            self._name_locked(entry, key, path)
            if stat.st_size > total:
                os.ftruncate(fd, total)  # only cuts: every page we copy into is there
            for offset, view in parts:  # under the lock: no other thread closes it meanwhile
                entry.mapping[offset:offset + view.nbytes] = view
        return True

    def keep(self, fd: int, size: int, path: Path | None = None) -> None:
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
            self._forget_name_locked(old)
            entry = self._by_inode[key] = _Mapped(own, mapping, size)
            self._name_locked(entry, key, path)
            self._bytes += size
            closing += self._drop_deleted_locked()
            closing += self._shrink_locked(0)
        _close_all(closing)

    def freed(self, paths: Iterable[str]) -> None:
        """This process freed the objects at ``paths``: their files are on their way to
        the pool (only big ones matter: should_wait)."""
        now = time.monotonic()
        with self._lock:
            if not self._big:  # every put frees: this costs nothing when nothing is big
                return
            for path in paths:
                entry = self._by_inode.get(self._big.get(path, (-1, -1)))
                if entry is not None and entry.path == path:
                    entry.freed_at = now

    def rank(self, folder: Path, names: Sequence[str], size: int) -> tuple[list[str], int]:
        """The pool files ``names`` (in ``folder``), those this process can write an object
        of ``size`` bytes through first, and how many those are."""
        mapped: list[str] = []
        others: list[str] = []
        with self._lock:
            for name in names:
                try:
                    stat = os.stat(folder / name)
                except OSError:
                    continue  # claimed meanwhile
                entry = self._by_inode.get((stat.st_dev, stat.st_ino))
                fits = entry is not None and entry.size >= size and stat.st_size >= size
                (mapped if fits else others).append(name)
        return mapped + others, len(mapped)

    def awaited(self, size: int) -> bool:
        """Whether a file of ``size``'s class that this process freed recently, and has a
        mapping of, may still reach the pool (it still exists)."""
        klass, now = size_class(size), time.monotonic()
        with self._lock:
            return any(e.freed_at is not None and now - e.freed_at < FREED_RECENTLY_S
                       and size_class(e.size) == klass and e.size >= size
                       and os.fstat(e.fd).st_nlink > 0 for e in self._by_inode.values())

    def count_wait(self) -> None:
        with self._lock:
            self._awaited += 1

    def close(self) -> None:
        with self._lock:
            closing = list(self._by_inode.values())
            self._by_inode.clear()
            self._big.clear()
            self._bytes = 0
        _close_all(closing)

    def statistics(self) -> MappedFilesStatistics:
        with self._lock:
            return MappedFilesStatistics(len(self._by_inode), self._bytes, self._budget,
                                         self._hits, self._misses, self._awaited)

    def _drop_deleted_locked(self) -> list[_Mapped]:
        gone = [key for key, entry in self._by_inode.items() if os.fstat(entry.fd).st_nlink == 0]
        dropped = [self._by_inode.pop(key) for key in gone]
        self._bytes -= sum(entry.size for entry in dropped)
        for entry in dropped:
            self._forget_name_locked(entry)
        return dropped

    def _shrink_locked(self, room: int) -> list[_Mapped]:
        dropped = []
        while self._by_inode and (len(self._by_inode) > MAX_FILES
                                  or self._bytes + room > self._budget):
            _, entry = self._by_inode.popitem(last=False)
            self._bytes -= entry.size
            self._forget_name_locked(entry)
            dropped.append(entry)
        return dropped

    def _name_locked(self, entry: _Mapped, key: tuple[int, int], path: Path | None) -> None:
        """``entry``'s file now holds the object at ``path``, not freed."""
        self._forget_name_locked(entry)
        entry.path, entry.freed_at = (None if path is None else str(path)), None
        if entry.path is not None and entry.size >= AWAIT_BYTES:
            self._big[entry.path] = key

    def _forget_name_locked(self, entry: _Mapped | None) -> None:
        if entry is not None and entry.path is not None:
            self._big.pop(entry.path, None)


def _close_all(entries: Sequence[_Mapped]) -> None:
    for entry in entries:
        entry.mapping.close()
        os.close(entry.fd)
