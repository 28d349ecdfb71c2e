"""Spans as the CLI sees them: small immutable records parsed from OTLP JSON.

The session's trace files and Jaeger's ``/api/v3`` both speak OTLP JSON
(``resourceSpans → scopeSpans → spans``), so one parser feeds one
reconstruction engine whichever backend the spans came from. Attribute values
are decoded by telemetry.otlp_json, the module that writes them.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from tracedray.telemetry import attributes as attr
from tracedray.telemetry.otlp_json import decode_attributes, first_sighting

# OTLP status codes (opentelemetry.proto.trace.v1.Status.StatusCode).
STATUS_UNSET = 0
STATUS_OK = 1
STATUS_ERROR = 2
_STATUS_NAMES = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class SpanEvent:
    name: str
    time_ns: int
    attributes: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)


@dataclass(frozen=True)
class SpanRecord:
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root span
    name: str
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    events: tuple[SpanEvent, ...] = ()
    status_code: int = STATUS_UNSET
    status_message: str = ""
    resource: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    # Set by tracestore.clock when the span was moved onto the head's clock (times above are
    # then the head's): node clock minus head clock, and the node whose offset it was.
    clock_offset_ns: int = 0
    clock_node_id: str = ""

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)

    @property
    def is_error(self) -> bool:
        return self.status_code == STATUS_ERROR

    @property
    def component(self) -> str:
        return str(self.resource.get(attr.RESOURCE_COMPONENT, ""))

    @property
    def pid(self) -> int | None:
        value = self.resource.get("process.pid")
        return value if isinstance(value, int) else None

    @property
    def host(self) -> str:
        return str(self.resource.get("host.name", ""))

    @property
    def host_ip(self) -> str:
        return str(self.resource.get("host.ip", ""))

    @property
    def node_id(self) -> str:
        """The node the event is about: the span's own attribute wins over where it was recorded."""
        return str(self.attributes.get(attr.NODE_ID) or self.resource.get(attr.RESOURCE_NODE_ID)
                   or "")

    @property
    def recorder_node_id(self) -> str:
        return str(self.resource.get(attr.RESOURCE_NODE_ID, ""))

    def get(self, key: str, default: Any = None) -> Any:
        return self.attributes.get(key, default)

    def int_attr(self, key: str) -> int | None:
        value = self.attributes.get(key)
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                return None
        return None


class SpanFormatError(ValueError):
    """One OTLP span dict cannot be understood; callers turn it into a warning."""


def normalize_id(raw: Any, byte_length: int) -> str:
    """Hex id as the file exporter and Jaeger write it; base64 (protobuf JSON default) converted."""
    if not raw:
        return ""
    text = str(raw)
    if len(text) == 2 * byte_length:
        try:
            bytes.fromhex(text)
            return text.lower()
        except ValueError:
            pass
    try:
        decoded = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise SpanFormatError(f"id {text!r} is neither hex nor base64") from exc
    if len(decoded) != byte_length:
        raise SpanFormatError(f"id {text!r} does not have {byte_length} bytes")
    return decoded.hex()


def _status_code(status: Mapping[str, Any]) -> int:
    code = status.get("code", STATUS_UNSET)
    if isinstance(code, str):
        return _STATUS_NAMES.get(code, STATUS_UNSET) if not code.isdigit() else int(code)
    return int(code)


def _frozen(items: Iterable[Mapping[str, Any]] | None) -> Mapping[str, Any]:
    return MappingProxyType(decode_attributes(items))


def parse_span(span: Mapping[str, Any], resource: Mapping[str, Any]) -> SpanRecord:
    try:
        status = span.get("status") or {}
        return SpanRecord(
            trace_id=normalize_id(span["traceId"], 16),
            span_id=normalize_id(span["spanId"], 8),
            parent_id=normalize_id(span.get("parentSpanId", ""), 8),
            name=str(span["name"]),
            # OTLP JSON omits zero-valued fields (Jaeger's own snapshots do), so absent = 0.
            start_ns=int(span.get("startTimeUnixNano") or 0),
            end_ns=int(span.get("endTimeUnixNano") or span.get("startTimeUnixNano") or 0),
            attributes=_frozen(span.get("attributes")),
            events=tuple(
                SpanEvent(name=str(event.get("name", "")),
                          time_ns=int(event.get("timeUnixNano", 0)),
                          attributes=_frozen(event.get("attributes")))
                for event in span.get("events", [])
            ),
            status_code=_status_code(status),
            status_message=str(status.get("message", "")),
            resource=resource,
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, SpanFormatError):
            raise
        raise SpanFormatError(f"malformed span {span.get('name', '?')!r}: {exc!r}") from exc


def parse_resource_spans(
    resource_spans: Iterable[Mapping[str, Any]],
) -> tuple[list[SpanRecord], list[str]]:
    """All spans of OTLP ``resourceSpans`` entries; a bad span is skipped with a warning,
    a span seen twice (a converter killed mid-conversion) is returned once."""
    spans: list[SpanRecord] = []
    warnings: list[str] = []
    seen: set[tuple[Any, Any]] = set()
    for entry in resource_spans:
        resource = _frozen((entry.get("resource") or {}).get("attributes"))
        for scope in entry.get("scopeSpans", []):
            for raw in scope.get("spans", []):
                if not first_sighting(raw, seen):
                    continue
                try:
                    spans.append(parse_span(raw, resource))
                except SpanFormatError as exc:
                    warnings.append(str(exc))
    return spans, warnings
