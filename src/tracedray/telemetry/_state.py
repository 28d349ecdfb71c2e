"""The process's telemetry pipeline: one private TracerProvider and its destinations.

We never install a global tracer provider: user code that sets its own keeps it,
and our spans still nest with the user's because both share OTel's context.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider, sampling
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from tracedray import config
from tracedray._version import __version__
from tracedray.telemetry import diagnostics
from tracedray.telemetry._file_processor import SpanFileWriter
from tracedray.telemetry._process_export import ProcessExportPipeline
from tracedray.telemetry._resource import ResourceValue, build_resource
from tracedray.telemetry.export_config import CONSOLE, export_config
from tracedray.telemetry.otlp_json import line_prefix, trace_file_name

INSTRUMENTATION_NAME = "tracedray"
SHUTDOWN_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class TelemetryStatistics:
    enabled: bool
    component: str
    trace_file: str  # "" when spans are not written to a file
    spans_written: int  # lines appended to the trace file
    bytes_written: int
    spans_dropped: int  # spans lost because the trace file could not be written
    # An exporter inside this process ("console"; "" when none). OTLP export is the
    # node's telemetry agent's (telemetry/agent_export.py), not the process's.
    exporter: str
    spans_exported: int
    spans_export_failed: int
    export_failures: int  # failed export batches (each also counted in spans_export_failed)


@dataclass
class Pipeline:
    key: tuple[object, ...]
    pid: int
    component: str
    provider: TracerProvider | None
    tracer: trace.Tracer
    file_writer: SpanFileWriter | None
    exporter: ProcessExportPipeline | None  # OTEL_TRACES_EXPORTER=console
    # For light spans, which build lines and ReadableSpans without the SDK tracer.
    scope: InstrumentationScope | None = None
    span_prefix: str = ""
    ids: IdGenerator = field(default_factory=RandomIdGenerator)
    # The file writer when a finished span needs nothing else — no console exporter, the
    # default sampler — so record_span can write it without building a span object.
    direct_writer: SpanFileWriter | None = None
    # ``ids`` is the SDK's RandomIdGenerator: hot paths may call random.getrandbits
    # themselves, as it does, without its two Python frames per id.
    random_ids: bool = False


_NOOP_TRACER = trace.NoOpTracer()
_lock = threading.RLock()
_pipeline: Pipeline | None = None
_last_statistics: TelemetryStatistics | None = None
_atexit_registered = False


def sdk_disabled(environ: Mapping[str, str]) -> bool:
    return environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


_warn = diagnostics.warn


class _SdkLogBridge(logging.Handler):
    """Routes the OTel SDK's own stdlib warnings (an exporter's) into our JSON logs.

    Without it every failed batch would print a stack of lines on the user's console;
    our exporter wrapper already emits one rate-limited warning.
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self._busy = threading.local()

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(self._busy, "active", False):
            return
        self._busy.active = True
        try:
            diagnostics.report(record.name, record.levelno, "otel.sdk",
                               {"message": record.getMessage(), "logger": record.name})
        except Exception:  # getMessage() with bad %-arguments
            pass
        finally:
            self._busy.active = False


def _install_sdk_log_bridge() -> None:
    sdk_logger = logging.getLogger("opentelemetry")
    if not any(isinstance(handler, _SdkLogBridge) for handler in sdk_logger.handlers):
        sdk_logger.addHandler(_SdkLogBridge())
        sdk_logger.propagate = False


def configure(component: str, *, session_dir: Path | None, node_id: str = "",
              session_id: str = "",
              extra_resource: Mapping[str, ResourceValue] | None = None) -> None:
    """Set up this process's spans; see the package docstring for destinations.

    Idempotent: the same arguments in the same process do nothing. Different
    arguments replace the pipeline (the old one is flushed and closed). In a forked
    child the inherited pipeline is dropped without flushing (its batch queue and
    gRPC channel belong to the parent) and a fresh one is built.
    """
    global _pipeline, _atexit_registered
    key = (component, str(session_dir), node_id, session_id,
           tuple(sorted((extra_resource or {}).items())))
    pid = os.getpid()
    environ = os.environ
    write_files = config.TRACE_FILES.get()  # strict: a bad value is a ConfigError here
    mapped = config.TELEMETRY_MAPPED_FILES.get()
    with _lock:
        current = _pipeline
        if current is not None and current.pid == pid and current.key == key:
            return
        if current is not None:
            if current.pid == pid:
                _close(current)
            elif current.file_writer is not None:
                current.file_writer.shutdown()  # closes the child's copy of the descriptor
        _pipeline = _build(key, component, session_dir if write_files else None, node_id,
                           session_id, extra_resource, environ, mapped=mapped)
        if not _atexit_registered:
            atexit.register(shutdown)
            _atexit_registered = True


def _build(key: tuple[object, ...], component: str, session_dir: Path | None, node_id: str,
           session_id: str, extra_resource: Mapping[str, ResourceValue] | None,
           environ: Mapping[str, str], *, mapped: bool = True) -> Pipeline:
    pid = os.getpid()
    if sdk_disabled(environ):
        return Pipeline(key, pid, component, None, _NOOP_TRACER, None, None)
    resource = build_resource(component, node_id=node_id, session_id=session_id,
                              extra=extra_resource, environ=environ)
    # Sampler from OTEL_TRACES_SAMPLER/_ARG (the SDK reads them when sampler is None).
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    scope = InstrumentationScope(INSTRUMENTATION_NAME, __version__)
    prefix = line_prefix(resource, scope)
    file_writer = None
    if session_dir is not None:
        file_writer = SpanFileWriter(session_dir / "traces" / trace_file_name(component, pid),
                                     prefix, mapped=mapped)
        provider.add_span_processor(file_writer)
    exporter = None
    if CONSOLE in export_config(environ).traces_exporters:
        _install_sdk_log_bridge()
        try:
            exporter = ProcessExportPipeline(_console_exporter(), CONSOLE, _warn)
            provider.add_span_processor(exporter.processor)
        except Exception as exc:  # a broken exporter must not stop the runtime
            _warn("telemetry.exporter_unavailable", {"exporter": CONSOLE,
                                                     "error": f"{type(exc).__name__}: {exc}"})
    tracer = provider.get_tracer(INSTRUMENTATION_NAME, __version__)
    direct = (file_writer if exporter is None and provider.sampler is sampling.DEFAULT_ON
              else None)
    ids = provider.id_generator
    return Pipeline(key, pid, component, provider, tracer, file_writer, exporter, scope,
                    prefix, ids, direct, type(ids) is RandomIdGenerator)


def _console_exporter() -> SpanExporter:
    """The SDK's console exporter, one compact JSON object per span and line."""
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    return ConsoleSpanExporter(formatter=lambda span: span.to_json(indent=None) + "\n")


def current() -> Pipeline | None:
    """This process's pipeline (None before configure()), for record_span."""
    return _pipeline


def tracer() -> trace.Tracer:
    """Our tracer; the API's no-op tracer before configure() or when disabled."""
    pipeline = _pipeline
    return _NOOP_TRACER if pipeline is None else pipeline.tracer


def enabled() -> bool:
    pipeline = _pipeline
    return pipeline is not None and pipeline.provider is not None


def force_flush(timeout_s: float = 5.0) -> None:
    """Push spans queued for an in-process exporter (console) out; trace files need no
    flush, and OTLP export is the telemetry agent's."""
    pipeline = _pipeline
    if pipeline is not None and pipeline.exporter is not None and pipeline.pid == os.getpid():
        pipeline.exporter.force_flush(timeout_s)


def _snapshot(pipeline: Pipeline) -> TelemetryStatistics:
    written = bytes_written = dropped = 0
    trace_file = ""
    if pipeline.file_writer is not None:
        file_stats = pipeline.file_writer.statistics()
        trace_file = file_stats.path
        written, bytes_written, dropped = (file_stats.spans_written, file_stats.bytes_written,
                                           file_stats.write_errors)
    exporter = ""
    exported = export_failed = failures = 0
    if pipeline.exporter is not None:
        export_stats = pipeline.exporter.exporter.statistics()
        exporter = export_stats.exporter
        exported, export_failed, failures = (export_stats.spans_exported,
                                             export_stats.spans_failed,
                                             export_stats.failed_batches)
    return TelemetryStatistics(pipeline.provider is not None, pipeline.component, trace_file,
                               written, bytes_written, dropped, exporter, exported,
                               export_failed, failures)


def _close(pipeline: Pipeline) -> None:
    global _last_statistics
    if pipeline.exporter is not None:
        pipeline.exporter.shutdown(SHUTDOWN_TIMEOUT_S)
    if pipeline.file_writer is not None:
        pipeline.file_writer.shutdown()
    _last_statistics = _snapshot(pipeline)


def shutdown() -> None:
    """Flush and close this process's pipeline; later spans are no-ops until configure()."""
    global _pipeline
    with _lock:
        pipeline = _pipeline
        if pipeline is None:
            return
        _pipeline = None
        if pipeline.pid == os.getpid():
            _close(pipeline)


def statistics() -> TelemetryStatistics:
    pipeline = _pipeline
    if pipeline is not None:
        return _snapshot(pipeline)
    if _last_statistics is not None:
        return _last_statistics
    return TelemetryStatistics(False, "", "", 0, 0, 0, "", 0, 0, 0)
