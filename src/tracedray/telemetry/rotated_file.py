"""Compressed parts of a session's line files: zstd's seekable format, read by offset.

A rotated part (``<name>.<n>.jsonl``, rotation.py) is compressed into
``<name>.<n>.jsonl.zst``: independent zstd frames of about FRAME_BYTES of whole lines
each, then a seek table in a skippable frame — the layout of zstd's *seekable format*
(zstd's ``contrib/seekable_format``): ``zstd -d``/``zstdcat`` decompress it as any zstd
file, and a reader finds the frame that holds an uncompressed offset without reading
the frames before it. The trace index keeps offsets into the uncompressed lines, so an
indexed line costs one frame's decompression, not the part's.

Seek table (little-endian): a skippable frame header (magic 0x184D2A5E, u32 size), one
entry per frame (u32 compressed size, u32 decompressed size), then the footer: u32
number of frames, u8 descriptor (0: no checksums), u32 magic 0x8F92EAB1.

A file that is not in that form, or whose table does not add up to its size, raises
:class:`~tracedray.exceptions.SessionFileCorruptError` naming the file and what is wrong.
"""

from __future__ import annotations

import contextlib
import io
import os
import struct
from bisect import bisect_right
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from tracedray.exceptions import SessionFileCorruptError

if TYPE_CHECKING:
    import zstandard

SUFFIX = ".zst"
LEVEL = 1  # ~4x smaller JSON lines at ~300 MB/s: compression stays off the CPU's way
FRAME_BYTES = 128 << 10  # uncompressed bytes per frame: what reading one line costs
SKIPPABLE_MAGIC = 0x184D2A5E
SEEKABLE_MAGIC = 0x8F92EAB1
_FRAME_HEADER = struct.Struct("<II")  # skippable magic, payload size
_ENTRY = struct.Struct("<II")  # compressed size, decompressed size
_FOOTER = struct.Struct("<IBI")  # frames, descriptor, seekable magic


def frame_cut(data: bytes, frame_bytes: int, *, at_end: bool) -> int:
    """Where the first frame of ``data`` ends: after the last newline within
    ``frame_bytes`` (a line longer than that is a frame of its own, never cut); 0 when
    more data is needed to decide (``at_end``: none comes, the rest is the frame)."""
    if len(data) <= frame_bytes and (at_end or len(data) < frame_bytes):
        return len(data) if at_end else 0
    cut = data.rfind(b"\n", 0, frame_bytes) + 1
    if cut:
        return cut
    newline = data.find(b"\n", frame_bytes)
    if newline >= 0:
        return newline + 1
    return len(data) if at_end else 0


def frame_bounds(data: bytes, frame_bytes: int = FRAME_BYTES) -> list[tuple[int, int]]:
    """(start, end) of each frame of ``data`` (see frame_cut)."""
    bounds = []
    start = 0
    while start < len(data):
        end = start + frame_cut(data[start:], frame_bytes, at_end=True)
        bounds.append((start, end))
        start = end
    return bounds


def compress(data: bytes, *, level: int = LEVEL, frame_bytes: int = FRAME_BYTES) -> bytes:
    """``data`` in the seekable format (see the module doc)."""
    out = io.BytesIO()
    _write_frames(io.BytesIO(data), out, level=level, frame_bytes=frame_bytes)
    return out.getvalue()


def _write_frames(source: BinaryIO, out: BinaryIO, *, level: int, frame_bytes: int) -> None:
    """Compress ``source`` into ``out`` a frame at a time: memory holds about two frames,
    whatever the size of the part."""
    import zstandard  # here: 20 ms to import, which no process that never compresses pays

    compressor = zstandard.ZstdCompressor(level=level, write_content_size=True)
    entries = []
    pending = b""
    at_end = False
    while not at_end:
        chunk = source.read(frame_bytes)
        at_end = not chunk
        pending += chunk
        while pending:
            cut = frame_cut(pending, frame_bytes, at_end=at_end)
            if not cut:
                break  # a frame's last line is still to be read
            frame = compressor.compress(pending[:cut])
            out.write(frame)
            entries.append(_ENTRY.pack(len(frame), cut))
            pending = pending[cut:]
    table = b"".join(entries) + _FOOTER.pack(len(entries), 0, SEEKABLE_MAGIC)
    out.write(_FRAME_HEADER.pack(SKIPPABLE_MAGIC, len(table)) + table)


def compress_file(source: Path, *, level: int = LEVEL) -> Path:
    """Write ``source`` compressed beside it (``<source>.zst``, through a temporary name
    and a rename, so a reader sees the whole file or none), then delete ``source``.
    Returns the compressed path. OSError propagates (the source is then left as it was).
    """
    target = source.with_name(source.name + SUFFIX)
    temporary = source.with_name(f".{source.name}{SUFFIX}.tmp")
    try:
        with open(source, "rb") as data:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as out:
                _write_frames(data, out, level=level, frame_bytes=FRAME_BYTES)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    source.unlink()
    return target


class SeekableReader:
    """Reads uncompressed byte ranges of one seekable zstd file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle = open(path, "rb")  # noqa: SIM115 - closed by close()
        try:
            self._read_table()
        except BaseException:
            self._handle.close()
            raise
        import zstandard  # see compress

        self._zstd_error = zstandard.ZstdError
        self._decompressor: zstandard.ZstdDecompressor = zstandard.ZstdDecompressor()
        self._cached = -1
        self._cached_data = b""
        self.frames_read = 0

    def _corrupt(self, what: str) -> SessionFileCorruptError:
        return SessionFileCorruptError(
            f"{self.path} is not a readable compressed part ({what}); its lines cannot be "
            "read: move it aside (the rest of the session still reads)")

    def _read_table(self) -> None:
        handle = self._handle
        size = os.fstat(handle.fileno()).st_size
        if size < _FRAME_HEADER.size + _FOOTER.size:
            raise self._corrupt(f"{size} bytes, too short for a seek table")
        handle.seek(size - _FOOTER.size)
        frames, descriptor, magic = _FOOTER.unpack(handle.read(_FOOTER.size))
        if magic != SEEKABLE_MAGIC:
            raise self._corrupt("no seek table at its end")
        entry_size = _ENTRY.size + (4 if descriptor & 0x80 else 0)
        table_size = frames * entry_size + _FOOTER.size
        table_start = size - table_size - _FRAME_HEADER.size
        if table_start < 0:
            raise self._corrupt(f"a seek table of {frames} frames in {size} bytes")
        handle.seek(table_start)
        raw = handle.read(_FRAME_HEADER.size + table_size)
        skippable, payload = _FRAME_HEADER.unpack_from(raw)
        if skippable != SKIPPABLE_MAGIC or payload != table_size:
            raise self._corrupt("a damaged seek table frame")
        self._starts: list[int] = []  # uncompressed offset of each frame
        self._positions: list[int] = []  # file offset of each frame
        self._lengths: list[int] = []  # compressed length of each frame
        uncompressed = position = 0
        for index in range(frames):
            compressed, decompressed = _ENTRY.unpack_from(
                raw, _FRAME_HEADER.size + index * entry_size)
            self._starts.append(uncompressed)
            self._positions.append(position)
            self._lengths.append(compressed)
            uncompressed += decompressed
            position += compressed
        if position != table_start:
            raise self._corrupt(f"its frames add up to {position} bytes, not {table_start}")
        self.size = uncompressed

    def _frame(self, index: int) -> bytes:
        if index == self._cached:
            return self._cached_data
        self._handle.seek(self._positions[index])
        compressed = self._handle.read(self._lengths[index])
        try:
            data = self._decompressor.decompress(compressed)
        except self._zstd_error as exc:
            raise self._corrupt(f"frame {index} does not decompress: {exc}") from exc
        expected = (self._starts[index + 1] if index + 1 < len(self._starts)
                    else self.size) - self._starts[index]
        if len(data) != expected:
            raise self._corrupt(f"frame {index} holds {len(data)} bytes, not {expected}")
        self.frames_read += 1
        self._cached, self._cached_data = index, data
        return data

    def read(self, offset: int, length: int) -> bytes:
        """The uncompressed bytes [offset, offset + length) (shorter at the end)."""
        end = min(offset + length, self.size)
        parts = []
        while offset < end:
            index = bisect_right(self._starts, offset) - 1
            data = self._frame(index)
            start = offset - self._starts[index]
            piece = data[start:start + end - offset]
            parts.append(piece)
            offset += len(piece)
        return b"".join(parts)

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> SeekableReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
