"""What the trace index keys a line under, found with byte patterns (no JSON parse: a
third of the cost), and the line files' framing. Pure: ``trace_index.py`` writes and reads
the index with them.

A line is named under every id it holds; a reader applies its exact filter to the lines
it reads, so an extra key costs a read, never a wrong answer. Keys are bytes: a kind's
tag and the id's bytes (17 for a task id, not 37 characters of "task:<hex>"), since the
keys are most of the index.
"""

from __future__ import annotations

import re
from binascii import unhexlify as _unhexlify
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from tracedray.telemetry import line_file

TRACES = "traces"
LOGS = "logs"
KINDS = (TRACES, LOGS)
CLOCK_KEY = b"clock"  # log lines tracestore.clock needs: offsets, each process's first node line
# Keys are bytes: a kind's tag and the id's bytes (17 for a task id, not 37 characters of
# "task:<hex>"): the keys are most of the index.
TAGS = {"task": b"t", "actor": b"a", "object": b"o", "trace": b"r"}
_TAG_OF = {b"task": b"t", b"actor": b"a", b"object": b"o", b"trace": b"r"}
# Span-name families a line is keyed under (``name:object.``): `memory --timeline` reads
# the object store's events alone.
NAME_FAMILIES = ("object.",)

# Byte patterns, whitespace between JSON tokens allowed (tracedray writes none; a tool's
# rewrite of the files may): a line must never lack a key it holds.
_SPAN_ID_ATTR = re.compile(
    rb'"key"\s*:\s*"tracedray\.(task|actor|object)\.id"\s*,\s*"value"\s*:\s*\{\s*'
    rb'"stringValue"\s*:\s*"([0-9A-Fa-f]+)"')
_SPAN_TRACE = re.compile(rb'"traceId"\s*:\s*"([0-9A-Fa-f]+)"')
_SPAN_START = re.compile(rb'"startTimeUnixNano"\s*:\s*"?(\d+)')
_SPAN_END = re.compile(rb'"endTimeUnixNano"\s*:\s*"?(\d+)')
_SPAN_NAME = re.compile(rb'"name"\s*:\s*"([^"]*)"')
# Not trace_id: a log line is found by its task or actor (the trace by its spans).
_LOG_ID = re.compile(rb'"(task|actor|object)_id"\s*:\s*"([0-9A-Fa-f]+)"')
_LOG_OFFSET = re.compile(rb'"event"\s*:\s*"node\.clock_offset"')
_LOG_NODE = re.compile(rb'"node_id"\s*:\s*"[0-9A-Fa-f]')
_LOG_TIME = re.compile(rb'"timestamp"\s*:\s*"([0-9T:.\-]+)Z?"')
_from_iso = datetime.fromisoformat  # per log line the index enters: bound once
_UTC = timezone.utc
_PID_IN_NAME = re.compile(r"-(\d+)\.jsonl$")

def key(kind: str, value: str) -> bytes:
    """The index key of an id of ``kind`` (task, actor, object, trace) given in hex."""
    text = value.strip().lower()
    try:
        return TAGS[kind] + bytes.fromhex(text)
    except ValueError:  # not an id: a key no line has
        return TAGS[kind] + b"~" + text.encode()


def name_key(family: str) -> bytes:
    """The key of lines holding spans whose name starts with ``family`` (NAME_FAMILIES)."""
    return b"name:" + family.encode()


STORE_KEY = name_key("object.")  # lines of the object store's events


def _id_key(kind: bytes, hex_id: bytes) -> bytes:
    # The pattern matched hex digits only: unhexlify reads them as bytes.fromhex would.
    return _TAG_OF[kind] + _unhexlify(hex_id) if len(hex_id) % 2 == 0 \
        else _TAG_OF[kind] + b"~" + hex_id.lower()


# --------------------------------------------------------------------------- pure parts


def span_line_keys(raw: bytes) -> set[bytes]:
    # Each id once (a task's spans share its id and trace) before it becomes a key.
    keys = {_id_key(kind, hex_id) for kind, hex_id in set(_SPAN_ID_ATTR.findall(raw))}
    keys.update(_id_key(b"trace", hex_id) for hex_id in set(_SPAN_TRACE.findall(raw)))
    names = set(_SPAN_NAME.findall(raw))
    keys.update(name_key(family) for family in NAME_FAMILIES
                if any(name.startswith(family.encode()) for name in names))
    return keys


def log_line_keys(raw: bytes) -> set[bytes]:
    keys = {_id_key(kind, hex_id) for kind, hex_id in _LOG_ID.findall(raw)}
    if _LOG_OFFSET.search(raw):
        keys.add(CLOCK_KEY)
    return keys


def line_keys(kind: str, raw: bytes) -> set[bytes]:
    return span_line_keys(raw) if kind == TRACES else log_line_keys(raw)


def names_node(raw: bytes) -> bool:
    """Whether a log line names its node (the first such line of a process is a clock
    line: tracestore.clock maps the process to its node with it)."""
    return _LOG_NODE.search(raw) is not None


def span_line_times(raw: bytes) -> tuple[int | None, int | None]:
    starts = _SPAN_START.findall(raw)
    ends = _SPAN_END.findall(raw)
    return (min(map(int, starts)) if starts else None, max(map(int, ends)) if ends else None)


def log_line_time(raw: bytes) -> int | None:
    found = _LOG_TIME.search(raw)
    if found is None:
        return None
    try:
        moment = _from_iso(found[1].decode()).replace(tzinfo=_UTC)
    except ValueError:
        return None
    return round(moment.timestamp() * 1_000_000) * 1000


def complete_end(data: bytes) -> int:
    """Length of the prefix of ``data`` made of complete lines (before any NUL byte)."""
    nul = data.find(b"\0")
    return data.rfind(b"\n", 0, len(data) if nul < 0 else nul) + 1


def complete_lines(data: bytes, start: int) -> Iterator[tuple[int, bytes]]:
    """(offset, line without its newline) of every complete non-empty line of ``data``,
    which begins at file offset ``start``; data after the last newline (a line still
    being written) or from a NUL byte on is not included."""
    offset = start
    for raw in data[:complete_end(data)].split(b"\n")[:-1]:
        if raw.strip():
            yield offset, raw
        offset += len(raw) + 1


def pid_of(name: str) -> int | None:
    """The pid a line file (current or a rotated part) belongs to."""
    found = _PID_IN_NAME.search(line_file.base_name(name))
    return int(found[1]) if found else None


def jsonl_files(folder: Path) -> list[Path]:
    """Every line file of ``folder`` by its plain name, rotated parts (compressed or
    not) before the current file they came from (line_file.py)."""
    return line_file.line_files(folder)
