"""Behaviour that needs a real process boundary: SIGKILL, cross-process traces, exporters."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from otlp_sink import otlp_sink, rotel_collector

from tracedray.telemetry import otlp_json
from tracedray.telemetry.agent_export import SessionExporter
from tracedray.telemetry.append_file import read_data
from tracedray.telemetry.export_config import export_config
from tracedray.telemetry.spool_convert import sync_traces_dir


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


def test_a_process_never_exports_its_spans_itself(tmp_path: Path, run_python) -> None:
    """OTLP export is the telemetry agent's (agent_export.py): a process with an endpoint,
    even a dead one, writes its spans to its files and loads no exporter."""
    code = configure_code("driver", tmp_path) + (
        "from tracedray import logs\n"
        f"logs.configure('driver', session_dir=pathlib.Path({str(tmp_path)!r}))\n"
        "for _ in range(5):\n"
        "    with telemetry.span('task.submit'):\n"
        "        pass\n"
        "telemetry.force_flush(timeout_s=1.0)\n"
        "print('user code finished', 'grpc' in sys.modules, flush=True)\n"
    )
    result = run_python(code, env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1",
                                   "OTEL_EXPORTER_OTLP_INSECURE": "true",
                                   "OTEL_LOGS_EXPORTER": "otlp"})
    assert result.returncode == 0, result.stderr
    assert "user code finished False" in result.stdout
    assert result.stderr == ""
    assert len(_spans(tmp_path)) == 5
    events = [json.loads(line)["event"] for path in (tmp_path / "logs").glob("*.jsonl")
              for line in read_data(path).decode().splitlines()]
    assert "telemetry.export_failed" not in events


def test_otel_traces_exporter_console_prints_each_span_on_stdout(tmp_path: Path,
                                                                 run_python) -> None:
    code = configure_code("driver", tmp_path) + (
        "with telemetry.span('task.submit', {'tracedray.task.id': 'c1'}):\n"
        "    pass\n"
    )
    result = run_python(code, env={"OTEL_TRACES_EXPORTER": "console"})
    assert result.returncode == 0, result.stderr
    (printed,) = [json.loads(line) for line in result.stdout.splitlines()]
    assert printed["name"] == "task.submit"
    assert printed["attributes"] == {"tracedray.task.id": "c1"}
    assert len(_spans(tmp_path)) == 1  # the file has it too


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf", "http/json"])
def test_a_process_spans_reach_a_receiver_through_the_agent_exporter(
        tmp_path: Path, run_python, protocol: str) -> None:
    """gRPC straight to the test's receiver; HTTP through rotel, a real collector."""
    code = configure_code("gcs", tmp_path) + (
        "with telemetry.span('gcs.flush', {'tracedray.gcs.table': 'tasks'}):\n"
        "    import time\n"
        "    telemetry.record_span('object.put', {'tracedray.object.size': 3},\n"
        "                          start_ns=time.time_ns())\n"
    )
    result = run_python(code, env={"OTEL_SERVICE_NAME": "otlp-test"})
    assert result.returncode == 0, result.stderr
    sync_traces_dir(tmp_path / "traces")  # the agent's conversion
    with otlp_sink() as sink, rotel_collector(sink.port, tmp_path) as collector:
        port = sink.port if protocol == "grpc" else collector.http_port
        config = export_config({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": (
            f"http://127.0.0.1:{port}" + ("" if protocol == "grpc" else "/v1/traces")),
            "OTEL_EXPORTER_OTLP_PROTOCOL": protocol})
        exporter = SessionExporter(tmp_path, config, warn=lambda event, fields: None)
        assert exporter.export_once()
        exporter.close()
        assert sink.wait_until(lambda got: len(got.spans) == 2, timeout=30)
    # record_span's fast path records under the current span.
    put, flush = sorted(sink.spans, key=lambda span: span.name != "object.put")
    assert (put.name, flush.name) == ("object.put", "gcs.flush")
    assert put.trace_id == flush.trace_id
    assert put.resource["service.name"] == "otlp-test"
    assert put.resource["tracedray.component"] == "gcs"
