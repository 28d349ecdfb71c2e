"""Span processor that appends each ended span to the session's trace file.

Written synchronously in ``on_end``: one ``os.write`` of one complete line on an
``O_APPEND`` descriptor. There is no buffer in this process to lose, so a worker
killed by SIGKILL or the OOM killer still leaves every span that had ended on
disk, and concurrent writers (threads) never interleave within a line.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from tracedray.telemetry.otlp_json import SpanLineEncoder


@dataclass(frozen=True)
class FileWriterStatistics:
    path: str
    spans_written: int
    bytes_written: int
    write_errors: int
    last_error: str


class SpanFileWriter(SpanProcessor):
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._path = path
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._encoder = SpanLineEncoder()
        self._lock = threading.Lock()
        self._spans = 0
        self._bytes = 0
        self._errors = 0
        self._last_error = ""

    @property
    def path(self) -> Path:
        return self._path

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        fd = self._fd
        if fd is None:
            return
        try:
            data = (self._encoder.encode(span) + "\n").encode("utf-8", "surrogateescape")
            os.write(fd, data)
        except Exception as exc:  # a full disk or odd attribute must never reach user code
            with self._lock:
                self._errors += 1
                self._last_error = f"{type(exc).__name__}: {exc}"
            return
        with self._lock:
            self._spans += 1
            self._bytes += len(data)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        # Every span is already in the kernel's page cache once on_end returns.
        return True

    def shutdown(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def abandon(self) -> None:
        """Forget the descriptor without closing it (a forked child's copy of the parent's)."""
        self._fd = None

    def statistics(self) -> FileWriterStatistics:
        with self._lock:
            return FileWriterStatistics(str(self._path), self._spans, self._bytes,
                                        self._errors, self._last_error)
