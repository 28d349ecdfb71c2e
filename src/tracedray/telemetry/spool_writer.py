"""Appending records to this process's span spool (layout: spool_format.py).

Like append_file.py (whose window logic it shares), the records are copied into a
``MAP_SHARED`` window of the file: the pages belong to the kernel's page cache the
moment the copy is done, so a SIGKILL loses no span that had ended, and appending
needs no system call and never lets go of the GIL. The file is grown ahead in chunks with
``posix_fallocate`` (a full disk fails there, not as a SIGBUS later); the reserved
part reads as zeros, which is "no record yet" to a reader.

``mapped=False`` (``TRACEDRAY_TELEMETRY_MAPPED_FILES=false``) appends with
``pwrite`` instead, payload first and length last, like the mapped path.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tracedray.telemetry import spool_format as fmt
from tracedray.telemetry.append_file import MappedAppender, live_writers
from tracedray.telemetry.span_shape import SpanShape


@dataclass(frozen=True)
class SpoolStatistics:
    path: str
    mapped: bool
    records: int  # records appended by this writer (the prefix record included)
    bytes: int  # bytes of records, padding included
    shapes: int  # SHAPE records written for PACKED ones (span_shape.py)
    write_errors: int  # spans append_shaped could not record
    last_error: str
    remaps: int
    fallback_reason: str  # why a mapped spool went back to pwrite; "" if it did not

_PADDED = fmt.LENGTH.size + fmt.ALIGN - 1
_ALIGN_MASK = ~(fmt.ALIGN - 1)
_pack_length_into = fmt.LENGTH.pack_into
assert fmt.LENGTH.size == 4
_PACKED = fmt.PACKED_MARK
_LOW_64 = (1 << 64) - 1
MAX_SHAPE_OFFSETS = 4096  # forgotten beyond that: a shape met again is written again


class SpoolWriter(MappedAppender):
    """One process's spool; ``append`` is thread-safe. Errors (``OSError``) propagate.

    A spool left by an earlier process with the same pid (pid reuse) is converted
    and replaced: a spool has one writer and one resource.
    """

    def __init__(self, path: Path, line_prefix: str, *, mapped: bool = True) -> None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if path.exists():
            from tracedray.telemetry.spool_convert import convert_spool

            convert_spool(path, close_abandoned=True)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        self._prefix = line_prefix
        self._records = 0
        self._create(path, mapped)
        live_writers.add(self)  # a forked child moves to its own spool

    def _create(self, path: Path, mapped: bool) -> None:
        """A fresh spool at ``path``: header, window, and the PREFIX record."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.pwrite(fd, fmt.header_bytes(os.getpid()), 0)
            super().__init__(path, fd)
            self._end = fmt.HEADER_BYTES
            # Where this spool wrote each shape's SHAPE record. Keyed by the shape
            # itself (identity), which the dict keeps alive: an id() could be reused.
            self._shape_offsets: dict[SpanShape, int] = {}
            self._shapes = 0
            self._errors = 0  # of append_shaped, which counts rather than raises
            self._last_error = ""
            if mapped:
                try:
                    self._map_window(0)
                except OSError as exc:
                    self._fall_back(exc)
            self.append(fmt.prefix_payload(self._prefix))
        except BaseException:
            os.close(fd)
            raise

    def append(self, payload: bytes) -> int:
        """Append one record; returns its offset in the file."""
        length = len(payload)
        size = (length + _PADDED) & _ALIGN_MASK  # fmt.record_size, inline: hot path
        # acquire/release rather than ``with``, and the length packed in place: this runs
        # for every span that is not PACKED, and each saves ~0.7k instructions.
        lock = self._lock
        lock.acquire()
        try:
            # Room for the record and the zero length word that ends the data.
            if self._map is None or self._pos + size + 4 > self._size:
                if self._fd is None:
                    raise OSError(f"{self._path} is closed")
                if not self._room_mapped(size + 4):
                    end = self._end
                    self._append_written(payload)
                    self._records += 1
                    return end
            mapping, pos = self._map, self._pos
            assert mapping is not None
            start = pos + 4
            mapping[start:start + length] = payload
            _pack_length_into(mapping, pos, length)  # last: commits the record
            self._pos = pos + size
            self._records += 1
            return self._base + pos
        finally:
            lock.release()

    def append_shaped(self, shape: SpanShape, trace_id: int, span_id: int, parent_id: int,
                      start_ns: int, duration_ns: int, values: tuple[Any, ...],
                      trace_state: str) -> None:
        """Record one span of ``shape`` (which has a blob) with ``values``: a PACKED
        record when the shape has a packing, the values fit it and there is no
        tracestate, else a SHAPED one (spool_format.py). The hot paths' one call per
        span. Never raises: an error (a full disk) is counted in :meth:`statistics`;
        after :meth:`close` nothing is recorded."""
        packer = shape.packer
        if packer is not None and not trace_state:
            try:
                shape_at = self._shape_offsets.get(shape)
                if shape_at is None:
                    shape_at = self._define(shape)
                high, low = trace_id >> 64, trace_id & _LOW_64
                lock = self._lock
                lock.acquire()
                try:
                    size = shape.packed_size
                    mapping, pos = self._map, self._pos
                    if mapping is None or pos + size + 4 > self._size:
                        if self._fd is None:
                            return  # closed
                        if not self._room_mapped(size + 4):
                            self._append_written(packer.pack(
                                _PACKED, shape_at, high, low, span_id, parent_id, start_ns,
                                duration_ns, *values))
                            self._records += 1
                            return
                        mapping, pos = self._map, self._pos
                        assert mapping is not None
                    # Straight into the window, no payload object; the length word,
                    # packed last, commits it as for any record. The values are passed
                    # one by one: ``*values`` cost more than the pack (~260 ns to ~210).
                    pack, at, arity = packer.pack_into, pos + 4, len(values)
                    try:
                        if arity == 2:
                            first, second = values
                            pack(mapping, at, _PACKED, shape_at, high, low, span_id, parent_id,
                                 start_ns, duration_ns, first, second)
                        elif arity == 1:
                            pack(mapping, at, _PACKED, shape_at, high, low, span_id, parent_id,
                                 start_ns, duration_ns, values[0])
                        elif arity == 3:
                            first, second, third = values
                            pack(mapping, at, _PACKED, shape_at, high, low, span_id, parent_id,
                                 start_ns, duration_ns, first, second, third)
                        else:
                            pack(mapping, at, _PACKED, shape_at, high, low, span_id, parent_id,
                                 start_ns, duration_ns, *values)
                    except struct.error:
                        # pack_into stops at the value that does not fit, the fields
                        # before it written: clear them, or a shorter record here later
                        # would leave bytes past its end that a reader takes for the next
                        # length word.
                        mapping[at:at + packer.size] = bytes(packer.size)
                        raise
                    _pack_length_into(mapping, pos, packer.size)
                    self._pos = pos + size
                    self._records += 1
                    return
                finally:
                    lock.release()
            except struct.error:
                pass  # a value the packing does not take: a SHAPED record, below
            except Exception as exc:  # a full disk must never reach user code
                if self._fd is not None:  # after close(): nothing to record
                    self._count_error(exc)
                return
        fields = (fmt.SHAPED, shape.blob, trace_id, span_id, parent_id, start_ns, duration_ns,
                  values, trace_state)
        try:
            self.append(fmt.record_payload(fields))
        except Exception as exc:
            if self._fd is not None:  # after close(): nothing to record
                self._count_error(exc)

    def append_packed_batch(self, spans: Sequence[Any], end_ns: int) -> None:
        """Record spans that ended together at ``end_ns``, each with the ``shape`` (one
        with a packing), ``ids`` (trace id, span id, parent span id, "": no tracestate),
        ``start_ns`` and ``values`` of a ``_record.PendingSpan`` (read from it: a tuple
        per span would cost the caller its allocation and the collector its tracking):
        the PACKED records :meth:`append_shaped` writes one by one, in order, packed
        under one lock into the window. What does not fit the window, or a value the
        packing does not take (and every span after it), goes through
        :meth:`append_shaped`. Never raises."""
        done = 0
        try:
            offsets = self._shape_offsets
            need = 4
            for span in spans:
                if span.shape not in offsets:
                    self._define(span.shape)
                need += span.shape.packed_size
            lock = self._lock
            lock.acquire()
            try:
                mapping, pos = self._map, self._pos
                if mapping is not None and pos + need <= self._size:
                    for span in spans:
                        shape = span.shape
                        packer = shape.packer
                        trace_id, span_id, parent_id, _ = span.ids
                        start_ns = span.start_ns
                        at = pos + 4
                        try:
                            packer.pack_into(mapping, at, _PACKED, offsets[shape], trace_id >> 64,
                                             trace_id & _LOW_64, span_id, parent_id, start_ns,
                                             end_ns - start_ns, *span.values)
                        except struct.error:  # as in append_shaped: clear what went in
                            mapping[at:at + packer.size] = bytes(packer.size)
                            break
                        _pack_length_into(mapping, pos, packer.size)  # commits it
                        pos += shape.packed_size
                        done += 1
                    self._pos = pos
                    self._records += done
            finally:
                lock.release()
        except Exception as exc:  # a full disk must never reach user code
            if self._fd is not None:
                self._count_error(exc)
            return
        for span in spans[done:]:
            trace_id, span_id, parent_id, _ = span.ids
            self.append_shaped(span.shape, trace_id, span_id, parent_id, span.start_ns,
                               end_ns - span.start_ns, span.values, "")

    def _count_error(self, exc: Exception) -> None:
        self._errors += 1  # under the lock, or racing only another failure's count
        self._last_error = f"{type(exc).__name__}: {exc}"

    def _define(self, shape: SpanShape) -> int:
        """Append ``shape``'s SHAPE record; returns its offset. Two threads may both
        append one for a new shape: either serves."""
        assert shape.blob is not None and shape.packing is not None
        offset = self.append(fmt.shape_payload(shape.blob, shape.packing))
        offsets = self._shape_offsets
        if len(offsets) >= MAX_SHAPE_OFFSETS:
            offsets.clear()
        offsets[shape] = offset
        self._shapes += 1
        return offset

    def _room_mapped(self, need: int) -> bool:
        """Move the window so ``need`` bytes fit; False when appending with pwrite
        (configured, or the window could not move: a full disk)."""
        if self._map is None:
            return False
        try:
            self._map_window(need)
        except OSError as exc:
            self._fall_back(exc)
            return False
        return True

    def _append_written(self, payload: bytes) -> None:
        end = self._end
        size = fmt.record_size(len(payload))
        self._pwrite_all(payload + bytes(size - fmt.LENGTH.size - len(payload)),
                         end + fmt.LENGTH.size)
        self._pwrite_all(fmt.LENGTH.pack(len(payload)), end)  # last: commits the record
        self._end = end + size

    def _forked(self) -> None:
        """In a forked child: the parent keeps its spool, the child gets its own.

        Its spans go to ``<name>.fork-<pid>.spool`` next to the parent's, with the
        parent's resource, until the child's telemetry is configured afresh.
        """
        self._let_go_after_fork()
        stem = self._path.name[:-len(fmt.SUFFIX)]
        path = self._path.with_name(f"{stem}.fork-{os.getpid()}{fmt.SUFFIX}")
        with contextlib.suppress(OSError):
            self._create(path, mapped=False)

    def close(self) -> None:
        """Mark the spool closed and cut it to its data; conversion is the caller's."""
        with self._lock:
            fd, self._fd = self._fd, None
            if fd is None:
                return
            end = self._end = self._data_end()
            if self._map is not None:
                with contextlib.suppress(Exception):
                    self._map.close()
                self._map = None
            with contextlib.suppress(OSError):
                os.ftruncate(fd, end)
            with contextlib.suppress(OSError):
                os.pwrite(fd, fmt.U64.pack(1), fmt.CLOSED_AT)
            with contextlib.suppress(OSError):
                os.close(fd)
        live_writers.discard(self)

    def statistics(self) -> SpoolStatistics:
        with self._lock:
            return SpoolStatistics(str(self._path), self._map is not None, self._records,
                                   self._data_end() - fmt.HEADER_BYTES, self._shapes,
                                   self._errors, self._last_error, self._remaps,
                                   self._fallback)
