"""OTLP JSON lines: the one module that knows the on-disk span layout.

Each line is one ``TracesData`` object, ``{"resourceSpans": [...]}``, exactly what the
OpenTelemetry Collector's ``file`` exporter writes and its ``otlpjsonfile`` receiver
reads (https://opentelemetry.io/docs/specs/otlp/#json-protobuf-encoding):

- ``traceId`` / ``spanId`` / ``parentSpanId`` are lowercase hex (32 / 16 characters);
- 64-bit integers (``startTimeUnixNano``, ``intValue``) are decimal strings;
- ``kind`` and ``status.code`` are the OTLP enum integers (``SPAN_KIND_INTERNAL`` = 1);
- keys are lowerCamelCase.

The encoder is hand-written (dicts + ``json.dumps``) because the SDK's protobuf
route (``encode_spans`` + ``json_format``) costs ~50 µs per span and emits base64
ids; the resource and scope part of a line is encoded once and cached.

Reading is tolerant: a line cut short by a crash, or otherwise not valid JSON, is
skipped and described in the ``warnings`` list the caller passes in, so one bad
line never hides the rest of a trace.
"""

from __future__ import annotations

import base64
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, SpanKind, TraceFlags, TraceState
from opentelemetry.trace.status import Status, StatusCode
from opentelemetry.util.types import AttributeValue

from tracedray.exceptions import SessionFileCorruptError
from tracedray.telemetry.append_file import complete_length, data_length
from tracedray.telemetry.line_file import line_files, read_range
from tracedray.telemetry.span_shape import decode_blob

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

# --------------------------------------------------------------------------- encoding


def encode_value(value: object) -> dict[str, Any]:
    """One OTel attribute value as an OTLP ``AnyValue``."""
    # bool before int: bool is a subclass of int in Python.
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        if math.isfinite(value):
            return {"doubleValue": value}
        # JSON has no NaN/Infinity; the protobuf JSON mapping spells them as strings.
        return {"doubleValue": "NaN" if math.isnan(value) else ("Infinity" if value > 0
                                                                else "-Infinity")}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, bytes):
        return {"bytesValue": base64.b64encode(value).decode("ascii")}
    if isinstance(value, Sequence):
        return {"arrayValue": {"values": [encode_value(item) for item in value]}}
    return {"stringValue": str(value)}


def encode_attributes(attributes: Mapping[str, object] | None) -> list[dict[str, Any]]:
    if not attributes:
        return []
    return [{"key": key, "value": encode_value(value)} for key, value in attributes.items()]


# The hot path below builds JSON text directly instead of dicts for json.dumps:
# half the cost per span. Scalars take the fast branches; anything else (arrays,
# bytes, NaN) goes through encode_value, so both paths share one definition.
_string: Callable[[str], str] = json.encoder.encode_basestring
_key_prefixes: dict[str, str] = {}


def _value_json(value: object) -> str:
    kind = type(value)
    if kind is str:
        return '{"stringValue":' + _string(value) + "}"  # type: ignore[arg-type]
    if kind is bool:
        return '{"boolValue":true}' if value else '{"boolValue":false}'
    if kind is int:
        return '{"intValue":"' + str(value) + '"}'
    if kind is float and math.isfinite(value):  # type: ignore[arg-type]
        return '{"doubleValue":' + repr(value) + "}"
    if kind is tuple or kind is list:
        # The SDK stores list attributes as tuples; the scheduler's spans carry three
        # of them, and the generic route (dicts + json encoder) tripled their cost.
        items = cast("Sequence[object]", value)
        return '{"arrayValue":{"values":[' + ",".join([_value_json(i) for i in items]) + "]}}"
    return _dumps(encode_value(value))


# The JSON of whole attributes, {"key":...,"value":...}, by key then value: most values
# repeat from span to span (function names, node and worker ids, kinds, attempt 0),
# and a lookup costs a fifth of building the text. Only str and int values: a bool or
# a float can equal an int (True == 1 == 1.0) and would find the int's text.
# Bounded: at most ITEM_CACHE_KEYS keys, each forgetting its values when it holds
# ITEM_CACHE_VALUES (ids that never repeat fill one quickly, then start it afresh).
ITEM_CACHE_KEYS = 128
ITEM_CACHE_VALUES = 256
_items: dict[str, dict[object, str]] = {}


def _key_prefix(key: str) -> str:
    """An attribute's JSON up to its value: ``{"key":...,"value":``."""
    prefix = _key_prefixes.get(key)
    if prefix is None:
        prefix = '{"key":' + _string(key) + ',"value":'
        if len(_key_prefixes) < 4096:  # keys are low-cardinality; bound it anyway
            _key_prefixes[key] = prefix
    return prefix


def _item_json(key: str, value: object) -> str:
    return _key_prefix(key) + _value_json(value) + "}"


def _attributes_json(attributes: Mapping[str, object]) -> str:
    parts = []
    for key, value in attributes.items():
        kind = type(value)
        if kind is not str and kind is not int:
            parts.append(_item_json(key, value))
            continue
        known = _items.get(key)
        if known is None:
            if len(_items) >= ITEM_CACHE_KEYS:
                parts.append(_item_json(key, value))
                continue
            known = _items[key] = {}
        item = known.get(value)
        if item is None:
            item = _item_json(key, value)
            if len(known) >= ITEM_CACHE_VALUES:
                known.clear()
            known[value] = item
        parts.append(item)
    return "[" + ",".join(parts) + "]"


def _span_json(span: ReadableSpan) -> str:
    context = span.context
    assert context is not None  # the SDK gives every recorded span a context
    out = [f'{{"traceId":"{context.trace_id:032x}","spanId":"{context.span_id:016x}"']
    if context.trace_state:
        out.append(',"traceState":' + _string(context.trace_state.to_header()))
    parent = span.parent
    if parent is not None:
        out.append(f',"parentSpanId":"{parent.span_id:016x}"')
    # OTel Python's SpanKind.INTERNAL is 0, OTLP's SPAN_KIND_INTERNAL is 1.
    out.append(f',"name":{_string(span.name)},"kind":{span.kind.value + 1},'
               f'"startTimeUnixNano":"{span.start_time or 0}",'
               f'"endTimeUnixNano":"{span.end_time or 0}"')
    attributes = span.attributes
    if attributes:
        out.append(',"attributes":' + _attributes_json(attributes))
    if span.dropped_attributes:
        out.append(f',"droppedAttributesCount":{span.dropped_attributes}')
    if span.events:
        out.append(_events_json([(event.name, event.timestamp, event.attributes)
                                 for event in span.events]))
    if span.links:
        out.append(_links_json(span.links))
    out.append(_status_json(span.status.status_code.value, span.status.description))
    return "".join(out)


def span_object_json(span: ReadableSpan) -> str:
    """The JSON of one SDK span object, without the resource and scope around it."""
    return _span_json(span)


EventFields = tuple[str, int, "Mapping[str, AttributeValue] | None"]  # name, time ns, attributes


def _events_json(events: Sequence[EventFields]) -> str:
    return ',"events":[' + ",".join(
        f'{{"timeUnixNano":"{timestamp}","name":{_string(name)},'
        f'"attributes":{_attributes_json(attributes or {})}}}'
        for name, timestamp, attributes in events) + "]"


def _links_json(links: Sequence[Link]) -> str:
    return ',"links":[' + ",".join(
        f'{{"traceId":"{link.context.trace_id:032x}","spanId":"{link.context.span_id:016x}",'
        f'"attributes":{_attributes_json(link.attributes or {})}}}'
        for link in links) + "]"


def _status_json(code: int, message: str | None) -> str:
    """The status member and the span's closing brace."""
    if code == 0:
        return ',"status":{}}'
    if message:
        return f',"status":{{"code":{code},"message":{_string(message)}}}}}'
    return f',"status":{{"code":{code}}}}}'


_SPAN_HEAD = ('{"traceId":"%032x","spanId":"%016x"%s%s,"name":%s,"kind":%s,'
              '"startTimeUnixNano":"%s","endTimeUnixNano":"%s"')
_PARENT_MEMBER = ',"parentSpanId":"%016x"'


def record_span_json(trace_id: int, span_id: int, parent_span_id: int, name: str,
                     kind: int, start_ns: int, end_ns: int,
                     attributes: Mapping[str, object] | None, status_code: int = 0,
                     status_message: str | None = None,
                     events: Sequence[EventFields] = (), trace_state: str = "",
                     links: Sequence[Link] = ()) -> str:
    """One span's JSON from its fields (no SDK span object), as ``_span_json`` writes it.

    ``parent_span_id`` 0 means a root span; ``kind`` is OTel Python's SpanKind value.
    """
    # One template for the fixed members (%-formatting hexes an int in half the time
    # an f-string's format spec takes), then only what the span has: every span the
    # converter writes comes through here.
    out = _SPAN_HEAD % (
        trace_id, span_id, ',"traceState":' + _string(trace_state) if trace_state else "",
        _PARENT_MEMBER % parent_span_id if parent_span_id else "",
        _string(name), kind + 1, start_ns, end_ns)
    if attributes:
        out += ',"attributes":' + _attributes_json(attributes)
    if events:
        out += _events_json(events)
    if links:
        out += _links_json(links)
    return out + _status_json(status_code, status_message)


# The decoded shapes the converter has met (span_shape.py), by blob: the span name's
# JSON, the OTLP kind, the constant attributes' JSON items, and the JSON prefix of each
# variable attribute. Bounded like the item cache; a shape forgotten is decoded again.
MAX_SHAPES = 4096
_shapes: dict[bytes, tuple[str, int, str, tuple[str, ...]]] = {}


def shaped_span_json(blob: bytes, trace_id: int, span_id: int, parent_span_id: int,
                     start_ns: int, duration_ns: int, values: Sequence[object],
                     trace_state: str = "") -> str:
    """The JSON of a span recorded by its shape (a SHAPED spool record): the same text
    :func:`record_span_json` writes for that span with its attributes as a dict
    (``SpanShape.attributes``: an id, ``bytes``, as its hex), no events, links or
    status. ValueError (or EOFError, TypeError) when ``blob`` is not a shape or
    ``values`` do not fit it."""
    name_json, kind, constant_json, prefixes = _shape_of(blob, len(values))
    out = _SPAN_HEAD % (
        trace_id, span_id, ',"traceState":' + _string(trace_state) if trace_state else "",
        _PARENT_MEMBER % parent_span_id if parent_span_id else "",
        name_json, kind, start_ns, start_ns + duration_ns)
    # Variable values are mostly ids seen once (a task id): built directly, not looked
    # up in the item cache, whose misses cost twice a build.
    items = []
    for prefix, value in zip(prefixes, values, strict=True):
        if type(value) is str:
            items.append(prefix + '{"stringValue":' + _string(value) + "}}")
        elif type(value) is bytes:  # an id (span_shape.py): hex needs no escaping
            items.append(prefix + '{"stringValue":"' + value.hex() + '"}}')
        else:
            items.append(prefix + _value_json(value) + "}")
    if constant_json:
        items.append(constant_json)
    if items:
        out += ',"attributes":[' + ",".join(items) + "]"
    return out + ',"status":{}}'


def _shape_of(blob: bytes, values: int) -> tuple[str, int, str, tuple[str, ...]]:
    """The decoded shape of ``blob`` (cached) for spans bringing ``values`` values;
    ValueError when they do not fit its keys (or EOFError, TypeError: not a shape)."""
    shape = _shapes.get(blob)
    if shape is None:
        shape = _decode_shape(blob)
    if values != len(shape[3]):
        raise ValueError(f"{values} values for the {len(shape[3])} keys of a shape")
    return shape


def _decode_shape(blob: bytes) -> tuple[str, int, str, tuple[str, ...]]:
    name, kind, constant, variable = decode_blob(blob)
    # As record_span_json: a variable key that is also constant appears once.
    constant_items = dict(constant)
    for key in variable:
        constant_items.pop(key, None)
    constant_json = _attributes_json(constant_items)[1:-1]
    prefixes = tuple(_key_prefix(key) for key in variable)
    shape = (_string(name), kind + 1, constant_json, prefixes)
    if len(_shapes) >= MAX_SHAPES:
        _shapes.clear()
    _shapes[bytes(blob)] = shape
    return shape


# The parts of a packed span's JSON that its SHAPE fixes, as %-templates (a literal
# "%" of a name or an attribute doubled): the ids and times go in as the struct gives
# them, the trace id as its two 64-bit halves, each id value as its hex.
_PACKED_IDS = '{"traceId":"%016x%016x","spanId":"%016x"'
_PACKED_PARENT = ',"parentSpanId":"%016x"'
_PACKED_ID_VALUE = '{"stringValue":"%s"}}'
_PACKED_INT_VALUE = '{"intValue":"%d"}}'


def packed_span_renderer(blob: bytes, codes: Sequence[str]) -> Callable[[Sequence[Any]], str]:
    """The JSON of a PACKED record (spool_format.py) of the shape ``blob`` whose packing
    has ``codes`` (span_shape.packing_codes), as a function of the record's unpacked
    fields: the text :func:`shaped_span_json` writes for the SHAPED record it stands
    for, from one %-template per shape (with and without a parent) instead of a
    template for the head and an item per value. ValueError (or EOFError, TypeError)
    when ``blob`` is not a shape or ``codes`` do not fit it."""
    name_json, kind, constant_json, prefixes = _shape_of(blob, len(codes))
    items = [prefix.replace("%", "%%") + (_PACKED_INT_VALUE if code == "q" else _PACKED_ID_VALUE)
             for prefix, code in zip(prefixes, codes, strict=True)]
    if constant_json:
        items.append(constant_json.replace("%", "%%"))
    tail = (',"name":' + name_json.replace("%", "%%") + ',"kind":' + str(kind)
            + ',"startTimeUnixNano":"%d","endTimeUnixNano":"%d"'
            + (',"attributes":[' + ",".join(items) + "]" if items else "") + ',"status":{}}')
    root, child = _PACKED_IDS + tail, _PACKED_IDS + _PACKED_PARENT + tail
    ids_at = tuple(index for index, code in enumerate(codes) if code != "q")
    # fields: mark, SHAPE offset, trace id high and low, span id, parent id, start,
    # duration, then the values. The hot shapes' (an id, or an id and an int: a task's
    # spans) are read by position, without a list of the values.
    if codes and codes[0] != "q" and len(codes) <= 2 and ids_at == (0,):
        if len(codes) == 1:
            def render_id(fields: Sequence[Any]) -> str:
                start_ns = fields[6]
                if fields[5]:
                    return child % (fields[2], fields[3], fields[4], fields[5], start_ns,
                                    start_ns + fields[7], fields[8].hex())
                return root % (fields[2], fields[3], fields[4], start_ns,
                               start_ns + fields[7], fields[8].hex())
            return render_id

        def render_id_int(fields: Sequence[Any]) -> str:
            start_ns = fields[6]
            if fields[5]:
                return child % (fields[2], fields[3], fields[4], fields[5], start_ns,
                                start_ns + fields[7], fields[8].hex(), fields[9])
            return root % (fields[2], fields[3], fields[4], start_ns, start_ns + fields[7],
                           fields[8].hex(), fields[9])
        return render_id_int

    def render(fields: Sequence[Any]) -> str:
        _, _, high, low, span_id, parent_id, start_ns, duration_ns, *values = fields
        for index in ids_at:
            values[index] = values[index].hex()
        if parent_id:
            return child % (high, low, span_id, parent_id, start_ns, start_ns + duration_ns,
                            *values)
        return root % (high, low, span_id, start_ns, start_ns + duration_ns, *values)

    return render


def _resource_json(resource: Resource) -> str:
    return '{"attributes":' + _attributes_json(resource.attributes) + "}"


def _scope_json(scope: InstrumentationScope | None) -> str:
    if scope is None:
        return "{}"
    out: dict[str, Any] = {"name": scope.name}
    if scope.version:
        out["version"] = scope.version
    return _dumps(out)


def line_prefix(resource: Resource, scope: InstrumentationScope | None) -> str:
    """Everything of a trace-file line before its span: the resource and the scope."""
    return ('{"resourceSpans":[{"resource":' + _resource_json(resource)
            + ',"scopeSpans":[{"scope":' + _scope_json(scope) + ',"spans":[')


LINE_SUFFIX = "]}]}]}"


def span_line(prefix: str, span_json: str) -> str:
    """A whole trace-file line: a cached resource+scope ``prefix`` around one span."""
    return prefix + span_json + LINE_SUFFIX


class SpanLineEncoder:
    """Encodes one span per line, caching the resource+scope prefix of the line.

    The cache key is the identity of the Resource and scope objects; the objects are
    kept alive in the cache so their ids cannot be reused by other objects.
    """

    def __init__(self) -> None:
        self._prefixes: dict[tuple[int, int], tuple[str, object, object]] = {}

    def encode(self, span: ReadableSpan) -> str:
        resource = span.resource
        scope = span.instrumentation_scope
        key = (id(resource), id(scope))
        cached = self._prefixes.get(key)
        if cached is None:
            if len(self._prefixes) > 64:  # resources change only on fork; bound it anyway
                self._prefixes.clear()
            cached = (line_prefix(resource, scope), resource, scope)
            self._prefixes[key] = cached
        return cached[0] + _span_json(span) + LINE_SUFFIX


def encode_spans_line(spans: Sequence[ReadableSpan]) -> str:
    """Encode spans as one ``TracesData`` JSON line (no trailing newline).

    Spans are grouped by resource, then by instrumentation scope, as OTLP requires.
    """
    by_resource: dict[int, tuple[Resource, dict[int, tuple[Any, list[str]]]]] = {}
    for span in spans:
        resource = span.resource
        scope = span.instrumentation_scope
        _, scopes = by_resource.setdefault(id(resource), (resource, {}))
        _, bucket = scopes.setdefault(id(scope), (scope, []))
        bucket.append(_span_json(span))
    resource_spans = [
        '{"resource":' + _resource_json(resource) + ',"scopeSpans":[' + ",".join(
            '{"scope":' + _scope_json(scope) + ',"spans":[' + ",".join(span_texts) + "]}"
            for scope, span_texts in scopes.values()) + "]}"
        for resource, scopes in by_resource.values()
    ]
    return '{"resourceSpans":[' + ",".join(resource_spans) + "]}"


# --------------------------------------------------------------------------- reading


def scan_trace_file(path: Path, *, start: int = 0,
                    warnings: list[str] | None = None) -> tuple[list[dict[str, Any]], int]:
    """Parse every complete line of ``path`` from byte offset ``start``.

    Returns the parsed line objects and the offset just after the last complete
    (newline-terminated) line, which a caller can pass back as ``start`` to read
    only what was appended since. The data ends at the first NUL byte: a live (or
    killed) writer reserves the file ahead of its data (see append_file.py). A final
    line without its newline (a writer killed mid-write, or one still writing) is not
    consumed: it is reported in ``warnings`` and left for the next scan. A complete
    line that is not a JSON object is skipped, reported, and consumed.
    """
    try:  # a rotated part may be compressed: read_range reads either
        data = read_range(path, start)
    except (OSError, SessionFileCorruptError) as exc:
        if warnings is not None:
            warnings.append(f"{path}: cannot read: {exc}")
        return [], start
    objects: list[dict[str, Any]] = []
    end = complete_length(data)
    complete, tail = data[:end], data[end:data_length(data)]
    line_start = start
    for number, raw in enumerate(complete.split(b"\n")[:-1]):
        offset = line_start
        line_start += len(raw) + 1
        if not raw.strip():
            continue
        try:
            parsed = json.loads(raw)
        except ValueError as exc:
            if warnings is not None:
                warnings.append(f"{path}: skipped corrupt line at byte {offset}: {exc}")
            continue
        if not isinstance(parsed, dict) or not isinstance(parsed.get("resourceSpans"), list):
            if warnings is not None:
                warnings.append(f"{path}: skipped line {number + 1} at byte {offset}: "
                                "not a TracesData object")
            continue
        objects.append(parsed)
    if tail.strip() and warnings is not None:
        warnings.append(f"{path}: skipped truncated last line at byte {start + end} "
                        f"({len(tail)} bytes without a newline)")
    return objects, start + end


def iter_trace_file(path: Path, warnings: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """Yield each line's parsed ``TracesData`` object; bad lines go to ``warnings``."""
    objects, _ = scan_trace_file(path, warnings=warnings)
    yield from objects


def trace_files(traces_dir: Path) -> list[Path]:
    """Every trace file by its plain name: rotated parts (compressed or not, oldest
    first) before the current file (telemetry/line_file.py)."""
    return line_files(traces_dir)


def read_trace_dir(traces_dir: Path, offsets: Mapping[str, int] | None = None,
                   ) -> tuple[list[dict[str, Any]], list[str]]:
    """Every ``resourceSpans`` entry of every ``*.jsonl`` file in ``traces_dir``.

    Span spools are converted first (see spool_convert.py), so every span that had
    ended is included; spools this process may not write are decoded in memory.
    ``offsets`` maps file names to byte offsets to start from (see
    :func:`scan_trace_file`); files not named start at 0.
    """
    from tracedray.telemetry.spool_convert import sync_traces_dir

    synced = sync_traces_dir(traces_dir)
    warnings: list[str] = list(synced.warnings)
    resource_spans: list[dict[str, Any]] = []
    for line in synced.lines:
        resource_spans.extend(json.loads(line)["resourceSpans"])
    for path in trace_files(traces_dir):
        start = (offsets or {}).get(path.name, 0)
        objects, _ = scan_trace_file(path, start=start, warnings=warnings)
        for obj in objects:
            resource_spans.extend(obj["resourceSpans"])
    return resource_spans, warnings


def end_offsets(traces_dir: Path) -> dict[str, int]:
    """Per file, the offset after its last complete line: a high-water mark for later reads.

    Spools are converted first, so the mark is after every span that had ended.
    """
    from tracedray.telemetry.spool_convert import sync_traces_dir

    sync_traces_dir(traces_dir)
    result: dict[str, int] = {}
    for path in trace_files(traces_dir):
        try:
            data = read_range(path)
        except (OSError, SessionFileCorruptError):
            continue
        result[path.name] = complete_length(data)
    return result


def decode_value(value: Mapping[str, Any]) -> Any:
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])  # float("NaN") / float("Infinity") work too
    if "arrayValue" in value:
        items = [decode_value(item) for item in value["arrayValue"].get("values", [])]
        return tuple(items)
    if "bytesValue" in value:
        return base64.b64decode(value["bytesValue"])
    if "kvlistValue" in value:
        # OTel Python attributes cannot hold maps; keep the information as JSON text.
        return json.dumps({kv["key"]: decode_value(kv.get("value", {}))
                           for kv in value["kvlistValue"].get("values", [])})
    return None


def decode_attributes(items: Iterable[Mapping[str, Any]] | None) -> dict[str, Any]:
    return {item["key"]: decode_value(item.get("value", {})) for item in items or ()}


def _span_context(trace_id: str, span_id: str, trace_state: str = "") -> SpanContext:
    return SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(span_id, 16),
        is_remote=False,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
        trace_state=TraceState.from_header([trace_state]) if trace_state else None,
    )


def _readable_span(raw: Mapping[str, Any], resource: Resource,
                   scope: InstrumentationScope | None) -> ReadableSpan:
    trace_id = raw["traceId"]
    parent_id = raw.get("parentSpanId") or ""
    status_raw = raw.get("status") or {}
    code = StatusCode(int(status_raw.get("code", 0)))
    return ReadableSpan(
        name=raw.get("name", ""),
        context=_span_context(trace_id, raw["spanId"], raw.get("traceState", "")),
        parent=_span_context(trace_id, parent_id) if parent_id else None,
        resource=resource,
        attributes=decode_attributes(raw.get("attributes")),
        events=[Event(event.get("name", ""), decode_attributes(event.get("attributes")),
                      int(event.get("timeUnixNano", 0)))
                for event in raw.get("events") or ()],
        links=[Link(_span_context(link["traceId"], link["spanId"]),
                    decode_attributes(link.get("attributes")))
               for link in raw.get("links") or ()],
        kind=SpanKind(max(int(raw.get("kind", 1)) - 1, 0)),
        status=Status(code, status_raw.get("message") if code is StatusCode.ERROR else None),
        start_time=int(raw.get("startTimeUnixNano", 0)),
        end_time=int(raw.get("endTimeUnixNano", 0)),
        instrumentation_scope=scope,
    )


def first_sighting(span: Mapping[str, Any], seen: set[tuple[Any, Any]]) -> bool:
    """False for a span whose (traceId, spanId) was seen already, and notes it.

    A converter killed between appending a spool's lines and recording how far it got
    leaves those lines twice (spool_convert.py); no two spans share both ids, so the
    second copy is dropped where spans are read back.
    """
    key = (span.get("traceId"), span.get("spanId"))
    if key in seen:
        return False
    seen.add(key)
    return True


def to_readable_spans(resource_spans: Iterable[Mapping[str, Any]]) -> list[ReadableSpan]:
    """Turn ``resourceSpans`` entries back into SDK ``ReadableSpan`` objects.

    Equal resources share one ``Resource`` object; a span seen twice (see
    :func:`first_sighting`) is returned once. Entries whose ids are missing or not hex
    raise ``ValueError``/``KeyError``: they did not come from our encoder.
    """
    seen: set[tuple[Any, Any]] = set()
    resources: dict[str, Resource] = {}
    scopes: dict[tuple[str, str], InstrumentationScope] = {}
    spans: list[ReadableSpan] = []
    for entry in resource_spans:
        resource_attrs = (entry.get("resource") or {}).get("attributes") or []
        key = _dumps(resource_attrs)
        resource = resources.get(key)
        if resource is None:
            resource = Resource(decode_attributes(resource_attrs))
            resources[key] = resource
        for scope_spans in entry.get("scopeSpans") or ():
            scope_raw = scope_spans.get("scope") or {}
            scope_key = (scope_raw.get("name", ""), scope_raw.get("version", ""))
            scope = scopes.get(scope_key)
            if scope is None:
                scope = InstrumentationScope(scope_key[0], scope_key[1] or None)
                scopes[scope_key] = scope
            for raw in scope_spans.get("spans") or ():
                if first_sighting(raw, seen):
                    spans.append(_readable_span(raw, resource, scope))
    return spans


def trace_file_name(component: str, pid: int | None = None) -> str:
    return f"{component}-{os.getpid() if pid is None else pid}.jsonl"
