"""Read the session's structlog JSON lines from every process, merged in time order.

Each file is read with ``read_data``, which first copies the complete lines of its
writer's private spool into it (telemetry/line_spool.py), so a reader sees every line
that was logged, a SIGKILLed process's too. A last line without its newline (one still
being written) is reported as a warning, never raised, and read once complete.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from tracedray.exceptions import SessionFileCorruptError
from tracedray.telemetry.append_file import read_data
from tracedray.telemetry.line_file import line_files

if TYPE_CHECKING:
    from tracedray.telemetry.index_reader import IndexReader

_EMPTY: Mapping[str, Any] = MappingProxyType({})
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class LogRecord:
    time_ns: int
    level: str
    event: str
    fields: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    source: str = ""  # file name, so a user can find the raw line
    # Set by tracestore.clock when the line was moved onto the head's clock: time_ns is then
    # the head's time, the line's own timestamp field is the node's.
    clock_offset_ns: int = 0  # node clock minus head clock, subtracted from the timestamp
    clock_node_id: str = ""  # the node whose offset that was

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)


@dataclass(frozen=True)
class LogBatch:
    records: tuple[LogRecord, ...]
    warnings: tuple[str, ...]


def format_timestamp_ns(time_ns: int) -> str:
    """Integer nanoseconds to the log files' ISO 8601 UTC form (µs precision, ``Z``)."""
    moment = _EPOCH + timedelta(microseconds=time_ns // 1000)  # integers: no float rounding
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f") + "Z"


def parse_timestamp_ns(text: str) -> int:
    """ISO 8601 UTC (``...Z``) to integer nanoseconds since the epoch (µs precision)."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return round(moment.timestamp() * 1_000_000) * 1000


def _matches(record: Mapping[str, Any], filters: Mapping[str, str]) -> bool:
    return all(str(record.get(key, "")) == value for key, value in filters.items() if value)


def parse_log_line(raw: bytes | str, source: str) -> LogRecord:
    """One JSON log line as a record; ValueError or KeyError when it is not one."""
    data = json.loads(raw)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    time_ns = parse_timestamp_ns(str(data["timestamp"]))
    return LogRecord(time_ns=time_ns, level=str(data.get("level", "")),
                     event=str(data.get("event", "")), fields=MappingProxyType(data),
                     source=source)


def read_log_file(path: Path, filters: Mapping[str, str]) -> tuple[list[LogRecord], list[str]]:
    records: list[LogRecord] = []
    warnings: list[str] = []
    try:
        lines = read_data(path).decode("utf-8", errors="replace").splitlines()
    except (OSError, SessionFileCorruptError) as exc:
        return [], [f"cannot read {path}: {exc}"]
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = parse_log_line(line, path.name)
        except (ValueError, KeyError) as exc:
            where = "last line (truncated?)" if number == len(lines) else f"line {number}"
            warnings.append(f"{path.name}: skipped {where}: {exc}")
            continue
        if _matches(record.fields, filters):
            records.append(record)
    return records, warnings


def read_indexed_logs(logs_dir: Path, index: IndexReader, keys: Iterable[bytes]) -> LogBatch:
    """The lines of ``logs_dir/*.jsonl`` the index names under one of ``keys`` (the caller
    filters them exactly), in time order; spools are copied to their files first."""
    from tracedray.telemetry.line_spool import (
        MAX_COPIES_PER_SYNC,
        copy_spool,
        jsonl_path,
        spool_files,
    )
    from tracedray.telemetry.trace_index import LOGS, line_keys

    wanted = set(keys)
    warnings: list[str] = []
    found: list[tuple[str, bytes]] = []
    for spool in spool_files(logs_dir):  # what every reader does first: spools -> files
        for _ in range(MAX_COPIES_PER_SYNC):
            copied = copy_spool(spool)
            warnings.extend(copied.warnings)
            # A spool we may not write (a copied session): its lines are not in the file.
            found.extend((jsonl_path(spool).name, line) for line in copied.lines.splitlines()
                         if wanted & line_keys(LOGS, line))
            if not copied.pending:
                break
    found.extend(index.lines(LOGS, wanted))
    warnings.extend(index.errors)
    records: list[LogRecord] = []
    for source, line in found:
        try:
            record = parse_log_line(line, source)
        except (ValueError, KeyError) as exc:
            warnings.append(f"{source}: skipped a line: {exc}")
            continue
        records.append(record)
    records.sort(key=lambda record: record.time_ns)
    return LogBatch(tuple(records), tuple(warnings))


def read_logs(logs_dir: Path, *, task_id: str = "", trace_id: str = "", actor_id: str = "",
              node_id: str = "", event: str = "") -> LogBatch:
    """Every matching line of ``logs_dir/*.jsonl``; empty filters match everything."""
    filters = {"task_id": task_id, "trace_id": trace_id, "actor_id": actor_id,
               "node_id": node_id, "event": event}
    records: list[LogRecord] = []
    warnings: list[str] = []
    if not logs_dir.is_dir():
        return LogBatch((), (f"no log folder at {logs_dir}",))
    for path in line_files(logs_dir):  # rotated parts (compressed or not) too
        file_records, file_warnings = read_log_file(path, filters)
        records.extend(file_records)
        warnings.extend(file_warnings)
    # Stable sort: lines with equal timestamps keep their order within a file.
    records.sort(key=lambda record: record.time_ns)
    return LogBatch(tuple(records), tuple(warnings))
