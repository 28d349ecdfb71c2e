"""Span processor that appends each ended span to the session's trace file.

Written synchronously in ``on_end``: one complete line copied into the file's
shared mapping (see append_file.py), so there is no buffer in this process to
lose: a worker killed by SIGKILL or the OOM killer still leaves every span that
had ended on disk, and concurrent writers (threads) never interleave within a line.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from tracedray.telemetry.append_file import AppendFile
from tracedray.telemetry.otlp_json import SpanLineEncoder


@dataclass(frozen=True)
class FileWriterStatistics:
    path: str
    spans_written: int
    bytes_written: int
    write_errors: int
    last_error: str
    mapped: bool


class SpanFileWriter(SpanProcessor):
    def __init__(self, path: Path, *, mapped: bool = True) -> None:
        self._file: AppendFile | None = AppendFile(path, mapped=mapped)
        self._path = path
        self._encoder = SpanLineEncoder()
        self._lock = threading.Lock()
        self._spans = 0
        self._bytes = 0
        self._errors = 0
        self._last_error = ""

    @property
    def path(self) -> Path:
        return self._path

    @property
    def encoder(self) -> SpanLineEncoder:
        return self._encoder

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        try:
            line = self._encoder.encode(span)
        except Exception as exc:  # an odd attribute must never reach user code
            self._count_error(exc)
            return
        self.write_line(line)

    def write_line(self, line: str) -> None:
        """Append one encoded span line (no newline); also the fast path of record_span."""
        file = self._file
        if file is None:
            return
        try:
            data = (line + "\n").encode("utf-8", "surrogateescape")
            file.append(data)
        except Exception as exc:  # a full disk must never reach user code
            self._count_error(exc)
            return
        with self._lock:
            self._spans += 1
            self._bytes += len(data)

    def _count_error(self, exc: Exception) -> None:
        with self._lock:
            self._errors += 1
            self._last_error = f"{type(exc).__name__}: {exc}"

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        # Every span is already in the kernel's page cache once on_end returns.
        return True

    def shutdown(self) -> None:
        file, self._file = self._file, None
        if file is not None:
            file.close()

    def statistics(self) -> FileWriterStatistics:
        file = self._file
        mapped = file is not None and file.statistics().mapped
        with self._lock:
            return FileWriterStatistics(str(self._path), self._spans, self._bytes,
                                        self._errors, self._last_error, mapped)
