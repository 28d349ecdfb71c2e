"""Where rendered lines go: the process's JSON file and, optionally, the console.

Each line is appended whole through ``AppendFile`` (a shared mapping of the
process's private spool, see tracedray/telemetry/append_file.py and line_spool.py;
the public ``.jsonl`` gets whole lines copied from it): nothing is buffered in the
process, so a SIGKILL loses no line that was logged, and threads never interleave
inside a line.
Console echo goes to the *original* stderr so that a worker's output capture
never sees (and re-logs) our own echo.
"""

from __future__ import annotations

import json
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from tracedray.logs._processors import METHOD_LEVEL
from tracedray.telemetry.append_file import AppendFile

_SHORT_SKIP = {"timestamp", "level", "event", "host", "ip", "versions", "node_id", "component",
               "service"}


@dataclass(frozen=True)
class LogStatistics:
    path: str  # "" before configure() or without a session directory
    lines_written: int
    bytes_written: int
    console_lines: int
    write_errors: int
    captured_lines: int  # stdout/stderr lines turned into task.output records
    last_error: str


def short_line(rendered: str | bytes) -> str:
    """Human form for the console: ``12:01:02 warning [raylet] event key=value``."""
    record = json.loads(rendered)
    stamp = str(record.get("timestamp", ""))[11:19]
    rest = " ".join(f"{key}={value}" for key, value in record.items() if key not in _SHORT_SKIP)
    return (f"{stamp} {record.get('level', '')} [{record.get('component', '')}] "
            f"{record.get('event', '')} {rest}").rstrip()


class LineSink:
    """The structlog "logger": one method per level name, each taking the rendered line."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._file: AppendFile | None = None
        self._path = ""
        self.console_level: int | None = METHOD_LEVEL["warning"]
        self._lines = 0
        self._bytes = 0
        self._console = 0
        self._errors = 0
        self._last_error = ""
        self.captured_lines = 0

    def open(self, path: Path | None, console_level: int | None, *, mapped: bool = True) -> None:
        # The old file is closed (cut to its data) before the new one is opened: on
        # a reconfigure with the same path, the new appender must find the real end.
        with self._lock:
            old, self._file = self._file, None
        if old is not None:
            old.close()
        new = None if path is None else AppendFile(path, mapped=mapped)
        with self._lock:
            self._file = new
            self._path = str(path) if path is not None else ""
            self.console_level = console_level

    def unmap(self) -> None:
        """Leave no reserved tail in the file; later lines are plain writes (process exit)."""
        file = self._file
        if file is not None:
            file.unmap()

    def close(self) -> None:
        with self._lock:
            file, self._file = self._file, None
        if file is not None:
            file.close()

    def _emit(self, level: int, line: str | bytes) -> None:
        file = self._file
        if file is not None:
            try:
                data = (line.encode("utf-8", "surrogateescape") if isinstance(line, str)
                        else line) + b"\n"
                file.append(data)
                with self._lock:
                    self._lines += 1
                    self._bytes += len(data)
            except Exception as exc:  # full disk, closed fd: count it, never raise
                with self._lock:
                    self._errors += 1
                    self._last_error = f"{type(exc).__name__}: {exc}"
        console = self.console_level
        if console is not None and level >= console:
            stream = sys.__stderr__
            if stream is None:
                return
            try:
                stream.write(short_line(line) + "\n")
                stream.flush()
                with self._lock:
                    self._console += 1
            except Exception:
                pass

    def debug(self, line: str | bytes) -> None:
        self._emit(10, line)

    def info(self, line: str | bytes) -> None:
        self._emit(20, line)

    msg = info

    def warning(self, line: str | bytes) -> None:
        self._emit(30, line)

    warn = warning

    def error(self, line: str | bytes) -> None:
        self._emit(40, line)

    exception = error

    def critical(self, line: str | bytes) -> None:
        self._emit(50, line)

    fatal = critical

    def count_captured(self) -> None:
        with self._lock:
            self.captured_lines += 1

    def statistics(self) -> LogStatistics:
        with self._lock:
            return LogStatistics(self._path, self._lines, self._bytes, self._console,
                                 self._errors, self.captured_lines, self._last_error)
