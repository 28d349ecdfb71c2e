"""Append-only line files: a process-private mapped spool, and plain public lines.

Trace and log lines must be on disk — in the kernel's page cache — the moment they
are appended, so a SIGKILL loses nothing that was recorded. ``os.write`` gives that,
but it releases the GIL: in a busy driver a gRPC or reader thread takes the GIL
and the caller waits for it to come back (tens of µs on average, up to the 5 ms
switch interval). Copying the line into a ``MAP_SHARED`` mapping of a file has
the same durability (the pages belong to the page cache, not to the process)
without a system call and without letting go of the GIL.

A mapped file is grown ahead in chunks with ``posix_fallocate`` (which also reserves
the blocks, so a full disk fails here instead of as a SIGBUS on a later copy), and the
part not yet written reads as NUL bytes: no file a log tool tails may look like that.
So :class:`AppendFile` maps a private *spool* (``<name>.spool``, line_spool.py) and
the public ``<name>.jsonl`` only ever receives whole lines, copied from the spool with
plain writes, off the hot path, by the node's telemetry agent, by every reader, and by
the writer itself when it closes or its process exits.

``mapped=False`` (``TRACEDRAY_TELEMETRY_MAPPED_FILES=false``) writes each line to the
public file with one ``write()`` instead (no spool); so does a writer after
:meth:`AppendFile.unmap`, after a mapping failure (a full disk), and in a forked child.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tracedray.telemetry import line_spool
from tracedray.telemetry.line_spool import complete_length, data_length, read_data

__all__ = ["AppendFile", "AppendFileStatistics", "MappedAppender", "complete_length",
           "data_length", "live_writers", "map_window", "read_data"]

FIRST_CHUNK_BYTES = 64 << 10  # most processes log little: keep a killed one's file small
# Written pages of the mapped window count in the process's RSS (as file pages) until
# the window moves on: 256 KiB bounds that (per file), and a remap every ~150 spans
# (~20 µs: fallocate, mmap, munmap) adds ~0.15 µs per line.
MAX_CHUNK_BYTES = 256 << 10
_GRANULARITY = mmap.ALLOCATIONGRANULARITY


@dataclass(frozen=True)
class AppendFileStatistics:
    path: str  # the public .jsonl
    mapped: bool  # False: one write() per line (configured, or after a mapping failure)
    length: int  # bytes of lines: in the spool while mapped, else in the public file
    reserved: int  # the spool's size past its header, the not-yet-written tail included
    remaps: int
    fallback_reason: str  # why a mapped file went back to write(); "" if it did not
    forked_path: str  # where a forked child's appends went; "" if none
    spool: str = ""  # the private spool the lines are mapped into; "" when not mapped


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

    ``path`` is the public ``.jsonl``; in mapped mode the lines go to its spool
    (line_spool.py), otherwise straight to ``path``. Errors (``OSError``) propagate
    from ``append``: the caller counts them.
    """

    def __init__(self, path: Path, *, mapped: bool = True) -> None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._public = path
        self._forked_path = ""
        spool = line_spool.spool_path(path)
        # An earlier writer's spool (this process before a reconfigure, or a process
        # with the same pid): its lines go to the public file first, then it goes.
        if spool.exists():
            line_spool.copy_spool(spool)
            with contextlib.suppress(OSError):
                spool.unlink()
        if not mapped:
            super().__init__(path, self._open_public(path))
            self._end = os.fstat(self._fd).st_size  # type: ignore[arg-type]
            live_writers.add(self)
            return
        public = self._open_public(path)  # created now, so readers find it at once
        try:
            copied_to = os.fstat(public).st_size
        finally:
            os.close(public)
        try:
            fd = os.open(spool, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:  # a spool we could not remove, a read-only folder: no spool
            super().__init__(path, self._open_public(path))
            self._fallback = f"{type(exc).__name__}: {exc}"
            self._end = copied_to
            live_writers.add(self)
            return
        super().__init__(spool, fd)
        try:
            os.pwrite(fd, line_spool.header_bytes(os.getpid(), copied_to), 0)
            self._end = line_spool.HEADER_BYTES
            self._map_window(0)
        except OSError as exc:
            self._to_public(exc)
        except BaseException:
            os.close(fd)
            raise
        live_writers.add(self)

    @staticmethod
    def _open_public(path: Path) -> int:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    @property
    def path(self) -> Path:
        return self._public

    def append(self, data: bytes) -> None:
        with self._lock:
            fd = self._fd
            if fd is None:
                raise OSError(f"{self._public} is closed")
            mapping = self._map
            if mapping is not None:
                pos = self._pos
                end = pos + len(data)
                if end > self._size:
                    try:
                        self._map_window(len(data))
                    except OSError as exc:  # full disk, no mmap support: keep writing
                        self._to_public(exc)
                        self._write_public(data)
                        return
                    mapping, pos, end = self._map, self._pos, self._pos + len(data)
                    assert mapping is not None
                mapping[pos:end] = data
                self._pos = end
                return
            self._write_public(data)

    def _write_public(self, data: bytes) -> None:
        """One ``write`` of whole lines to the public file (``O_APPEND``)."""
        fd = self._fd
        assert fd is not None
        written = 0
        while written < len(data):  # regular files write fully unless the disk is full
            count = os.write(fd, data[written:])
            if count <= 0:
                raise OSError(f"short write to {self._public}")
            written += count
        self._end += len(data)

    def _close_spool(self) -> None:
        """Under ``_lock``, in mapped mode: unmap, mark the spool closed and copy what is
        left of it to the public file (which deletes it). ``_fd`` is None afterwards."""
        fd, self._fd = self._fd, None
        end = self._data_end()
        if self._map is not None:
            with contextlib.suppress(Exception):
                self._map.close()
            self._map = None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(fd, end)
        with contextlib.suppress(OSError):
            line_spool.mark_closed(fd)
        with contextlib.suppress(OSError):
            os.close(fd)
        line_spool.copy_spool(self._path, max_bytes=1 << 62)

    def _to_public(self, exc: OSError | None) -> None:
        """Under ``_lock``: leave the spool (its lines copied) and write the public file."""
        if self._path == self._public:
            return  # writing it already
        self._close_spool()
        if exc is not None:
            self._fallback = f"{type(exc).__name__}: {exc}"
        self._path = self._public
        self._fd = self._open_public(self._public)
        self._end = os.fstat(self._fd).st_size

    def unmap(self) -> None:
        """Copy the spool's lines to the public file, delete it, and write the public
        file from now on: for a process about to exit, whose later lines (other exit
        handlers) must still land, with no spool left to copy.
        """
        with self._lock:
            if self._fd is not None:
                self._to_public(None)

    def _forked(self) -> None:
        """In a forked child: the parent keeps writing its mapping, so the child moves.

        Its lines go, with plain writes, to ``<name>.fork-<pid>.jsonl`` next to the
        parent's file (readers glob ``*.jsonl``), until the owner reconfigures.
        """
        self._let_go_after_fork()
        public = self._public
        path = public.with_name(f"{public.name[:-len(public.suffix)]}.fork-{os.getpid()}"
                                f"{public.suffix}")
        self._path = self._public = path
        try:
            self._fd = self._open_public(path)
            self._end = os.fstat(self._fd).st_size
            self._forked_path = str(path)
        except OSError:
            self._fd = None

    def close(self) -> None:
        """Copy the spool's lines to the public file and delete it (only the owner
        process may: a forked child has let go of it)."""
        with self._lock:
            if self._path != self._public:
                self._close_spool()
            else:
                fd, self._fd = self._fd, None
                if fd is None:
                    return
                with contextlib.suppress(OSError):
                    os.close(fd)
        live_writers.discard(self)

    def statistics(self) -> AppendFileStatistics:
        with self._lock:
            mapped = self._map is not None
            if mapped:
                length = self._data_end() - line_spool.HEADER_BYTES
                reserved = self._base + self._size - line_spool.HEADER_BYTES
            else:
                length = reserved = self._end
            return AppendFileStatistics(str(self._public), mapped, length, reserved,
                                        self._remaps, self._fallback, self._forked_path,
                                        str(self._path) if mapped else "")

    def __repr__(self) -> str:
        stats = self.statistics()
        return (f"<AppendFile {stats.path} mapped={stats.mapped} length={stats.length} "
                f"reserved={stats.reserved}>")
