"""The span spool's on-disk layout: what a process writes on its hot path.

Encoding a span as an OTLP JSON line costs a process ~10 µs of CPU and ~1.7 KB of
freshly touched shared pages (the resource is repeated on every line); inside a
busy worker that came to ~25 µs per span, half of what a minimal task costs. So a
process does not write JSON: it appends each ended span's fields, ``marshal``-ed
(~1.5 µs, ~330 bytes), to its spool ``traces/<component>-<pid>.spool``, a file it
maps shared, so a SIGKILL loses nothing that had ended. The node's telemetry agent
(and any reader, and the writer at exit) turns spools into the OTLP JSON lines of
``<component>-<pid>.jsonl``; see spool_convert.py.

Layout::

    header (64 bytes): magic "TDSPOOL1" | converted: u64 | closed: u64 | pid: u64 | zeros
    records from byte 64, each 8-byte aligned:
        length: u32 (little endian)   0 = no record here (yet)
        payload: ``length`` bytes, marshal of a tuple whose first item is its tag,
            or a PACKED record (below), whose first byte no marshal data starts with
        zero padding to the next multiple of 8

The writer copies the payload first and its length last, so a reader (or a writer
killed in between) never sees a length whose payload is not complete. ``converted``
is the offset of the first record not yet in the JSON file; only a converter holding
the file's ``flock`` changes it. ``closed`` is set by the writer when it shuts down.

Payload tags:
    PREFIX (0, line_prefix): the resource + scope part of this process's lines;
        always the first record (see otlp_json.line_prefix).
    SPAN (1, trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns,
          attributes, status_code, status_message, events, trace_state, links):
        the arguments of otlp_json.record_span_json, links as (trace_id, span_id,
        attributes) tuples.
    LINE (2, span_json): a span already encoded (spans from the SDK tracer, and
        spans whose attributes marshal cannot carry).
    SPANS (3, [SPAN or SHAPED tuple, ...]): spans that ended together (a batch of
        task results ends its dispatch spans at once), one record for all; spans all of
        packed shapes are a PACKED record each instead.
    SHAPED (4, shape_blob, trace_id, span_id, parent_span_id, start_ns, duration_ns,
            values, trace_state): a span of a SpanShape (span_shape.py) with no
        events, links or status: its name, kind and shared attributes are in the
        blob, its own attribute values in ``values`` (the shape's variable keys, in
        order). The duration rather than the end: it fits marshal's 4-byte integer.
    SHAPE (5, shape_blob, packing): a SpanShape with a packing, written once per spool
        before the first PACKED record of its shape.

PACKED records (span_shape.py) are not marshal but ``struct``, little endian: the
byte ``P``, then the file offset of their SHAPE record (u64), the trace id's high
and low 64 bits, span id, parent span id (u64 each), start and duration (ns, i64),
then the values as the shape's packing lays them out (``q``: i64; ``<n>p``: an id,
a length byte and up to n-1 bytes). They stand for the SHAPED record with the same
fields and no tracestate. A converter that starts after the SHAPE record reads it
at its offset.
"""

from __future__ import annotations

import marshal
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import Link, SpanContext

from tracedray.telemetry.otlp_json import (
    packed_span_renderer,
    record_span_json,
    shaped_span_json,
)
from tracedray.telemetry.span_shape import PACKED_HEAD, packing_codes

MAGIC = b"TDSPOOL1"
HEADER_BYTES = 64
CONVERTED_AT = 8
CLOSED_AT = 16
PID_AT = 24
ALIGN = 8
LENGTH = struct.Struct("<I")
U64 = struct.Struct("<Q")
SUFFIX = ".spool"

PREFIX, SPAN, LINE, SPANS, SHAPED, SHAPE = 0, 1, 2, 3, 4, 5
_TAGS = frozenset((PREFIX, SPAN, LINE, SPANS, SHAPED, SHAPE))
PACKED_MARK = 0x50  # b"P": not a marshal type code, so a PACKED payload is told apart
_HEAD = struct.Struct(PACKED_HEAD)
SHAPE_AT = struct.Struct("<Q")  # a PACKED record's SHAPE offset, after the mark
_dumps: Any = marshal.dumps  # typed loosely: marshal's stub rejects tuples holding Any
# One span's record is marshalled in format 2: without the table of shared objects
# that formats 3+ build and free on every call (~8% of the call for a record this
# small, which shares almost nothing). A batch (SPANS) keeps the default format, whose
# references write the attribute keys its spans share once.
ONE_RECORD_FORMAT = 2


@dataclass(frozen=True)
class Header:
    converted: int  # offset of the first record not yet converted
    closed: bool  # the writer shut down: no record will follow the last one
    pid: int


def header_bytes(pid: int) -> bytes:
    return (MAGIC + U64.pack(HEADER_BYTES) + U64.pack(0) + U64.pack(pid)).ljust(
        HEADER_BYTES, b"\0")


def parse_header(data: bytes) -> Header | None:
    """None when ``data`` does not start with a spool header (not a spool, or empty)."""
    if len(data) < HEADER_BYTES or not data.startswith(MAGIC):
        return None
    converted = U64.unpack_from(data, CONVERTED_AT)[0]
    return Header(max(converted, HEADER_BYTES), U64.unpack_from(data, CLOSED_AT)[0] != 0,
                  U64.unpack_from(data, PID_AT)[0])


def record_size(payload_length: int) -> int:
    """Bytes a record with this payload takes, padding included."""
    size = LENGTH.size + payload_length
    return size + (-size % ALIGN)


def span_payload(trace_id: int, span_id: int, parent_span_id: int, name: str, kind: int,
                 start_ns: int, end_ns: int, attributes: Any, status_code: int = 0,
                 status_message: str | None = None, events: Sequence[Any] = (),
                 trace_state: str = "", links: Sequence[Link] = ()) -> bytes:
    """A SPAN payload; falls back to a LINE payload for values marshal cannot carry."""
    try:  # one tuple, one C call
        return _dumps((SPAN, trace_id, span_id, parent_span_id, name, kind, start_ns,
                       end_ns, attributes, status_code, status_message, events, trace_state,
                       link_fields(links) if links else ()))
    except ValueError:  # an attribute value of a type marshal does not know
        return line_payload(record_span_json(
            trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, attributes,
            status_code, status_message, events, trace_state, links))


def link_fields(links: Sequence[Link]) -> tuple[tuple[int, int, dict[str, Any]], ...]:
    """A SPAN record's links: (trace_id, span_id, attributes) tuples."""
    return tuple((link.context.trace_id, link.context.span_id, dict(link.attributes or {}))
                 for link in links)


def record_payload(fields: tuple[Any, ...]) -> bytes:
    """The payload of one SPAN or SHAPED record tuple; a LINE payload when a value is
    of a type marshal does not know."""
    try:
        payload: bytes = _dumps(fields, ONE_RECORD_FORMAT)
        return payload
    except ValueError:
        return line_payload(span_json(fields))


def line_payload(span_json: str) -> bytes:
    return marshal.dumps((LINE, span_json))


def prefix_payload(line_prefix: str) -> bytes:
    return marshal.dumps((PREFIX, line_prefix))


def shape_payload(blob: bytes, packing: str) -> bytes:
    return marshal.dumps((SHAPE, blob, packing))


@dataclass(frozen=True)
class PackedShape:
    """What decoding a PACKED record needs from its SHAPE record."""

    blob: bytes
    unpack: Any  # struct.Struct.unpack of the whole payload
    render: Any  # the unpacked fields -> the span's JSON (otlp_json.packed_span_renderer)


def packed_shape(fields: tuple[Any, ...]) -> PackedShape:
    """The PackedShape of a decoded SHAPE record; ValueError when it is not one (a bad
    packing, a blob that is no shape or whose keys the packing does not fit)."""
    if len(fields) != 3 or fields[0] != SHAPE or type(fields[1]) is not bytes \
            or type(fields[2]) is not str:
        raise ValueError("not a SHAPE record")
    try:
        unpack = struct.Struct(PACKED_HEAD + fields[2]).unpack
    except struct.error as exc:
        raise ValueError(f"a SHAPE record with a bad packing: {exc}") from None
    try:
        render = packed_span_renderer(fields[1], packing_codes(fields[2]))
    except (ValueError, EOFError, TypeError) as exc:
        raise ValueError(f"a SHAPE record whose shape does not decode: {exc}") from None
    return PackedShape(fields[1], unpack, render)


def packed_shape_offset(payload: bytes | memoryview) -> int:
    """The file offset of the SHAPE record a PACKED payload points at."""
    if len(payload) < _HEAD.size:
        raise ValueError("a PACKED record shorter than its head")
    offset: int = SHAPE_AT.unpack_from(payload, 1)[0]
    return offset


def packed_span_json(payload: bytes | memoryview, shape: PackedShape) -> str:
    """The OTLP JSON of a PACKED record: that of the SHAPED record it stands for, made
    without building that record. ValueError when it does not fit ``shape``."""
    try:
        fields = shape.unpack(payload)
    except struct.error as exc:
        raise ValueError(f"a PACKED record that does not fit its shape: {exc}") from None
    text: str = shape.render(fields)
    return text


@dataclass(frozen=True)
class Scan:
    payloads: list[tuple[int, memoryview]]  # (offset, payload) of each complete record
    end: int  # offset just after the last complete record
    torn: bool  # a record at ``end`` has a length but not all of its bytes in ``data``
    ended: bool  # a zero length word at ``end``: the end of the records


def scan_records(data: bytes | memoryview, offset: int) -> Scan:
    """The complete records in ``data``, which holds the file from byte ``offset``.

    The payloads are views into ``data``, not copies: copying each one cost a
    converter as much as decoding it.
    """
    view = memoryview(data)
    unpack = LENGTH.unpack_from
    payloads: list[tuple[int, memoryview]] = []
    position = 0
    size = len(view)
    limit = size - LENGTH.size
    while position <= limit:
        length = unpack(view, position)[0]
        if length == 0:
            return Scan(payloads, offset + position, False, True)
        start = position + LENGTH.size
        if start + length > size:
            return Scan(payloads, offset + position, True, False)
        payloads.append((offset + position, view[start:start + length]))
        position = (start + length + ALIGN - 1) & -ALIGN  # record_size, inline: per record
    return Scan(payloads, offset + position, False, False)


def decode_payload(payload: bytes | memoryview) -> tuple[Any, ...]:
    """The tuple of a marshal payload (not a PACKED one: its first byte is PACKED_MARK);
    ValueError/EOFError/TypeError when it is not one of ours."""
    fields = marshal.loads(payload)
    if type(fields) is not tuple or not fields or fields[0] not in _TAGS:
        raise ValueError("not a spool record")
    return fields


def span_json(fields: tuple[Any, ...]) -> str:
    """The OTLP JSON of a decoded SPAN, SHAPED or LINE record (the span object, no
    envelope)."""
    tag = fields[0]
    if tag == SHAPED:
        return shaped_span_json(*fields[1:])
    if tag == LINE:
        return str(fields[1])
    if not fields[13]:  # no links (nearly every span): the fields are the arguments
        return record_span_json(*fields[1:13])
    (_, trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, attributes,
     status_code, status_message, events, trace_state, link_fields) = fields
    links = [Link(SpanContext(link_trace, link_span, False), link_attributes)
             for link_trace, link_span, link_attributes in link_fields]
    return record_span_json(trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns,
                            attributes, status_code, status_message, events, trace_state,
                            links)
