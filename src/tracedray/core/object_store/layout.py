"""The byte layout of one stored object (pure: no I/O).

A stored object is the pickle-protocol-5 stream of a value (the *in-band* part)
plus its out-of-band buffers (numpy array data, bytes, ...)::

    offset 0   header      magic "TDRAYOBJ", version, buffer count, in-band length, total size
    32         table       (offset, length) per buffer, 16 bytes each
    64-aligned in-band     the pickle stream
    64-aligned buffer 0    each buffer starts on a 64-byte boundary so numpy (and
    64-aligned buffer 1    SIMD code) can use it in place without a misaligned copy
    ...

Every offset is absolute, so :func:`unpack` returns zero-copy slices of whatever
memory holds the object (an mmap of the shared-memory file, or a spilled copy).
The total size is recorded so a truncated file is detected instead of read past.
"""

from __future__ import annotations

import pickle
import struct
from collections.abc import Sequence

from tracedray.exceptions import ObjectLostError

MAGIC = b"TDRAYOBJ"
VERSION = 1
ALIGNMENT = 64

# magic, version, number of buffers, in-band length, total packed size
_HEADER = struct.Struct("<8sIIQQ")
# absolute offset and length of one out-of-band buffer
_ENTRY = struct.Struct("<QQ")

BufferLike = bytes | bytearray | memoryview | pickle.PickleBuffer
Segment = tuple[int, memoryview]  # (absolute offset, bytes to place there)


def _align(offset: int) -> int:
    return (offset + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def _as_bytes_view(buffer: BufferLike) -> memoryview:
    """A flat unsigned-byte view of ``buffer`` without copying it.

    ``PickleBuffer.raw`` accepts C- and Fortran-contiguous buffers (pickle only
    hands out contiguous ones); a strided view is a caller bug we name.
    """
    try:
        return pickle.PickleBuffer(buffer).raw()
    except BufferError as exc:
        raise ValueError(f"object store buffers must be contiguous: {exc}") from exc


def _offsets(inband_len: int, lengths: Sequence[int]) -> tuple[int, list[int], int]:
    """(in-band offset, buffer offsets, total size) for the given part sizes."""
    cursor = _align(_HEADER.size + _ENTRY.size * len(lengths))
    inband_offset = cursor
    cursor += inband_len
    buffer_offsets: list[int] = []
    for length in lengths:
        cursor = _align(cursor)
        buffer_offsets.append(cursor)
        cursor += length
    return inband_offset, buffer_offsets, cursor


def packed_size(inband: BufferLike, buffers: Sequence[BufferLike]) -> int:
    """Bytes :func:`pack_into` needs for this in-band stream and these buffers."""
    lengths = [_as_bytes_view(b).nbytes for b in buffers]
    return _offsets(_as_bytes_view(inband).nbytes, lengths)[2]


def segments(inband: BufferLike, buffers: Sequence[BufferLike]) -> tuple[int, list[Segment]]:
    """``(total size, [(offset, bytes view), ...])`` that together form the packed object.

    The first segment is the header, buffer table, in-band stream and the padding
    up to the first buffer (small, so they are joined into one); each out-of-band
    buffer follows as its own zero-copy view, and padding between buffers as zeros.
    The segments cover the object whole, so writing them over a reused file leaves
    none of its old bytes.  Writers hand the segments to ``pwrite`` (no
    intermediate copy) or to :func:`pack_into`.
    """
    inband_view = _as_bytes_view(inband)
    views = [_as_bytes_view(b) for b in buffers]
    inband_offset, buffer_offsets, total = _offsets(inband_view.nbytes, [v.nbytes for v in views])
    # The head runs up to the first buffer (its padding included), so that the
    # segments cover every byte of the object: a reused file's old bytes never show.
    head_end = buffer_offsets[0] if buffer_offsets else total
    head = bytearray(head_end)
    _HEADER.pack_into(head, 0, MAGIC, VERSION, len(views), inband_view.nbytes, total)
    for index, (offset, view) in enumerate(zip(buffer_offsets, views, strict=True)):
        _ENTRY.pack_into(head, _HEADER.size + index * _ENTRY.size, offset, view.nbytes)
    head[inband_offset:inband_offset + inband_view.nbytes] = inband_view
    parts: list[Segment] = [(0, memoryview(head))]
    cursor = head_end
    for offset, view in zip(buffer_offsets, views, strict=True):
        if offset > cursor:  # padding between two buffers
            parts.append((cursor, memoryview(bytes(offset - cursor))))
        if view.nbytes:
            parts.append((offset, view))
        cursor = offset + view.nbytes
    if total > cursor:
        parts.append((cursor, memoryview(bytes(total - cursor))))
    return total, parts


def pack_into(target: memoryview, inband: BufferLike, buffers: Sequence[BufferLike]) -> None:
    """Write the packed object into ``target`` (one copy of each part).

    ``target`` must be at least :func:`packed_size` bytes; padding bytes are
    zeroed so the result does not depend on what ``target`` held before.
    """
    total, parts = segments(inband, buffers)
    out = target.cast("B") if target.format != "B" else target
    if out.nbytes < total:
        raise ValueError(f"target has {out.nbytes} bytes, the object needs {total}")
    cursor = 0
    for offset, view in parts:
        out[cursor:offset] = bytes(offset - cursor)
        out[offset:offset + view.nbytes] = view
        cursor = offset + view.nbytes


def _corrupt(detail: str) -> ObjectLostError:
    return ObjectLostError("", f"corrupt object store data: {detail}")


def unpack(view: memoryview) -> tuple[memoryview, list[memoryview]]:
    """Zero-copy ``(in-band stream, buffers)`` slices of a packed object.

    Raises :class:`ObjectLostError` (reason "corrupt ...") when ``view`` is not a
    complete object of this layout: wrong magic or version, truncated data, or
    offsets pointing outside it.
    """
    data = view.cast("B") if view.format != "B" else view
    if data.nbytes < _HEADER.size:
        raise _corrupt(f"{data.nbytes} bytes is shorter than the {_HEADER.size}-byte header")
    magic, version, count, inband_len, total = _HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise _corrupt(f"bad magic {bytes(magic)!r} (expected {MAGIC!r})")
    if version != VERSION:
        raise _corrupt(f"layout version {version}, this tracedray reads version {VERSION}")
    if total > data.nbytes:
        raise _corrupt(f"truncated: header says {total} bytes, only {data.nbytes} present")
    table_end = _HEADER.size + count * _ENTRY.size
    if table_end > total:
        raise _corrupt(f"buffer table of {count} entries runs past the end ({total} bytes)")
    inband_offset = _align(table_end)
    if inband_offset + inband_len > total:
        raise _corrupt("in-band stream runs past the end of the object")
    buffers: list[memoryview] = []
    for index in range(count):
        offset, length = _ENTRY.unpack_from(data, _HEADER.size + index * _ENTRY.size)
        if offset < inband_offset + inband_len or offset + length > total:
            raise _corrupt(f"buffer {index} at [{offset}, {offset + length}) is out of bounds")
        buffers.append(data[offset:offset + length])
    return data[inband_offset:inband_offset + inband_len], buffers
