"""Turning span spools into OTLP JSON lines (layouts: spool_format.py, otlp_json.py).

Three kinds of callers convert, all through :func:`convert_spool`:

- the node's telemetry agent (agent.py), every half second, at low CPU priority;
- every reader of the traces folder (the CLI, the pytest plugin), first, so it sees
  every span that had ended (:func:`sync_traces_dir`);
- the writer itself when it shuts down, for what the agent has not done yet.

A line holds up to SPANS_PER_LINE spans of one conversion under one resource (the
resource is ~1 KB: repeating it per span tripled the bytes and the conversion time).

Converters serialise on the spool's ``flock``: under it a converter appends the
lines of the records from ``converted`` on to ``<component>-<pid>.jsonl`` (one
``write``, ``O_APPEND``) and then moves ``converted`` past them. A converter killed
between the two repeats those lines once; nothing is lost, and readers
(otlp_json.first_sighting) return each span once. A spool whose writer
closed it and whose records are all converted is deleted. A spool the reader may
not write (a copied session folder) is decoded without being changed. A record that
does not decode is skipped with a warning; one conversion reads at most ``max_bytes``
of records (the rest is ``pending``, for the next round).

What a round costs the agent, which converts every spool of the node twice a second:
the header and the PREFIX record come in one small read (a resource larger than
HEAD_READ costs one more read, of that record alone); the records from ``converted``
on are read in blocks that double from one page, so a spool with nothing new costs a
few system calls; payloads are decoded from views of the block, never copied. What
remains per span is ``marshal.loads`` (a ``struct`` unpack for a PACKED record) and
the JSON (otlp_json.record_span_json). A PACKED record names its SHAPE record by
offset; a conversion keeps the ones it meets and reads (once) any from before its
start.
Reading a whole 1 MiB block for the PREFIX record alone, and copying every payload in
it, had made each round of a long-lived spool cost milliseconds.
"""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tracedray.telemetry import spool_format as fmt
from tracedray.telemetry.otlp_json import LINE_SUFFIX, span_line
from tracedray.telemetry.spool_files import lock_spool, open_spool

HEAD_READ = 4096  # header and, nearly always, the PREFIX record (a resource is ~1 KB)
FIRST_BLOCK = 4 << 10  # a round's first read: one page, all an idle round (most) needs
READ_BLOCK = 1 << 20  # the most one read takes: reads double from FIRST_BLOCK to this
MAX_BYTES_PER_ROUND = 8 << 20  # bounds how long one conversion holds the lock
MAX_ROUNDS_PER_SYNC = 64  # 512 MiB of records per spool and sync, then the next sync
SPANS_PER_LINE = 256  # spans share one resource per line; lines stay well under 1 MiB
LINE_END = LINE_SUFFIX + "\n"  # what follows a line's spans: span_line's end, a newline


@dataclass
class Conversion:
    path: str
    spans: int = 0  # spans turned into lines this time
    lines: list[str] = field(default_factory=list)  # only when the spool is read-only
    skipped: bool = False  # another converter held the lock (non-blocking call)
    deleted: bool = False
    warnings: list[str] = field(default_factory=list)
    pending: bool = False  # records remain (the round's byte budget ran out)


def jsonl_path(spool: Path) -> Path:
    return spool.with_name(spool.name[:-len(fmt.SUFFIX)] + ".jsonl")


def spool_files(traces_dir: Path) -> list[Path]:
    try:
        return sorted(p for p in traces_dir.iterdir() if p.name.endswith(fmt.SUFFIX))
    except OSError:
        return []


def convert_spool(path: Path, *, blocking: bool = True, close_abandoned: bool = False,
                  max_bytes: int = MAX_BYTES_PER_ROUND) -> Conversion:
    """Convert what ``path`` holds beyond its ``converted`` mark; see the module doc.

    ``close_abandoned`` treats the spool as closed (its writer is known to be gone),
    so it is deleted once converted. Never raises for a missing or foreign file.
    """
    result = Conversion(str(path))
    opened = open_spool(path, result.warnings)
    if opened is None:
        return result
    fd, writable = opened
    try:
        if writable and not lock_spool(fd, blocking=blocking):
            result.skipped = True
            return result
        _convert_locked(fd, path, result, writable=writable,
                        close_abandoned=close_abandoned, max_bytes=max_bytes)
    except OSError as exc:
        result.warnings.append(f"{path}: conversion failed: {exc}")
    finally:
        os.close(fd)  # releases the lock
    return result


def _unconverted(fd: int, path: Path,
                 result: Conversion) -> tuple[fmt.Header, str, int] | None:
    """(the spool's header, its line prefix, where its unconverted records start); None
    for a file that is not a spool, or one whose writer has not written its header and
    resource record yet (a warning in ``result`` says which, where it is not that)."""
    head = os.pread(fd, HEAD_READ, 0)
    header = fmt.parse_header(head)
    if header is None:
        if os.fstat(fd).st_size >= fmt.HEADER_BYTES:
            result.warnings.append(f"{path}: not a span spool; left alone")
        return None  # or a writer that has not written its header yet
    prefix, first_record = _prefix(fd, head, path, result)
    if prefix is None:
        return None
    return header, prefix, max(header.converted, first_record)


def _convert_locked(fd: int, path: Path, result: Conversion, *, writable: bool,
                    close_abandoned: bool, max_bytes: int) -> None:
    found = _unconverted(fd, path, result)
    if found is None:
        return
    header, prefix, start = found
    spans: list[str] = []
    end = start
    # Read-only: nothing records how far we got, so all of it is decoded at once.
    budget = max_bytes if writable else 1 << 62
    decode, encode = fmt.decode_payload, fmt.span_json
    prefix_tag, batch_tag, shape_tag = fmt.PREFIX, fmt.SPANS, fmt.SHAPE
    packed_mark, shape_offset = fmt.PACKED_MARK, fmt.SHAPE_AT.unpack_from
    shapes: dict[int, fmt.PackedShape] = {}  # SHAPE records met, by offset
    for scan in _scans(fd, start, budget, result):
        for offset, payload in scan.payloads:
            try:
                if payload[0] == packed_mark:
                    # fmt.packed_span_json, inline: this runs for nearly every span.
                    shape_at = shape_offset(payload, 1)[0]
                    shape = shapes.get(shape_at)
                    if shape is None:  # written before this conversion's start
                        shape = shapes[shape_at] = _shape_record(fd, shape_at)
                    spans.append(shape.render(shape.unpack(payload)))
                    continue
                fields = decode(payload)
            except (ValueError, EOFError, TypeError, IndexError, struct.error) as exc:
                result.warnings.append(
                    f"{path}: skipped a corrupt record at byte {offset}: {exc}")
                continue
            tag = fields[0]
            if tag == prefix_tag:
                continue
            if tag == shape_tag:
                try:
                    shapes[offset] = fmt.packed_shape(fields)
                except ValueError as exc:
                    result.warnings.append(f"{path}: skipped a record at byte {offset}: {exc}")
                continue
            for one in (fields[1] if tag == batch_tag else (fields,)):
                try:
                    spans.append(encode(one))
                except Exception as exc:  # a value record_span_json cannot encode
                    result.warnings.append(f"{path}: skipped a span at byte {offset}: {exc}")
        end = scan.end
    result.spans = len(spans)
    # Many spans per line, one resource: a third of the bytes of a line per span.
    bodies = [",".join(spans[first:first + SPANS_PER_LINE])
              for first in range(0, len(spans), SPANS_PER_LINE)]
    if not writable:
        result.lines = [span_line(prefix, body) for body in bodies]
        return
    if bodies:
        _append_lines(jsonl_path(path), prefix, bodies)
    if end != header.converted:
        os.pwrite(fd, fmt.U64.pack(end), fmt.CONVERTED_AT)
    if result.pending:
        return
    closed = header.closed or close_abandoned
    # Re-read: the writer may have closed it while we converted (no record follows then).
    if not closed:
        latest = fmt.parse_header(os.pread(fd, fmt.HEADER_BYTES, 0))
        closed = latest is not None and latest.closed and not _record_at(fd, end)
    if closed:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        result.deleted = True


def _prefix(fd: int, head: bytes, path: Path, result: Conversion) -> tuple[str | None, int]:
    """The PREFIX record's line prefix and the offset after it.

    ``head`` is the file's first HEAD_READ bytes; only a resource larger than that
    costs a second read, of that one record (never a block of the records after it).
    """
    at = fmt.HEADER_BYTES
    if len(head) < at + fmt.LENGTH.size:
        return None, at  # the writer is still writing it
    length = fmt.LENGTH.unpack_from(head, at)[0]
    start = at + fmt.LENGTH.size
    payload = head[start:start + length]
    if len(payload) < length:
        payload = os.pread(fd, length, start)
    if length == 0 or len(payload) < length:
        return None, at  # the writer is still writing it
    try:
        fields = fmt.decode_payload(payload)
    except (ValueError, EOFError, TypeError):
        fields = ()
    if not fields or fields[0] != fmt.PREFIX:
        result.warnings.append(f"{path}: no resource record at byte {at}; left alone")
        return None, at
    return str(fields[1]), at + fmt.record_size(length)


def _shape_record(fd: int, offset: int) -> fmt.PackedShape:
    """The SHAPE record at ``offset`` (a PACKED record's, from before the records at
    hand); ValueError when there is none."""
    head = os.pread(fd, fmt.LENGTH.size, offset)
    length = fmt.LENGTH.unpack(head)[0] if len(head) == fmt.LENGTH.size else 0
    payload = os.pread(fd, length, offset + fmt.LENGTH.size) if length else b""
    if offset < fmt.HEADER_BYTES or not payload or len(payload) < length:
        raise ValueError(f"no SHAPE record at byte {offset}")
    return fmt.packed_shape(fmt.decode_payload(payload))


def _scans(fd: int, start: int, max_bytes: int, result: Conversion) -> Iterator[fmt.Scan]:
    """The complete records from ``start`` on, a block's worth at a time.

    Blocks double from FIRST_BLOCK to READ_BLOCK: an idle spool costs one page, a
    backlog few reads. The payloads are views into the block; a consumer decodes
    them before asking for the next block.
    """
    position = start
    block_size = FIRST_BLOCK
    while position - start < max_bytes:
        want = min(block_size, max(max_bytes - (position - start), fmt.ALIGN))
        block = os.pread(fd, want, position)
        scan = fmt.scan_records(block, position)
        if scan.payloads:
            yield scan
        position = scan.end
        if scan.ended or len(block) < want:
            return  # a zero length word, or the file ends inside a record being written
        if scan.torn and not scan.payloads:
            # One record longer than a block: read it whole.
            length = fmt.LENGTH.unpack_from(block, 0)[0]
            whole = fmt.scan_records(os.pread(fd, fmt.record_size(length), position), position)
            if not whole.payloads:
                return
            yield whole
            position = whole.end
        block_size = min(block_size * 2, READ_BLOCK)
    result.pending = True


def has_unconverted(traces_dir: Path) -> bool:
    """Whether some spool in ``traces_dir`` holds a record past its ``converted`` mark.

    A look, not a conversion: per spool a header, the resource record (nearly always in
    the same read) and one length word. The telemetry agent asks it on a busy machine,
    to count how long spans have waited from when there were some, not from its own
    last round: a reader may have converted everything in between. Never raises.
    """
    for path in spool_files(traces_dir):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            found = _unconverted(fd, path, Conversion(str(path)))
            if found is not None and _record_at(fd, found[2]):
                return True
        except OSError:
            continue
        finally:
            os.close(fd)
    return False


def _record_at(fd: int, offset: int) -> bool:
    word = os.pread(fd, fmt.LENGTH.size, offset)
    return len(word) == fmt.LENGTH.size and fmt.LENGTH.unpack(word)[0] != 0


def _append_lines(path: Path, prefix: str, bodies: list[str]) -> None:
    """Append the lines ``span_line(prefix, body)`` of ``bodies`` to ``path``, in one
    ``write`` (O_APPEND). The file's bytes are joined once and encoded once: building
    each line, then the text, then the bytes copied every span's JSON four times, a
    fifth of a conversion's cost."""
    pieces: list[str] = []
    for body in bodies:
        pieces += (prefix, body, LINE_END)
    data = "".join(pieces).encode("utf-8", "surrogateescape")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        written = 0
        while written < len(data):
            count = os.write(fd, data[written:])
            if count <= 0:
                raise OSError(f"short write to {path}")
            written += count
    finally:
        os.close(fd)


@dataclass
class SyncResult:
    spans: int = 0
    lines: list[str] = field(default_factory=list)  # from spools we may not write
    warnings: list[str] = field(default_factory=list)
    pending: bool = False


def sync_traces_dir(traces_dir: Path, *, blocking: bool = True,
                    max_bytes: int = MAX_BYTES_PER_ROUND) -> SyncResult:
    """Convert every spool in ``traces_dir`` completely (or as far as the lock allows).

    ``max_bytes`` is the budget of one conversion (one lock held); a spool takes up
    to MAX_ROUNDS_PER_SYNC of them.
    """
    total = SyncResult()
    for spool in spool_files(traces_dir):
        for _ in range(MAX_ROUNDS_PER_SYNC):  # bounded: a spool that keeps growing
            result = convert_spool(spool, blocking=blocking, max_bytes=max_bytes)
            total.spans += result.spans
            total.lines.extend(result.lines)
            total.warnings.extend(result.warnings)
            if not result.pending or result.skipped:
                total.pending = total.pending or result.pending
                break
        else:
            total.pending = True
    return total
