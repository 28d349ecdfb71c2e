"""Optional OTLP export, driven by the standard ``OTEL_EXPORTER_OTLP_*`` variables.

The decision (export or not, which protocol) is a pure function of the
environment; building the exporter imports grpc or requests only when it is
actually needed, so processes without an endpoint never pay for them.

The exporter is wrapped so that a dead or wrong endpoint costs a rate-limited
warning log line and a counter, never an exception in user code, and so that
shutdown cannot hang a process for the exporter's full retry budget.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

GRPC = "grpc"
HTTP_PROTOBUF = "http/protobuf"
WARNING_INTERVAL_S = 60.0
ABORT_GRACE_S = 1.0


@dataclass(frozen=True)
class OtlpSettings:
    endpoint: str
    protocol: str  # GRPC or HTTP_PROTOBUF
    note: str  # why the protocol was chosen when it differs from what was asked; "" otherwise


def otlp_settings(environ: Mapping[str, str]) -> OtlpSettings | None:
    """Whether and how to export, from the environment; None when no endpoint is set.

    Signal-specific variables win over the generic ones, as the OTel spec says.
    Python's OTLP exporters have no ``http/json`` transport, so that request is
    served as ``http/protobuf`` (same endpoint, same collector receiver).
    """
    endpoint = (environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
                or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip())
    if not endpoint:
        return None
    asked = (environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "").strip()
             or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "").strip() or GRPC).lower()
    if asked == GRPC:
        return OtlpSettings(endpoint, GRPC, "")
    if asked == HTTP_PROTOBUF:
        return OtlpSettings(endpoint, HTTP_PROTOBUF, "")
    if asked == "http/json":
        return OtlpSettings(endpoint, HTTP_PROTOBUF,
                            "http/json is not implemented by the Python OTLP exporter; "
                            "using http/protobuf")
    return OtlpSettings(endpoint, GRPC, f"unknown OTLP protocol {asked!r}; using grpc")


def create_exporter(settings: OtlpSettings) -> SpanExporter:
    """Build the SDK exporter; it reads endpoint, headers, insecure, timeout itself."""
    exporter: SpanExporter
    if settings.protocol == HTTP_PROTOBUF:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )

        exporter = HttpExporter()
    else:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        exporter = GrpcExporter()
    return exporter


@dataclass(frozen=True)
class ExportStatistics:
    endpoint: str
    protocol: str
    spans_exported: int
    spans_failed: int
    failed_batches: int
    last_error: str


Warn = Callable[[str, Mapping[str, object]], None]


class SafeSpanExporter(SpanExporter):
    """Delegates to the real exporter; turns every failure into a counter and a warning."""

    def __init__(self, inner: SpanExporter, settings: OtlpSettings, warn: Warn) -> None:
        self._inner = inner
        self._settings = settings
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
                "endpoint": self._settings.endpoint, "protocol": self._settings.protocol,
                "error": error, "spans_failed_total": failed_total,
            })
        return result

    def shutdown(self) -> None:
        # Shutting down a broken channel may raise; there is nothing left to do then.
        with contextlib.suppress(Exception):
            self._inner.shutdown()

    def abort(self) -> None:
        """Stop in-flight retries now (the gRPC exporter waits on its shutdown event)."""
        self.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def statistics(self) -> ExportStatistics:
        with self._lock:
            return ExportStatistics(self._settings.endpoint, self._settings.protocol,
                                    self._exported, self._failed, self._failed_batches,
                                    self._last_error)


class OtlpPipeline:
    """The batch processor and its safe exporter, with a shutdown that is bounded in time."""

    def __init__(self, settings: OtlpSettings, warn: Warn) -> None:
        self.settings = settings
        self.exporter = SafeSpanExporter(create_exporter(settings), settings, warn)
        self.processor = BatchSpanProcessor(self.exporter)

    def force_flush(self, timeout_s: float) -> None:
        self._bounded(lambda: self.processor.force_flush(int(timeout_s * 1000)), timeout_s)

    def shutdown(self, timeout_s: float) -> None:
        done = self._start(self.processor.shutdown)
        if not done.wait(timeout_s):
            # The worker thread is still retrying a dead endpoint: cut the retries short,
            # then give the aborted export a moment to count its failure and warn.
            self.exporter.abort()
            done.wait(ABORT_GRACE_S)

    @classmethod
    def _bounded(cls, action: Callable[[], object], timeout_s: float) -> bool:
        return cls._start(action).wait(timeout_s)

    @staticmethod
    def _start(action: Callable[[], object]) -> threading.Event:
        # The SDK's flush and shutdown wait on exporter retries (up to
        # OTEL_EXPORTER_OTLP_TIMEOUT, 10 s by default); run them on a daemon thread
        # so neither user code nor process exit waits longer than we choose.
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
