"""Line spools: a process's private mapped log file, and its copy into the public ``.jsonl``.

A process appends its log lines to ``logs/<component>-<pid>.spool`` through a shared
mapping (append_file.py: a memory copy, no system call, the GIL kept; the page cache
holds each line the moment it is copied, so a SIGKILL loses nothing). That file is
reserved ahead of its data, so it ends in NUL bytes while its writer lives or after it
was killed: no tool but tracedray's should read it. The public file,
``logs/<component>-<pid>.jsonl``, receives the spool's *complete* lines, copied byte
for byte with plain ``write`` calls by whoever converts: the node's telemetry agent
(every round, with the span spools), every reader (:func:`read_data`, first), and the
writer itself when it closes or its process exits. So the public file only ever holds
whole newline-terminated lines, and it holds every line that had been logged once a
reader has looked.

Layout::

    header (64 bytes): magic "TDLINES1" | converted: u64 | copied_to: u64 | closed: u64
                       | pid: u64 | zeros
    data from byte 64: the lines, then NUL bytes (the reserved tail)

``converted`` counts the data bytes already in the public file; ``copied_to`` is the
public file's size right after that copy. Copiers serialise on the spool's ``flock``;
under it a copier appends the complete lines from ``converted`` on (one ``write``,
``O_APPEND``) and then records both numbers. A copier killed between the two (or in
the middle of its write) leaves the public file longer than ``copied_to``: the next
copier finds those bytes equal to the spool's next bytes and counts them as copied, so
no line is doubled and a torn copy is completed rather than repeated. Bytes that do not
match (someone else appended to the file) are left alone; a file shorter than
``copied_to`` (rotated or truncated by a log tool) is appended to from where the spool
was. A spool whose writer closed it is deleted once copied.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path

from tracedray.telemetry import line_file
from tracedray.telemetry.spool_files import lock_spool, open_spool

MAGIC = b"TDLINES1"
HEADER_BYTES = 64
SUFFIX = ".spool"
_FIELDS = struct.Struct("<8sQQQQ")  # magic, converted, copied_to, closed, pid
_COPIED = struct.Struct("<QQ")  # converted, copied_to
COPIED_AT = 8
CLOSED_AT = 24
FIRST_BLOCK = 4 << 10
READ_BLOCK = 1 << 20
MAX_BYTES_PER_COPY = 8 << 20  # bounds how long one copy holds the lock
MAX_COPIES_PER_SYNC = 64  # per spool and sync: a spool that keeps growing ends a sync
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


@dataclass(frozen=True)
class LineSpoolHeader:
    converted: int
    copied_to: int
    closed: bool
    pid: int


@dataclass
class LineCopy:
    path: str
    copied: int = 0  # bytes copied into the public file this time
    lines: bytes = b""  # the complete lines not yet copied, when the spool is read-only
    skipped: bool = False  # another copier held the lock (non-blocking call)
    deleted: bool = False
    pending: bool = False  # complete lines remain (the byte budget ran out)
    warnings: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------- layout


def data_length(data: bytes) -> int:
    """Length of the real data in ``data``: everything before the first NUL byte."""
    nul = data.find(b"\0")
    return len(data) if nul < 0 else nul


def complete_length(data: bytes) -> int:
    """Length of the prefix of ``data`` made of complete (newline-terminated) lines.

    A line still being copied in, or cut by a SIGKILL, has no newline yet or
    contains NUL bytes (the reserved part of a spool is zeros, and a copy may store
    its last bytes before its middle ones); it is not part of the prefix.
    """
    return data.rfind(b"\n", 0, data_length(data)) + 1


def header_bytes(pid: int, copied_to: int) -> bytes:
    return _FIELDS.pack(MAGIC, 0, copied_to, 0, pid).ljust(HEADER_BYTES, b"\0")


def parse_header(data: bytes) -> LineSpoolHeader | None:
    if len(data) < _FIELDS.size or not data.startswith(MAGIC):
        return None
    _, converted, copied_to, closed, pid = _FIELDS.unpack_from(data)
    return LineSpoolHeader(converted, copied_to, bool(closed), pid)


def spool_path(jsonl: Path) -> Path:
    """The private spool behind the public file ``jsonl``."""
    return jsonl.with_name(jsonl.name[:-len(".jsonl")] + SUFFIX) \
        if jsonl.name.endswith(".jsonl") else jsonl.with_name(jsonl.name + SUFFIX)


def jsonl_path(spool: Path) -> Path:
    return spool.with_name(spool.name[:-len(SUFFIX)] + ".jsonl")


def spool_files(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.name.endswith(SUFFIX))
    except OSError:
        return []


def mark_closed(fd: int) -> None:
    os.pwrite(fd, struct.pack("<Q", 1), CLOSED_AT)


# --------------------------------------------------------------------------- copying


def copy_spool(path: Path, *, blocking: bool = True,
               max_bytes: int = MAX_BYTES_PER_COPY) -> LineCopy:
    """Append the complete lines of spool ``path`` not yet copied to its ``.jsonl``.

    Never raises for a missing or foreign file. A spool this process may not write (a
    copied session folder) is read without being changed: its uncopied lines are
    returned in ``lines``.
    """
    result = LineCopy(str(path))
    opened = open_spool(path, result.warnings)
    if opened is None:
        return result
    fd, writable = opened
    try:
        if writable:
            if not lock_spool(fd, blocking=blocking):
                result.skipped = True
                return result
            if os.fstat(fd).st_nlink == 0:
                return result  # its writer deleted it (all copied) while we waited
        _copy_locked(fd, path, result, writable=writable, max_bytes=max_bytes)
    except OSError as exc:
        result.warnings.append(f"{path}: copy failed: {exc}")
    finally:
        os.close(fd)  # releases the lock
    return result


def _copy_locked(fd: int, path: Path, result: LineCopy, *, writable: bool,
                 max_bytes: int) -> None:
    header = parse_header(os.pread(fd, HEADER_BYTES, 0))
    if header is None:
        if os.fstat(fd).st_size >= HEADER_BYTES:
            result.warnings.append(f"{path}: not a line spool; left alone")
        return  # or a writer that has not written its header yet
    converted, copied_to = header.converted, header.copied_to
    if not writable:
        data = _read_from(fd, HEADER_BYTES + converted, 1 << 62)
        result.lines = data[:complete_length(data)]
        return
    data = _read_from(fd, HEADER_BYTES + converted, max_bytes)
    if complete_length(data):  # else a round with nothing to copy: a header and a page
        public = jsonl_path(path)
        out = os.open(public, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            size = os.fstat(out).st_size
            if size > copied_to:
                recorded = _recorded_copy(fd, out, converted, copied_to, size - copied_to)
                if recorded:
                    converted += recorded
                    data = _read_from(fd, HEADER_BYTES + converted, max_bytes)
            end = complete_length(data)
            if end:
                _write_all(out, memoryview(data)[:end], public)
            result.copied = end
            result.pending = end > 0 and len(data) >= max_bytes
            converted += end
            # The file's size, not size + end: what a copier after us must compare with.
            copied_to = os.fstat(out).st_size
        finally:
            os.close(out)
    if (converted, copied_to) != (header.converted, header.copied_to):
        os.pwrite(fd, _COPIED.pack(converted, copied_to), COPIED_AT)
        _release_copied(fd, header.converted, converted)
    if result.pending:
        return
    # Re-read: the writer may have closed it while we copied (nothing follows then).
    latest = parse_header(os.pread(fd, HEADER_BYTES, 0))
    closed = header.closed or (latest is not None and latest.closed)
    if closed and data_length(os.pread(fd, 1, HEADER_BYTES + converted)) == 0:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        result.deleted = True


def _recorded_copy(fd: int, out: int, converted: int, copied_to: int, extra: int) -> int:
    """How many of the ``extra`` bytes past ``copied_to`` in the public file are a copy
    of the spool's next bytes (a copier that did not get to record them): all or none."""
    theirs = os.pread(out, extra, copied_to)
    ours = os.pread(fd, extra, HEADER_BYTES + converted)
    return extra if len(theirs) == extra and theirs == ours else 0


def _read_from(fd: int, offset: int, max_bytes: int) -> bytes:
    """The spool's data from ``offset`` up to its first NUL (at most ``max_bytes``)."""
    chunks: list[bytes] = []
    total = 0
    block_size = FIRST_BLOCK  # doubling: a round with nothing new reads one page
    while total < max_bytes:
        block = os.pread(fd, min(block_size, max_bytes - total), offset + total)
        length = data_length(block)
        chunks.append(block[:length])
        total += length
        if length < len(block) or not block:
            break
        block_size = min(block_size * 2, READ_BLOCK)
    return b"".join(chunks)


def _write_all(fd: int, data: memoryview, path: Path) -> None:
    written = 0
    while written < len(data):
        count = os.write(fd, data[written:])
        if count <= 0:
            raise OSError(f"short write to {path}")
        written += count


_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 0x01, 0x02
_fallocate = None
if hasattr(os, "posix_fallocate"):  # Linux: give the copied pages' blocks back
    with contextlib.suppress(Exception):
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        _fallocate = _libc.fallocate
        _fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


def _release_copied(fd: int, before: int, after: int) -> None:
    """Free the disk blocks of whole pages now copied (the public file has them):
    a long-lived process's log then takes its size once on disk, not twice. The pages
    read back as zeros; nothing reads them again (the writer is past them, copiers
    start at ``converted``). Best effort."""
    if _fallocate is None:
        return
    start = max(_PAGE, (HEADER_BYTES + before) // _PAGE * _PAGE)  # page 0: the header
    stop = (HEADER_BYTES + after) // _PAGE * _PAGE
    if stop > start:
        _fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, start, stop - start)


# --------------------------------------------------------------------------- folders


@dataclass
class LinesSync:
    copied: int = 0  # bytes
    warnings: list[str] = field(default_factory=list)
    pending: bool = False


def sync_lines_dir(folder: Path, *, blocking: bool = True,
                   max_bytes: int = MAX_BYTES_PER_COPY) -> LinesSync:
    """Copy every spool of ``folder`` into its public file (or as far as the lock allows)."""
    total = LinesSync()
    for spool in spool_files(folder):
        for _ in range(MAX_COPIES_PER_SYNC):  # the lock is let go between copies
            result = copy_spool(spool, blocking=blocking, max_bytes=max_bytes)
            total.copied += result.copied
            total.warnings.extend(result.warnings)
            if not result.pending:
                break
        else:
            total.pending = True
    return total


def has_uncopied(folder: Path) -> bool:
    """Whether some spool in ``folder`` holds data past its ``converted`` mark. A look:
    per spool its header and one byte. Never raises."""
    for path in spool_files(folder):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            header = parse_header(os.pread(fd, HEADER_BYTES, 0))
            if header is not None and data_length(
                    os.pread(fd, 1, HEADER_BYTES + header.converted)) > 0:
                return True
        except OSError:
            continue
        finally:
            os.close(fd)
    return False


def _is_line_spool(path: Path) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def read_data(path: Path) -> bytes:
    """The lines of public file ``path``, its spool's uncopied complete lines included.

    The spool is copied first (as every reader does, so nothing that was logged is
    missing); a spool this process may not write is read in memory. The data ends
    at the first NUL byte, for files written before spools existed.
    """
    spool = spool_path(path)
    extra = b""
    if _is_line_spool(spool):  # not a span spool (traces/, spool_format.py)
        for _ in range(MAX_COPIES_PER_SYNC):  # bounded: a spool that keeps growing
            copied = copy_spool(spool)
            extra = copied.lines
            if not copied.pending:
                break
    if line_file.stored_path(path) is None:
        if not extra:
            raise FileNotFoundError(f"no file {path}")
        data = b""
    else:  # a rotated part may be compressed (line_file.py); SessionFileCorruptError
        data = line_file.read_range(path)
    return data[:data_length(data)] + extra
