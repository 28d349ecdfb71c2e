"""The session files' lines as OTLP export requests (pure; unit-tested).

- A ``traces/*.jsonl`` line is already an OTLP JSON ``TracesData``, the same JSON as an
  ``ExportTraceServiceRequest``: lines are merged by concatenating their
  ``resourceSpans``. For protobuf (gRPC, ``http/protobuf``) the hex ids become bytes.
- A ``logs/*.jsonl`` line is one tracedray log record (docs/telemetry.md, Logs): it
  becomes one OTLP ``LogRecord``. ``timestamp`` → ``timeUnixNano``, ``level`` →
  severity, ``event`` → body, ``trace_id``/``span_id`` → the record's trace context,
  the process's fields (component, host, ip, pid, node, session) → the resource, every
  other field → an attribute.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tracedray.telemetry.otlp_json import encode_value

_ID_KEYS = ("traceId", "spanId", "parentSpanId")
SEVERITY = {"debug": 5, "info": 9, "warning": 13, "warn": 13, "error": 17, "critical": 21,
            "fatal": 21}
# Log fields that describe the process, not the record: they go to the resource.
RESOURCE_FIELDS = {"component": "tracedray.component", "host": "host.name", "ip": "host.ip",
                   "pid": "process.pid", "node_id": "tracedray.node.id",
                   "session_id": "tracedray.session.id"}
_RECORD_FIELDS = ("timestamp", "level", "event", "trace_id", "span_id")


@dataclass
class Batch:
    """Lines turned into one request's JSON (OTLP JSON: hex ids, int64 as strings)."""

    body: dict[str, Any] = field(default_factory=dict)
    items: int = 0  # spans or log records
    unreadable: list[str] = field(default_factory=list)  # why each skipped line was skipped


def traces_batch(lines: Iterable[bytes]) -> Batch:
    batch = Batch()
    resource_spans: list[Any] = []
    for line in lines:
        try:
            entries = json.loads(line)["resourceSpans"]
            count = sum(len(scope.get("spans", ())) for entry in entries
                        for scope in entry.get("scopeSpans", ()))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            batch.unreadable.append(f"{type(exc).__name__}: {exc}")
            continue
        resource_spans.extend(entries)
        batch.items += count
    batch.body = {"resourceSpans": resource_spans}
    return batch


def logs_batch(lines: Iterable[bytes], service_name: str) -> Batch:
    batch = Batch()
    by_resource: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for line in lines:
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise TypeError("not a JSON object")
            key = tuple((name, _hashable(record.get(name))) for name in RESOURCE_FIELDS)
            by_resource.setdefault(key, []).append(log_record(record))
        except (ValueError, TypeError) as exc:
            batch.unreadable.append(f"{type(exc).__name__}: {exc}")
            continue
        batch.items += 1
    resource_logs = []
    for key, records in by_resource.items():
        attributes = [{"key": "service.name", "value": {"stringValue": service_name}}]
        attributes += [{"key": RESOURCE_FIELDS[name], "value": any_value(value)}
                       for name, value in key if value not in (None, "")]
        resource_logs.append({"resource": {"attributes": attributes},
                              "scopeLogs": [{"scope": {"name": "tracedray"},
                                             "logRecords": records}]})
    batch.body = {"resourceLogs": resource_logs}
    return batch


def _hashable(value: Any) -> Any:
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


def log_record(line: Mapping[str, Any]) -> dict[str, Any]:
    """One tracedray JSON log line as an OTLP JSON ``LogRecord``."""
    level = str(line.get("level", "")).lower()
    record: dict[str, Any] = {
        "timeUnixNano": str(timestamp_ns(str(line.get("timestamp", "")))),
        "severityNumber": SEVERITY.get(level, 0),
        "severityText": level.upper(),
        "body": {"stringValue": str(line.get("event", ""))},
        "attributes": [{"key": key, "value": any_value(value)} for key, value in line.items()
                       if key not in _RECORD_FIELDS and key not in RESOURCE_FIELDS
                       and value is not None],
    }
    trace_id, span_id = line.get("trace_id"), line.get("span_id")
    if isinstance(trace_id, str) and len(trace_id) == 32 and isinstance(span_id, str) \
            and len(span_id) == 16:
        record["traceId"], record["spanId"] = trace_id, span_id
        record["flags"] = 1  # sampled: only recorded spans make their ids current
    return record


def timestamp_ns(text: str) -> int:
    """ISO 8601 (``...Z``) to nanoseconds since the epoch; 0 when it does not parse (the
    spec's "unknown")."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return 0
    return round(moment.timestamp() * 1_000_000) * 1000


def any_value(value: Any) -> dict[str, Any]:
    """A JSON value as an OTLP ``AnyValue`` (objects as ``kvlistValue``)."""
    if isinstance(value, Mapping):
        return {"kvlistValue": {"values": [{"key": str(k), "value": any_value(v)}
                                           for k, v in value.items() if v is not None]}}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return {"arrayValue": {"values": [any_value(v) for v in value]}}
    if value is None:
        return {}
    return encode_value(value)


def json_bytes(batch: Batch) -> bytes:
    """The request as OTLP/HTTP JSON (``http/json``): hex ids, as the files hold them."""
    return json.dumps(batch.body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def proto_request(batch: Batch, message: Any) -> Any:
    """The request as protobuf: ``message`` (an empty ExportTraceServiceRequest or
    ExportLogsServiceRequest) filled from the batch; hex ids become bytes (in the
    batch's body too: call it once per batch)."""
    from google.protobuf import json_format

    return json_format.ParseDict(_ids_as_base64(batch.body), message,
                                 ignore_unknown_fields=True)


def _ids_as_base64(body: dict[str, Any]) -> dict[str, Any]:
    # The protobuf JSON mapping spells bytes as base64; OTLP JSON spells ids as hex.
    for entry in body.get("resourceSpans", ()):
        for scope in entry.get("scopeSpans", ()):
            for span in scope.get("spans", ()):
                _convert(span)
                for link in span.get("links", ()):
                    _convert(link)
    for entry in body.get("resourceLogs", ()):
        for scope in entry.get("scopeLogs", ()):
            for record in scope.get("logRecords", ()):
                _convert(record)
    return body


def _convert(item: dict[str, Any]) -> None:
    for key in _ID_KEYS:
        value = item.get(key)
        if value:
            try:
                item[key] = base64.b64encode(bytes.fromhex(value)).decode("ascii")
            except (ValueError, TypeError):  # not hex: the id is lost, not the batch
                del item[key]
