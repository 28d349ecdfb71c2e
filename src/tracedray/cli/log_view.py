"""Selecting and printing session log lines for ``tracedray logs`` (pure functions).

Records come from ``tracedray.cli.tracestore.logs`` (every process's JSON lines,
merged in time order, each node's moved onto the head's clock by
``tracestore.clock``). A ``task.output`` record is what user code printed; it is
shown as the printed text, everything else as ``event key=value ...``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from fnmatch import fnmatch
from typing import Any

from tracedray.cli.tracestore.logs import LogRecord, format_timestamp_ns
from tracedray.exceptions import ConfigError

LEVELS = ("debug", "info", "warning", "error", "critical")
# Fields every line carries; the pretty form shows them in its prefix or not at all.
_COMMON = frozenset({"timestamp", "level", "event", "component", "service", "host", "ip", "pid",
                     "node_id", "session_id", "versions", "job_id", "task_id", "worker_id",
                     "task_name", "attempt", "trace_id", "span_id", "logger", "actor_id"})


@dataclass(frozen=True)
class LogFilter:
    task_id: str = ""
    actor_id: str = ""
    node_id: str = ""  # a prefix is enough (status shows 12 characters)
    pid: int | None = None
    min_level: str = ""
    files: str = ""  # a glob of log file names (`logs cluster GLOB`, as Ray's)

    def __post_init__(self) -> None:
        if self.min_level and self.min_level.lower() not in LEVELS:
            raise ConfigError(f"--level {self.min_level!r}: choose one of {', '.join(LEVELS)}")

    def reads_file(self, name: str) -> bool:
        """Whether a log file of this name may hold wanted lines (``files``: its name or
        its name without ``.jsonl`` matches the glob)."""
        return not self.files or fnmatch(name, self.files) \
            or fnmatch(name.removesuffix(".jsonl"), self.files)

    def matches(self, record: LogRecord) -> bool:
        if self.files and not self.reads_file(record.source):
            return False
        if self.task_id and str(record.get("task_id", "")).lower() != self.task_id.lower():
            return False
        if self.actor_id and str(record.get("actor_id", "")).lower() != self.actor_id.lower():
            return False
        if self.node_id and not str(record.get("node_id", "")).startswith(self.node_id.lower()):
            return False
        if self.pid is not None and record.get("pid") != self.pid:
            return False
        return not self.min_level or _rank(record.level) >= _rank(self.min_level)


def _rank(level: str) -> int:
    lowered = level.lower()
    return LEVELS.index(lowered) if lowered in LEVELS else len(LEVELS)


def select(records: Iterable[LogRecord], wanted: LogFilter) -> list[LogRecord]:
    return [record for record in records if wanted.matches(record)]


def tail(records: Sequence[LogRecord], count: int | None) -> list[LogRecord]:
    if count is None:
        return list(records)
    if count < 0:
        raise ConfigError(f"--tail must be >= 0, got {count}")
    return list(records[-count:]) if count else []


def format_pretty(record: LogRecord) -> str:
    moment = datetime.fromtimestamp(record.time_ns / 1e9, tz=timezone.utc)
    stamp = moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
    who = f"{record.get('component', '?')} pid={record.get('pid', '?')}"
    node = str(record.get("node_id") or "")
    if node:
        who += f" node={node[:8]}"
    task = record.get("task_name") or record.get("task_id")
    if task:
        who += f" task={task}#{record.get('attempt', 0)}"
    if record.event == "task.output":
        body = str(record.get("line", ""))
        if record.get("stream") == "stderr":
            body = f"[stderr] {body}"
    else:
        extra = " ".join(f"{k}={_short(v)}" for k, v in record.fields.items() if k not in _COMMON)
        body = f"{record.event} {extra}".rstrip()
    return f"{stamp} {record.level.upper():<7} {who} | {body}"


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if " " not in text else repr(text)


def record_json(record: LogRecord) -> dict[str, Any]:
    """The line as written; a line moved onto the head's clock gets that time as its
    ``timestamp`` (so the merged order is the timestamps' order), its own as
    ``node_timestamp``, and the ``clock_offset_s`` that was subtracted."""
    data = dict(record.fields)
    if record.clock_offset_ns:
        data["node_timestamp"] = data.get("timestamp")
        data["timestamp"] = format_timestamp_ns(record.time_ns)
        data["clock_offset_s"] = record.clock_offset_ns / 1e9
    return data
