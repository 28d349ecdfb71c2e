"""Span processor that records each ended span in the session's traces folder.

A span goes, as ``marshal``-ed fields, into this process's spool
(``traces/<component>-<pid>.spool``, see spool_format.py) synchronously when it ends:
one record copied into the file's shared mapping, so there is no buffer in this
process to lose (a worker killed by SIGKILL or the OOM killer leaves every span that
had ended) and concurrent threads never interleave within a record. The OTLP JSON
lines of ``<component>-<pid>.jsonl`` are made from the spool off the hot path
(spool_convert.py); at shutdown this writer converts what is left itself.
"""

from __future__ import annotations

import marshal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from tracedray.telemetry import spool_format
from tracedray.telemetry.otlp_json import span_object_json
from tracedray.telemetry.spool_convert import convert_spool
from tracedray.telemetry.spool_writer import SpoolStatistics, SpoolWriter

_dumps: Any = marshal.dumps  # typed loosely: marshal's stub rejects tuples holding Any
# A batch keeps marshal's default format (spool_format.ONE_RECORD_FORMAT says why).


@dataclass(frozen=True)
class FileWriterStatistics:
    path: str  # the JSON lines file the spans end up in
    spool_path: str
    spans_written: int  # spans recorded in the spool
    bytes_written: int  # spool bytes of those spans
    write_errors: int
    last_error: str
    mapped: bool


class SpanFileWriter(SpanProcessor):
    def __init__(self, path: Path, line_prefix: str, *, mapped: bool = True) -> None:
        self._path = path
        self._spool: SpoolWriter | None = SpoolWriter(
            path.with_name(path.stem + spool_format.SUFFIX), line_prefix, mapped=mapped)
        self._spool_path = self._spool.path
        # Shaped spans (the hot paths) go straight to the spool, which counts its own
        # errors: one frame per span less. After shutdown it records nothing.
        self.append_shaped = self._spool.append_shaped
        self.append_packed_batch = self._spool.append_packed_batch
        self._prefix_bytes = spool_format.record_size(
            len(spool_format.prefix_payload(line_prefix)))
        self._final: SpoolStatistics | None = None  # the spool's figures once it closed
        self._lock = threading.Lock()
        self._errors = 0
        self._last_error = ""

    @property
    def path(self) -> Path:
        return self._path

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        """Spans of the SDK tracer (not on the runtime's hot paths): stored encoded."""
        try:
            span_json = span_object_json(span)  # the converter adds resource and scope
        except Exception as exc:  # an odd attribute must never reach user code
            self._count_error(exc)
            return
        self._append(spool_format.line_payload(span_json))

    def append_fields(self, fields: tuple[Any, ...]) -> None:
        """Record one span from the SPAN record tuple its caller built (spool_format.py:
        ``(SPAN, trace_id, ..., trace_state, link_fields)``): the hot paths' single call,
        with no 13 arguments passed down through layers."""
        spool = self._spool
        if spool is None:
            return
        try:
            spool.append(spool_format.record_payload(fields))
        except Exception as exc:  # a full disk or an odd value must never reach user code
            self._count_error(exc)

    def append_many(self, records: list[tuple[Any, ...]]) -> None:
        """Record spans that ended together, from their SPAN tuples, as one SPANS record."""
        if not records:
            return
        spool = self._spool
        if spool is None:
            return
        try:
            payload = _dumps((spool_format.SPANS, records))
        except ValueError:  # a value marshal does not know: each span on its own
            for fields in records:
                self.append_fields(fields)
            return
        self._append(payload)

    def _append(self, payload: bytes) -> None:
        spool = self._spool
        if spool is None:
            return
        try:
            spool.append(payload)
        except Exception as exc:  # a full disk must never reach user code
            self._count_error(exc)

    def _count_error(self, exc: Exception) -> None:
        with self._lock:
            self._errors += 1
            self._last_error = f"{type(exc).__name__}: {exc}"

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        # Every span is already in the kernel's page cache once on_end returns.
        return True

    def shutdown(self) -> None:
        """Close the spool and convert what the agent has not (it is deleted then)."""
        spool, self._spool = self._spool, None
        if spool is not None:
            spool.close()
            self._final = spool.statistics()
            convert_spool(spool.path)

    def statistics(self) -> FileWriterStatistics:
        spool = self._spool
        stats = spool.statistics() if spool is not None else self._final
        with self._lock:
            errors, last_error = self._errors, self._last_error
        if stats is not None and stats.write_errors:
            errors += stats.write_errors
            last_error = last_error or stats.last_error
        if stats is None:
            return FileWriterStatistics(str(self._path), str(self._spool_path), 0, 0, errors,
                                        last_error, False)
        return FileWriterStatistics(str(self._path), stats.path, max(stats.records - 1, 0),
                                    max(stats.bytes - self._prefix_bytes, 0), errors, last_error,
                                    spool is not None and stats.mapped)
