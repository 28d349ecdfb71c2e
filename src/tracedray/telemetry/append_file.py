"""Append-only line files written through a shared file mapping.

Trace and log lines must be on disk — in the kernel's page cache — the moment they
are appended, so a SIGKILL loses nothing that was recorded. ``os.write`` gives that,
but it releases the GIL: in a busy driver a gRPC or reader thread takes the GIL
and the caller waits for it to come back (tens of µs on average, up to the 5 ms
switch interval). Copying the line into a ``MAP_SHARED`` mapping of the file has
the same durability (the pages belong to the page cache, not to the process)
without a system call and without letting go of the GIL.

The price is the file layout while a writer is alive (or after it was killed): the
file is grown ahead in chunks with ``posix_fallocate`` (which also reserves the
blocks, so a full disk fails here instead of as a SIGBUS on a later copy), and the
part not yet written reads as NUL bytes. A clean :meth:`AppendFile.close` truncates
the file to its data. Readers use :func:`data_length` / :func:`complete_length`:
the data ends at the first NUL byte.

``mapped=False`` (``TRACEDRAY_TELEMETRY_MAPPED_FILES=false``) keeps plain appends
for log shippers that tail the files and cannot wait out the padding.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

FIRST_CHUNK_BYTES = 64 << 10  # most processes log little: keep a killed one's file small
# Written pages of the mapped window count in the process's RSS (as file pages) until
# the window moves on: 256 KiB bounds that (per file), and a remap every ~150 spans
# (~20 µs: fallocate, mmap, munmap) adds ~0.15 µs per line.
MAX_CHUNK_BYTES = 256 << 10
_GRANULARITY = mmap.ALLOCATIONGRANULARITY
_SCAN_BLOCK = 64 << 10


@dataclass(frozen=True)
class AppendFileStatistics:
    path: str
    mapped: bool  # False: one write() per line (configured, or after a mapping failure)
    length: int  # bytes of data in the file
    reserved: int  # file size including the not-yet-written tail
    remaps: int
    fallback_reason: str  # why a mapped file went back to write(); "" if it did not
    forked_path: str  # where a forked child's appends went; "" if none


# --------------------------------------------------------------------------- reading


def data_length(data: bytes) -> int:
    """Length of the real data in ``data``: everything before the first NUL byte."""
    nul = data.find(b"\0")
    return len(data) if nul < 0 else nul


def complete_length(data: bytes) -> int:
    """Length of the prefix of ``data`` made of complete (newline-terminated) lines.

    A line still being copied in, or cut by a SIGKILL, has no newline yet or
    contains NUL bytes; it is not part of the prefix.
    """
    return data.rfind(b"\n", 0, data_length(data)) + 1


def read_data(path: Path) -> bytes:
    """The file's bytes without the reserved NUL tail of a live or killed writer."""
    data = path.read_bytes()
    return data[:data_length(data)]


def _tail_start(fd: int, size: int) -> tuple[int, int]:
    """(where to append, end of the old bytes) for an existing file.

    Appending starts after the last newline before the NUL tail: a torn last line
    of a killed writer is overwritten (and its remains zeroed) instead of being
    glued to the next line.
    """
    last = _rfind(fd, size, lambda block: len(block.rstrip(b"\0")) - 1)
    return _rfind(fd, last + 1, lambda block: block.rfind(b"\n")) + 1, last + 1


def _rfind(fd: int, end: int, find: Callable[[bytes], int]) -> int:
    """Offset of the last match of ``find`` (index in a block, -1: none) before ``end``."""
    while end > 0:
        start = max(0, end - _SCAN_BLOCK)
        found = find(os.pread(fd, end - start, start))
        if found >= 0:
            return start + found
        end = start
    return -1


# --------------------------------------------------------------------------- writing

class ForkAware(Protocol):
    def _forked(self) -> None: ...


# Writers that own a shared mapping: a forked child must stop writing into its
# parent's pages (see AppendFile._forked); spool_writer.py registers here too.
live_writers: weakref.WeakSet[ForkAware] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for writer in list(live_writers):
        writer._forked()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def map_window(fd: int, end: int, chunk: int, need: int) -> tuple[mmap.mmap, int, int]:
    """Reserve (``posix_fallocate``) and map a window of ``fd`` for appending at ``end``.

    The window starts at ``end`` rounded down to the mapping granularity and holds at
    least ``chunk`` bytes and ``need`` bytes past ``end``. Returns (mapping, base, size).
    """
    base = end - end % _GRANULARITY
    size = max(chunk, end - base + need)
    size += -size % _GRANULARITY
    os.posix_fallocate(fd, base, size)
    mapping = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                        offset=base)
    return mapping, base, size


class MappedAppender:
    """What both appenders (this file's and spool_writer.py's) share: a descriptor, and
    a shared mapping of the window at the end of the file — or, after a fallback,
    plain ``pwrite`` at ``_end``. Subclasses hold ``_lock`` around every use of it.
    """

    def __init__(self, path: Path, fd: int) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._fd: int | None = fd
        self._map: mmap.mmap | None = None
        self._base = 0  # file offset of the mapping
        self._pos = 0  # write position inside the mapping
        self._size = 0  # mapping length
        self._end = 0  # file offset of the end of data (write() mode)
        self._chunk = FIRST_CHUNK_BYTES
        self._remaps = 0
        self._fallback = ""

    @property
    def path(self) -> Path:
        return self._path

    def _map_window(self, need: int) -> None:
        """Map a fresh window that starts at the data's end (page-aligned down)."""
        fd = self._fd
        assert fd is not None
        end = self._data_end()
        if self._map is not None:
            self._chunk = min(self._chunk * 2, MAX_CHUNK_BYTES)
        mapping, base, size = map_window(fd, end, self._chunk, need)
        old, self._map = self._map, mapping
        if old is not None:
            old.close()
            self._remaps += 1
        self._base, self._size, self._pos = base, size, end - base

    def _data_end(self) -> int:
        return self._base + self._pos if self._map is not None else self._end

    def _fall_back(self, exc: OSError | None) -> None:
        """Unmap, cut the file to its data, and append with pwrite from now on."""
        end = self._data_end()
        if self._map is not None:
            with contextlib.suppress(Exception):
                self._map.close()
            self._map = None
        self._end = end
        if exc is not None:
            self._fallback = f"{type(exc).__name__}: {exc}"
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, end)

    def _pwrite_all(self, data: bytes, offset: int) -> None:
        fd = self._fd
        assert fd is not None
        written = 0
        while written < len(data):  # regular files write fully unless the disk is full
            count = os.pwrite(fd, data[written:], offset + written)
            if count <= 0:
                raise OSError(f"short write to {self._path}")
            written += count

    def _let_go_after_fork(self) -> None:
        """In a forked child: drop the parent's mapping and descriptor, untouched."""
        self._lock = threading.Lock()  # the parent's may have been held at fork time
        if self._map is not None:
            with contextlib.suppress(Exception):
                self._map.close()
            self._map = None
        old_fd, self._fd = self._fd, None
        if old_fd is not None:
            with contextlib.suppress(OSError):
                os.close(old_fd)
        self._base = self._pos = self._size = 0


class AppendFile(MappedAppender):
    """One process's append-only line file; ``append`` is thread-safe and never buffers.

    Errors (``OSError``) propagate from ``append``: the caller counts them.
    """

    def __init__(self, path: Path, *, mapped: bool = True) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        super().__init__(path, fd)
        self._forked_path = ""
        try:
            self._end, stale_end = _tail_start(fd, os.fstat(fd).st_size)
            if mapped:
                try:
                    self._map_window(0)
                    if stale_end > self._end:  # zero a killed writer's torn last line
                        self._write_zeros(stale_end - self._end)
                except OSError as exc:
                    self._fall_back(exc)
            else:
                os.ftruncate(fd, self._end)
        except BaseException:
            os.close(fd)
            raise
        live_writers.add(self)

    def append(self, data: bytes) -> None:
        with self._lock:
            fd = self._fd
            if fd is None:
                raise OSError(f"{self._path} is closed")
            mapping = self._map
            if mapping is not None:
                pos = self._pos
                end = pos + len(data)
                if end > self._size:
                    try:
                        self._map_window(len(data))
                    except OSError as exc:  # full disk, no mmap support: keep writing
                        self._fall_back(exc)
                        self._append_written(fd, data)
                        return
                    mapping, pos, end = self._map, self._pos, self._pos + len(data)
                    assert mapping is not None
                mapping[pos:end] = data
                self._pos = end
                return
            self._append_written(fd, data)

    def _append_written(self, fd: int, data: bytes) -> None:
        self._pwrite_all(data, self._end)
        self._end += len(data)

    def _write_zeros(self, count: int) -> None:
        assert self._map is not None
        stop = min(self._pos + count, self._size)
        self._map[self._pos:stop] = bytes(stop - self._pos)

    def unmap(self) -> None:
        """Cut the file to its data and append with write() from now on.

        For a process about to exit: whatever is logged after this point (other
        exit handlers) still lands, and the file holds no reserved tail.
        """
        with self._lock:
            if self._map is not None:
                self._fall_back(None)

    def _forked(self) -> None:
        """In a forked child: the parent keeps writing its mapping, so the child moves.

        Its lines go, with plain writes, to ``<name>.fork-<pid><suffix>`` next to the
        parent's file (readers glob ``*.jsonl``), until the owner reconfigures.
        """
        self._let_go_after_fork()
        path = self._path.with_name(f"{self._path.stem}.fork-{os.getpid()}{self._path.suffix}")
        try:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            self._end = os.fstat(self._fd).st_size
            self._forked_path = str(path)
        except OSError:
            self._fd = None

    def close(self) -> None:
        """Unmap and cut the file to its data (only the owner process may cut it)."""
        with self._lock:
            fd, self._fd = self._fd, None
            mapping, self._map = self._map, None
            end = self._base + self._pos if mapping is not None else self._end
            if mapping is not None:
                with contextlib.suppress(Exception):
                    mapping.close()
            if fd is None:
                return
            with contextlib.suppress(OSError):
                os.ftruncate(fd, end)
            with contextlib.suppress(OSError):
                os.close(fd)
        live_writers.discard(self)

    def statistics(self) -> AppendFileStatistics:
        with self._lock:
            mapped = self._map is not None
            length = self._data_end()
            reserved = self._base + self._size if mapped else length
            return AppendFileStatistics(str(self._path), mapped, length, reserved,
                                        self._remaps, self._fallback, self._forked_path)

    def __repr__(self) -> str:
        stats = self.statistics()
        return (f"<AppendFile {stats.path} mapped={stats.mapped} length={stats.length} "
                f"reserved={stats.reserved}>")
