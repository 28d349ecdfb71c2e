"""The object store's events, kept per node in the session's trace index.

``tracedray memory --timeline`` replays every event that moved an object into or out
of a node's shared memory (``object.seal``, ``object.restore`` in; ``object.free``,
``object.evict``, ``object.spill`` out; an owner's ``object.put`` to shm in sessions
written before ``object.seal`` existed). Those spans sit in lines of up to 256 spans
among every other span of the process that recorded them (a driver that puts often
has nearly all its lines among them), so reading them from the files costs in
proportion to the session, not to the events.

So the index writer (telemetry/trace_index.py, run by each node's telemetry agent at
nice 19) takes them out of each line it indexes that holds one: one row per event,
with the node it is about and the few attributes the replay needs, in the table
``store_events`` of the same database, in the same transaction as the line's keys.
A reader then reads those rows (O(store events)) and parses only the lines the index
has not reached yet.

An index made before this table existed (meta ``store_events`` is not ``1``: lines
were indexed without their events) is not trusted for them: the reader scans instead
and says so.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tracedray.telemetry import attributes as attr
from tracedray.telemetry.otlp_json import decode_attributes

# Spans that move an object into or out of a node's shared memory (cli/memory_timeline.py).
STORE_EVENT_NAMES = frozenset({"object.put", "object.seal", "object.restore", "object.free",
                               "object.spill", "object.evict"})
META_FLAG = "store_events"  # meta row: "1" when every indexed line's events are in the table
# A line without such a span name holds no store event and is not parsed (most lines
# keyed "object." hold only object.get spans), nor one whose only such spans are puts
# and that names no shm location (a driver's small puts are inline: parsing their lines
# to find none was a sixth of the agent's CPU in a put + get loop). Whitespace allowed
# as trace_index.py does.
_STORE_NAME = re.compile(rb'"name"\s*:\s*"object\.(?:seal|restore|free|spill|evict)"')
_PUT_NAME = re.compile(rb'"name"\s*:\s*"object\.put"')
_SHM_LOCATION = re.compile(
    rb'"key"\s*:\s*"' + re.escape(attr.OBJECT_LOCATION.encode())
    + rb'"\s*,\s*"value"\s*:\s*\{\s*"stringValue"\s*:\s*"shm"')

SCHEMA = """
CREATE TABLE IF NOT EXISTS store_events(
    trace_id TEXT NOT NULL, span_id TEXT NOT NULL, file_id INTEGER NOT NULL,
    node_id TEXT NOT NULL, name TEXT NOT NULL, start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL, object_id TEXT NOT NULL, size INTEGER, call_site TEXT,
    store_used INTEGER, capacity INTEGER, copy TEXT, free_reason TEXT,
    PRIMARY KEY(trace_id, span_id)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS store_events_by_file ON store_events(file_id);
"""
# Set once, when the database is made: an index written by an older tracedray has lines
# but no events, and must never be read as "no events".
MARK_FRESH = ("INSERT OR IGNORE INTO meta VALUES ('store_events', "
              "CASE WHEN EXISTS(SELECT 1 FROM files) THEN '0' ELSE '1' END)")
_COLUMNS = ("trace_id", "span_id", "node_id", "name", "start_ns", "end_ns", "object_id",
            "size", "call_site", "store_used", "capacity", "copy", "free_reason")


@dataclass(frozen=True)
class StoreEvent:
    """One span that moved an object into or out of a node's store."""

    trace_id: str
    span_id: str
    node_id: str
    name: str
    start_ns: int
    end_ns: int
    object_id: str
    size: int | None
    call_site: str | None
    store_used: int | None
    capacity: int | None
    copy: str | None
    free_reason: str | None

    def attributes(self) -> dict[str, Any]:
        """The span's attributes the replay reads (as the span carried them)."""
        found = {attr.OBJECT_ID: self.object_id, attr.NODE_ID: self.node_id,
                 attr.OBJECT_SIZE: self.size, attr.OBJECT_CALL_SITE: self.call_site,
                 attr.STORE_USED: self.store_used, attr.STORE_CAPACITY: self.capacity,
                 attr.OBJECT_COPY: self.copy, attr.OBJECT_FREE_REASON: self.free_reason,
                 # an object.put is kept only when it went to shm
                 attr.OBJECT_LOCATION: "shm" if self.name == "object.put" else None}
        return {name: value for name, value in found.items() if value is not None}


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _event(span: Mapping[str, Any], resource_node: str) -> StoreEvent | None:
    name = span.get("name")
    if name not in STORE_EVENT_NAMES:
        return None
    found = decode_attributes(span.get("attributes"))
    if name == "object.put" and found.get(attr.OBJECT_LOCATION) != "shm":
        return None  # an inline value never enters the shared-memory store
    start = _int(span.get("startTimeUnixNano")) or 0
    return StoreEvent(
        trace_id=str(span.get("traceId", "")).lower(), span_id=str(span.get("spanId", "")).lower(),
        node_id=str(found.get(attr.NODE_ID) or resource_node), name=str(name),
        start_ns=start, end_ns=_int(span.get("endTimeUnixNano")) or start,
        object_id=str(found.get(attr.OBJECT_ID, "")), size=_int(found.get(attr.OBJECT_SIZE)),
        call_site=_text(found.get(attr.OBJECT_CALL_SITE)),
        store_used=_int(found.get(attr.STORE_USED)),
        capacity=_int(found.get(attr.STORE_CAPACITY)), copy=_text(found.get(attr.OBJECT_COPY)),
        free_reason=_text(found.get(attr.OBJECT_FREE_REASON)))


def events_of_line(raw: bytes) -> tuple[list[StoreEvent], str]:
    """The store events of one OTLP JSON line of ``traces/*.jsonl``, and a warning ("" if
    none: a line that does not parse yields none, and says so)."""
    if _STORE_NAME.search(raw) is None and (
            _SHM_LOCATION.search(raw) is None or _PUT_NAME.search(raw) is None):
        return [], ""
    try:
        data = json.loads(raw)
        found = []
        for entry in data.get("resourceSpans", ()):
            resource = decode_attributes((entry.get("resource") or {}).get("attributes"))
            node = str(resource.get(attr.RESOURCE_NODE_ID) or "")
            for scope in entry.get("scopeSpans", ()):
                for span in scope.get("spans", ()):
                    event = _event(span, node)
                    if event is not None:
                        found.append(event)
    except (ValueError, TypeError, AttributeError, KeyError) as exc:
        return [], f"skipped a corrupt trace line: {exc}"
    return found, ""


def record(conn: sqlite3.Connection, file_id: int, events: Iterable[StoreEvent]) -> None:
    """Add ``events`` (of lines of file ``file_id``) inside the caller's transaction; an
    event seen twice (a span converted twice by a killed converter) is kept once."""
    conn.executemany(
        f"INSERT OR IGNORE INTO store_events({', '.join(_COLUMNS)}, file_id) "  # noqa: S608
        f"VALUES ({', '.join('?' * (len(_COLUMNS) + 1))})",
        [(*(getattr(e, c) for c in _COLUMNS), file_id) for e in events])


def forget_file(conn: sqlite3.Connection, file_id: int) -> None:
    """Drop a file's events (it was replaced or truncated: it is indexed anew)."""
    conn.execute("DELETE FROM store_events WHERE file_id=?", (file_id,))


def kept(conn: sqlite3.Connection) -> bool:
    """Whether this index holds the events of every line it indexed."""
    row = conn.execute(f"SELECT value FROM meta WHERE name='{META_FLAG}'").fetchone()  # noqa: S608
    return row is not None and row[0] == "1"


def read_events(conn: sqlite3.Connection) -> list[StoreEvent]:
    """Every event the index holds, in the order the replay takes them (end, start)."""
    return [StoreEvent(*row) for row in conn.execute(
        f"SELECT {', '.join(_COLUMNS)} FROM store_events "  # noqa: S608
        "ORDER BY end_ns, start_ns")]
