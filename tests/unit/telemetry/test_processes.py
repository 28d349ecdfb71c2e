"""Behaviour that needs a real process boundary: SIGKILL, cross-process traces, exporters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from tracedray.telemetry import otlp_json
from tracedray.telemetry.append_file import read_data


def configure_code(component: str, session_dir: Path) -> str:
    return (
        "import sys, pathlib\n"
        "from tracedray import telemetry\n"
        f"telemetry.configure({component!r}, session_dir=pathlib.Path({str(session_dir)!r}),"
        " node_id='n1', session_id='s1')\n"
    )


def _spans(session_dir: Path) -> list:
    resource_spans, _ = otlp_json.read_trace_dir(session_dir / "traces")
    return otlp_json.to_readable_spans(resource_spans)


def test_span_ended_before_sigkill_is_on_disk(tmp_path: Path, sigkill_after: Any) -> None:
    code = configure_code("worker", tmp_path) + (
        "with telemetry.span('task.execute', {'tracedray.task.id': 'abc'}):\n"
        "    pass\n"
        "print('ended', flush=True)\n"
        "sys.stdin.read()\n"  # block until killed; no flush or exit handler can run
    )
    pid = sigkill_after(code, "ended")
    (span,) = _spans(tmp_path)
    assert span.name == "task.execute" and span.attributes["tracedray.task.id"] == "abc"
    assert span.resource.attributes["process.pid"] == pid


def test_carrier_continues_the_trace_in_another_process(tmp_path: Path, run_python) -> None:
    parent = run_python(configure_code("driver", tmp_path / "other") + (
        "import json\n"
        "with telemetry.span('task.submit'):\n"
        "    print(json.dumps(telemetry.carrier_from_current()))\n"
    ), env={}, timeout=60)
    assert parent.returncode == 0, parent.stderr
    code = configure_code("worker", tmp_path) + (
        "import json\n"
        "context = telemetry.context_from_carrier(json.loads(sys.argv[1]))\n"
        "with telemetry.span('task.execute', context=context):\n"
        "    pass\n"
    )
    child = subprocess.run([sys.executable, "-c", code, parent.stdout.strip()],
                           capture_output=True, text=True, timeout=60, check=False)
    assert child.returncode == 0, child.stderr
    carrier = json.loads(parent.stdout)
    (execute,) = _spans(tmp_path)
    _, trace_id, span_id, _ = carrier["traceparent"].split("-")
    assert format(execute.context.trace_id, "032x") == trace_id
    assert execute.parent is not None and format(execute.parent.span_id, "016x") == span_id


def test_dead_otlp_endpoint_never_raises_and_exit_is_bounded(tmp_path: Path, run_python) -> None:
    code = configure_code("driver", tmp_path) + (
        "from tracedray import logs\n"
        f"logs.configure('driver', session_dir=pathlib.Path({str(tmp_path)!r}))\n"
        "for _ in range(5):\n"
        "    with telemetry.span('task.submit'):\n"
        "        pass\n"
        "telemetry.force_flush(timeout_s=1.0)\n"
        "print('user code finished', flush=True)\n"
    )
    started = time.monotonic()
    result = run_python(code, env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
                                   "OTEL_EXPORTER_OTLP_INSECURE": "true"})
    elapsed = time.monotonic() - started
    assert result.returncode == 0, result.stderr
    assert "user code finished" in result.stdout
    assert "Traceback" not in result.stderr
    assert elapsed < 15  # flush and shutdown are bounded, not the exporter's 10 s x retries
    assert len(_spans(tmp_path)) == 5  # the trace file is unaffected
    events = [json.loads(line)["event"] for path in (tmp_path / "logs").glob("*.jsonl")
              for line in read_data(path).decode().splitlines()]
    assert "telemetry.export_failed" in events


class _Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []
        self.received = threading.Event()

    def Export(self, request, context):  # noqa: N802 (grpc method name)
        self.requests.append(request)
        self.received.set()
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.mark.parametrize("protocol", ["grpc"])
def test_spans_reach_a_real_otlp_grpc_receiver(tmp_path: Path, run_python, protocol: str) -> None:
    receiver = _Receiver()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        code = configure_code("gcs", tmp_path) + (
            "with telemetry.span('gcs.flush', {'tracedray.gcs.table': 'tasks'}):\n"
            "    import time\n"
            "    telemetry.record_span('object.put', {'tracedray.object.size': 3},\n"
            "                          start_ns=time.time_ns())\n"
        )
        result = run_python(
            code, env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{port}",
                 "OTEL_EXPORTER_OTLP_PROTOCOL": protocol, "OTEL_SERVICE_NAME": "otlp-test"})
        assert result.returncode == 0, result.stderr
        assert receiver.received.wait(timeout=30)
    finally:
        server.stop(grace=None)
    spans = [span for request in receiver.requests for rs in request.resource_spans
             for ss in rs.scope_spans for span in ss.spans]
    # record_span's fast path feeds the exporter too, under the current span.
    assert sorted(span.name for span in spans) == ["gcs.flush", "object.put"]
    put, flush = sorted(spans, key=lambda span: span.name != "object.put")
    assert put.parent_span_id == flush.span_id and put.trace_id == flush.trace_id
    resource = {kv.key: kv.value.string_value
                for kv in receiver.requests[0].resource_spans[0].resource.attributes}
    assert resource["service.name"] == "otlp-test"
    assert resource["tracedray.component"] == "gcs"
    assert os.path.exists(tmp_path / "traces")
