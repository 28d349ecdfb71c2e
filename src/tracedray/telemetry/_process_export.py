"""Exporters that run inside the process that records the spans: ``console`` only.

OTLP export is not one of them: the node's telemetry agent sends the session files'
lines (telemetry/agent_export.py), so a process that dies loses no span and none
waits for an endpoint on its way out. ``OTEL_TRACES_EXPORTER=console`` prints each
process's spans on its own stdout, as the spec's console exporter does (a worker's
stdout reaches the driver as task output), through a batch processor whose shutdown
is bounded in time.

The exporter is wrapped so that a failure costs a rate-limited warning log line and a
counter, never an exception in user code.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

WARNING_INTERVAL_S = 60.0
ABORT_GRACE_S = 1.0


@dataclass(frozen=True)
class ProcessExportStatistics:
    exporter: str
    spans_exported: int
    spans_failed: int
    failed_batches: int
    last_error: str


Warn = Callable[[str, Mapping[str, object]], None]


class SafeSpanExporter(SpanExporter):
    """Delegates to the real exporter; turns every failure into a counter and a warning."""

    def __init__(self, inner: SpanExporter, name: str, warn: Warn) -> None:
        self._inner = inner
        self._name = name
        self._warn = warn
        self._lock = threading.Lock()
        self._exported = 0
        self._failed = 0
        self._failed_batches = 0
        self._last_error = ""
        self._last_warning = 0.0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
            error = "" if result is SpanExportResult.SUCCESS else "exporter returned FAILURE"
        except Exception as exc:  # the SDK would only log it; we count it too
            result = SpanExportResult.FAILURE
            error = f"{type(exc).__name__}: {exc}"
        with self._lock:
            if not error:
                self._exported += len(spans)
                return result
            self._failed += len(spans)
            self._failed_batches += 1
            self._last_error = error
            now = time.monotonic()
            should_warn = (self._failed_batches == 1
                           or now - self._last_warning >= WARNING_INTERVAL_S)
            if should_warn:
                self._last_warning = now
            failed_total = self._failed
        if should_warn:
            self._warn("telemetry.export_failed", {
                "exporter": self._name,
                "error": error, "spans_failed_total": failed_total,
            })
        return result

    def shutdown(self) -> None:
        # Shutting down a broken channel may raise; there is nothing left to do then.
        with contextlib.suppress(Exception):
            self._inner.shutdown()

    def abort(self) -> None:
        """Stop what the exporter is doing now, if it can be stopped."""
        self.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def statistics(self) -> ProcessExportStatistics:
        with self._lock:
            return ProcessExportStatistics(self._name, self._exported, self._failed,
                                           self._failed_batches, self._last_error)


class ProcessExportPipeline:
    """The batch processor and its safe exporter, with a shutdown that is bounded in time."""

    def __init__(self, inner: SpanExporter, name: str, warn: Warn) -> None:
        self.exporter = SafeSpanExporter(inner, name, warn)
        self.processor = BatchSpanProcessor(self.exporter)

    def force_flush(self, timeout_s: float) -> None:
        self._bounded(lambda: self.processor.force_flush(int(timeout_s * 1000)), timeout_s)

    def shutdown(self, timeout_s: float) -> None:
        done = self._start(self.processor.shutdown)
        if not done.wait(timeout_s):
            # The worker thread is still exporting (a blocked stdout): cut it short,
            # then give the aborted export a moment to count its failure and warn.
            self.exporter.abort()
            done.wait(ABORT_GRACE_S)

    @classmethod
    def _bounded(cls, action: Callable[[], object], timeout_s: float) -> bool:
        return cls._start(action).wait(timeout_s)

    @staticmethod
    def _start(action: Callable[[], object]) -> threading.Event:
        # The SDK's flush and shutdown wait on the exporter; run them on a daemon
        # thread so neither user code nor process exit waits longer than we choose.
        done = threading.Event()

        def run() -> None:
            try:
                action()
            except Exception:
                pass
            finally:
                done.set()

        threading.Thread(target=run, name="tracedray-otlp-flush", daemon=True).start()
        return done
