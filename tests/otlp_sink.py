"""An OTLP/gRPC receiver inside the test (what it got, by span id) and a real collector.

``OtlpSink`` keeps every span and log record it is sent. ``rotel_collector`` runs
rotel (a Rust OpenTelemetry collector, the ``rotel`` wheel of the test extra) with its
OTLP gRPC and HTTP receivers, forwarding everything to a sink: a test exports to rotel
and asserts on what came out of it.

Importable from every test: pytest puts ``tests/`` on ``sys.path`` for its conftest.
"""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


@dataclass(frozen=True)
class ReceivedSpan:
    span_id: str
    trace_id: str
    name: str
    resource: dict[str, Any]
    attributes: dict[str, Any]


@dataclass(frozen=True)
class ReceivedLog:
    time_ns: int
    body: str
    severity: str
    trace_id: str
    span_id: str
    resource: dict[str, Any]
    attributes: dict[str, Any]


def _plain(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "kvlist_value":
        return {kv.key: _plain(kv.value) for kv in value.kvlist_value.values}
    if kind == "array_value":
        return [_plain(item) for item in value.array_value.values]
    return getattr(value, kind) if kind else None


def _attributes(items: Any) -> dict[str, Any]:
    return {kv.key: _plain(kv.value) for kv in items}


class OtlpSink(trace_service_pb2_grpc.TraceServiceServicer,
               logs_service_pb2_grpc.LogsServiceServicer):
    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.logs: list[ReceivedLog] = []
        self.requests = 0
        self.changed = threading.Condition()
        self.port = 0

    def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - gRPC method name
        with self.changed:
            self.requests += 1
            if isinstance(request, logs_service_pb2.ExportLogsServiceRequest):
                for entry in request.resource_logs:
                    resource = _attributes(entry.resource.attributes)
                    for scope in entry.scope_logs:
                        self.logs.extend(
                            ReceivedLog(r.time_unix_nano, r.body.string_value, r.severity_text,
                                        r.trace_id.hex(), r.span_id.hex(), resource,
                                        _attributes(r.attributes))
                            for r in scope.log_records)
                answer: Any = logs_service_pb2.ExportLogsServiceResponse()
            else:
                for entry in request.resource_spans:
                    resource = _attributes(entry.resource.attributes)
                    for scope in entry.scope_spans:
                        self.spans.extend(
                            ReceivedSpan(s.span_id.hex(), s.trace_id.hex(), s.name, resource,
                                         _attributes(s.attributes)) for s in scope.spans)
                answer = trace_service_pb2.ExportTraceServiceResponse()
            self.changed.notify_all()
        return answer

    def span_ids(self) -> set[str]:
        with self.changed:
            return {span.span_id for span in self.spans}

    def wait_until(self, condition: Callable[[OtlpSink], bool], timeout: float) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: condition(self), timeout)


@contextmanager
def otlp_sink(port: int = 0) -> Iterator[OtlpSink]:
    """A receiver on 127.0.0.1 (``port`` 0: an ephemeral one, in ``sink.port``)."""
    sink = OtlpSink()
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    # Both services call Export; the request's type tells them apart.
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(sink, server)
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(sink, server)
    sink.port = server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    try:
        yield sink
    finally:
        server.stop(grace=None)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (a dead endpoint)."""
    return free_port()


@dataclass(frozen=True)
class Collector:
    grpc_port: int
    http_port: int


@contextmanager
def rotel_collector(forward_to: int, workdir: Path) -> Iterator[Collector]:
    """rotel receiving OTLP on gRPC and HTTP ports of its own, exporting (gRPC) to the
    sink on ``forward_to``."""
    import rotel

    binary = Path(rotel.__file__).parent / "rotel-agent"
    collector = Collector(free_port(), free_port())
    log = open(workdir / "rotel.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [str(binary), "start", "--otlp-grpc-endpoint", f"127.0.0.1:{collector.grpc_port}",
         "--otlp-http-endpoint", f"127.0.0.1:{collector.http_port}",
         "--exporter", "otlp", "--otlp-exporter-endpoint", f"http://127.0.0.1:{forward_to}",
         "--otlp-exporter-protocol", "grpc", "--batch-timeout", "100ms",
         "--pid-file", str(workdir / "rotel.pid")],
        stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", collector.grpc_port), 0.2).close()
                socket.create_connection(("127.0.0.1", collector.http_port), 0.2).close()
                break
            except OSError:
                assert process.poll() is None, (workdir / "rotel.log").read_text()
                assert time.monotonic() < deadline, "rotel did not start listening"
                time.sleep(0.05)
        yield collector
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
